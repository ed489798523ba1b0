//! `gradcomp bench compress --model NAME`: one step of a compressor over a
//! real model's set of layers, on one thread: for every tensor its memory
//! folds in the gradient, the compressor runs all its rounds as the sole
//! worker, the memory keeps the residual, and the message is decoded into the
//! update. Tensors the compressor leaves dense (PowerSGD's vectors) are
//! copied. This is what PyTorch's `powerSGD_hook` does per bucket, so
//! `scripts/bench-powersgd.sh` times the hook on the same shapes
//! (`--print-shapes`) beside it.

use std::hint::black_box;
use std::time::Duration;

use anyhow::{bail, Result};
use burn::module::Module;
use gradcomp_compress::memory::{Memory, ResidualForm};
use gradcomp_compress::{compress_as_sole_worker, Compressor, Message, RngKey, UnitContext, UnitRng};
use gradcomp_train::models::{FashionCnn, LeNet5, ResNet18};

use super::compress_cases::{config_for, emit, Row};
use super::timing::median_seconds;

/// The parameter shapes of `model` (a name `bench pipeline` knows).
pub fn shapes(model: &str) -> Result<Vec<Vec<usize>>> {
    let device = gradcomp_train::default_device();
    let task = super::output::image_task(model);
    let layout = match model {
        "lenet5" => layout_of(LeNet5::new(&task, &device)),
        "cnn" => layout_of(FashionCnn::new(&task, &device)),
        "resnet18" => layout_of(ResNet18::new(&task, &device)),
        _ => bail!("--model {model}: choose lenet5, cnn or resnet18"),
    };
    Ok(layout.slots().iter().map(|s| s.shape.clone()).collect())
}

fn layout_of<M: Module>(model: M) -> gradcomp_dp::GradientLayout {
    gradcomp_dp::params::layout(&model)
}

/// One tensor's state: its compressor, memory, gradient and update.
struct Tensor {
    compressor: Option<Box<dyn Compressor>>,
    memory: Box<dyn Memory>,
    grad: Vec<f32>,
    out: Vec<f32>,
}

/// Rows of one step over `model`'s layers for each of `names`.
pub fn run(model: &str, names: &[&str], seed: u64, min_time: Duration, json: bool) -> Result<()> {
    let shapes = shapes(model)?;
    let total: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    if !json {
        println!(
            "gradcomp bench compress --model {model}: {} tensors, {total} parameters; one step (memory, all rounds as the sole worker, decode) on one thread",
            shapes.len()
        );
    }
    for &name in names {
        let cfg = config_for(name, None);
        let mut rng = UnitRng::from_parts(&[seed, total as u64]);
        let mut tensors: Vec<Tensor> = shapes
            .iter()
            .map(|shape| {
                let n = shape.iter().product();
                Tensor {
                    compressor: cfg.compresses(shape).then(|| cfg.build_for(shape)),
                    memory: cfg.resolve_memory(Default::default()).build(
                        ResidualForm::Raw,
                        0.9,
                        cfg.method().memory_decay(),
                    ),
                    grad: (0..n).map(|_| rng.next_gaussian() as f32).collect(),
                    out: vec![0.0; n],
                }
            })
            .collect();
        let mut msg = Message::default();
        let mut step = cfg.first_compressed_step();
        let (mut wire, mut selected) = (0usize, 0usize);
        let seconds = median_seconds(min_time, 3, || {
            (wire, selected) = (0, 0);
            for (unit, t) in tensors.iter_mut().enumerate() {
                match &mut t.compressor {
                    Some(c) => {
                        let ctx =
                            UnitContext { key: RngKey::new(7, 0, step, unit as u32), ..Default::default() };
                        let acc = t.memory.compensate(black_box(&t.grad), 0.1);
                        compress_as_sole_worker(c.as_mut(), acc, &ctx, &mut msg);
                        t.memory.update(&msg);
                        t.out.fill(0.0);
                        msg.add_to(1.0, &mut t.out);
                        wire += gradcomp_compress::codec::encoded_len(&msg);
                        selected += msg.selected();
                    }
                    None => {
                        t.out.copy_from_slice(&t.grad);
                        wire += 4 * t.grad.len();
                        selected += t.grad.len();
                    }
                }
                black_box(&t.out);
            }
            step += 1;
        });
        emit(
            json,
            &Row {
                compressor: cfg.name().into(),
                op: format!("step_{model}"),
                elements: total,
                density: None,
                seconds,
                gbytes_per_s: 4.0 * total as f64 / seconds / 1e9,
                ratio_to_read_pass: 0.0,
                selected,
                wire_bytes: wire,
            },
        );
    }
    Ok(())
}

/// `--print-shapes`: the shapes as one JSON array, for the PyTorch side.
pub fn print_shapes(model: &str) -> Result<()> {
    println!("{}", serde_json::to_string(&shapes(model)?)?);
    Ok(())
}

/// The matrix PowerSGD sees for a flat buffer of `n` elements in `bench
/// compress`: rows the largest divisor of `n` not above √n.
pub fn matrix_shape(n: usize) -> Vec<usize> {
    let root = (n as f64).sqrt() as usize;
    let rows = (1..=root.max(1)).rev().find(|&r| n.is_multiple_of(r)).unwrap_or(1);
    vec![rows, n / rows]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_buffers_become_the_squarest_matrix() {
        assert_eq!(matrix_shape(1 << 20), vec![1024, 1024]);
        assert_eq!(matrix_shape(25_000_000), vec![5000, 5000]);
        assert_eq!(matrix_shape(1 << 10), vec![32, 32]);
        assert_eq!(matrix_shape(7), vec![1, 7]);
    }

    #[test]
    fn resnet18_has_its_layers() {
        let s = shapes("resnet18").unwrap();
        let total: usize = s.iter().map(|s| s.iter().product::<usize>()).sum();
        assert!(total > 11_000_000 && total < 11_300_000, "{total}");
        assert!(s.iter().any(|s| s == &[512, 512, 3, 3]));
    }
}
