//! `gradcomp bench pipeline`: a data-parallel training step in three modes:
//! the exchange's buckets one after another (`sequential`); pipelined
//! through the communication thread after the whole backward pass
//! (`pipelined`); and pipelined with a staged backward pass, each bucket
//! leaving as soon as its stage is done while the next stage runs
//! (`overlapped`: the model's cuts, `Net::staged_loss`; ResNet-18 cuts after
//! the stem and every block, the other models have none).
//!
//! Every rank runs the model's forward and backward pass on its own
//! synthetic minibatch, reads the gradient out, and exchanges it, in rounds
//! that rotate the modes (each round starts with the next one), so machine
//! noise hits all alike. The model is not updated: every step costs the
//! same, and the modes' results are bitwise equal anyway. Per step, each
//! figure is the slowest rank's.
//!
//! The target: pipelined, a step takes at most
//! max(compute + compress, wire) + 15%, where compute (forward, backward,
//! read-out), compress and wire are the sequential mode's own stage times.
//! Without a staged backward the wire cannot overlap the backward pass; the
//! bound reachable then, compute + max(compress + decode, wire), is printed
//! beside it, and so is the bound with the whole backward pass overlapped
//! but not the forward pass (as DDP overlaps), forward + max(backward +
//! compress + decode, wire).
//!
//! Shaped links: `scripts/netsim.sh run 4 100mbit gradcomp bench pipeline --backend mpi`.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::tensor::Device;
use clap::Args as ClapArgs;
use gradcomp_comm::Collective;
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::backward::read::BurnStages;
use gradcomp_dp::exchange::{Gradient, GradientExchange, StepInput};
use gradcomp_dp::grad_stages::CompleteGrad;
use gradcomp_dp::DataParallelConfig;
use gradcomp_train::data::{synthetic, ImageLoader};
use gradcomp_train::models::{FashionCnn, LeNet5, Net, ResNet18};
use serde::Serialize;

use super::output::Backend;
use super::timing::median;

#[derive(ClapArgs, Clone)]
pub struct Args {
    #[arg(long, value_enum, default_value = "in-process")]
    backend: Backend,
    /// Workers (in-process); with MPI the world size, which must match if given.
    #[arg(long)]
    workers: Option<usize>,
    /// The model: lenet5, cnn (the Fashion CNN), resnet18 (CIFAR form).
    #[arg(long, default_value = "resnet18", value_parser = ["lenet5", "cnn", "resnet18"])]
    model: String,
    /// Minibatch per worker.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Comma-separated compressors, each measured in both modes.
    #[arg(long, default_value = "dense,topk")]
    compressors: String,
    /// Bucket size in MiB (`compression.bucket_mb`).
    #[arg(long, default_value_t = 4.0)]
    bucket_mb: f64,
    /// Timed steps per mode and round.
    #[arg(long, default_value_t = 4)]
    steps: usize,
    /// Rounds; each runs both modes.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Per-step medians of one compressor in one mode (slowest rank per step).
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Figures {
    /// The forward pass (part of compute).
    forward: f64,
    compute: f64,
    compress: f64,
    wire: f64,
    decode: f64,
    step: f64,
}

#[derive(Serialize)]
struct Row {
    model: String,
    compressor: String,
    workers: usize,
    buckets: usize,
    bucket_mb: f64,
    /// Stages of the staged backward pass (1: the model has no cuts).
    stages: usize,
    sequential: Figures,
    pipelined: Figures,
    overlapped: Figures,
    /// max(compute + compress, wire) × 1.15, from the sequential stages.
    target: f64,
    /// compute + max(compress + decode, wire): no overlap with backward.
    bound_without_backward_overlap: f64,
    /// forward + max(backward + compress + decode, wire): the wire overlaps
    /// the whole backward pass but not the forward pass, as in DDP.
    bound_with_backward_overlap: f64,
    /// Whether the overlapped step meets the target.
    met: bool,
}

pub fn run(a: &Args) -> Result<()> {
    if a.steps == 0 || a.rounds == 0 || a.batch == 0 {
        bail!("--steps, --rounds and --batch must be at least 1");
    }
    if a.bucket_mb.is_nan() || a.bucket_mb <= 0.0 {
        bail!("--bucket-mb must be > 0");
    }
    if let Some(rows) = super::output::rows_on(a.backend, a.workers, |c| measure(c, a))? {
        print_rows(&rows, a.json);
    }
    Ok(())
}

fn measure(c: &mut dyn Collective, a: &Args) -> Result<Vec<Row>> {
    let device = gradcomp_train::default_device();
    device.seed(1);
    match a.model.as_str() {
        "lenet5" => measure_model(c, a, LeNet5::new(&super::output::image_task(&a.model), &device), &device),
        "cnn" => measure_model(c, a, FashionCnn::new(&super::output::image_task(&a.model), &device), &device),
        _ => measure_model(c, a, ResNet18::new(&super::output::image_task(&a.model), &device), &device),
    }
}

fn measure_model<M: Net>(c: &mut dyn Collective, a: &Args, model: M, device: &Device) -> Result<Vec<Row>> {
    let (rank, n) = (c.rank(), c.world_size());
    let t = super::output::image_task(&a.model);
    let data = synthetic::images(a.batch, 1 + rank as u64, 0, t.shape, t.classes);
    let batch = ImageLoader::shard(data, 0, 1, a.batch, 1).batch(0, 0);
    let layout = gradcomp_dp::params::layout(&model);
    let mut grad = Vec::new();
    let mut out = vec![0.0; layout.total()];
    let stages = model.staged_loss(&batch, device).1.len();
    let mut rows = Vec::new();
    for name in a.compressors.split(',').map(str::trim) {
        let compressor = CompressorConfig::named(name)
            .with_context(|| format!("--compressors: `{name}` is not a compressor name"))?;
        // The topology the compressor needs, as the library picks it.
        let exchange = |pipeline| {
            let cfg =
                DataParallelConfig::new(compressor.clone()).with_buckets(a.bucket_mb, pipeline).with_seed(1);
            GradientExchange::new(&layout, &cfg, n, 1)
        };
        let mut modes = [exchange(false), exchange(true), exchange(true)];
        let buckets = modes[0].buckets().len();
        let mut per_step: [Vec<[f64; 6]>; 3] = Default::default();
        let mut step = 0u64;
        for round in 0..a.rounds + 1 {
            for i in 0..3 {
                let mode = (i + round) % 3;
                for _ in 0..a.steps {
                    c.barrier()?;
                    let start = Instant::now();
                    let (forward, compute, st) = if mode == 2 {
                        let (loss, cuts) = model.staged_loss(&batch, device);
                        let forward = start.elapsed().as_secs_f64();
                        let mut staged = BurnStages::new(&model, cuts.backward(loss), &layout, &mut grad);
                        let input = StepInput { step, lr: 0.01, loss: None, measure: false };
                        let st = modes[mode].exchange(Gradient::Host(&mut staged), &input, &mut out, c)?;
                        (forward, forward + staged.backward_seconds + staged.read_seconds, st)
                    } else {
                        let loss = model.loss(&batch, device);
                        let forward = start.elapsed().as_secs_f64();
                        let grads = loss.backward();
                        gradcomp_dp::params::read_grads(&model, &grads, &mut grad);
                        let compute = start.elapsed().as_secs_f64();
                        let input = StepInput { step, lr: 0.01, loss: None, measure: false };
                        let grad = Gradient::Host(&mut CompleteGrad(&grad));
                        (forward, compute, modes[mode].exchange(grad, &input, &mut out, c)?)
                    };
                    let total = start.elapsed().as_secs_f64();
                    step += 1;
                    // The slowest rank's figures, agreed outside the timing.
                    let f = slowest_rank(
                        c,
                        [
                            compute,
                            st.compress_seconds,
                            st.communicate_seconds,
                            st.decode_seconds,
                            total,
                            forward,
                        ],
                    )?;
                    // Round 0 warms both modes up (buffers grow, caches fill).
                    if round > 0 {
                        per_step[mode].push(f.map(f64::from));
                    }
                }
            }
        }
        rows.push(row(a, name, n, buckets, stages + 1, &per_step));
    }
    Ok(rows)
}

/// Each rank's per-step `figures` as `f32`, replaced by their maximum over
/// the ranks (the slowest rank's).
fn slowest_rank(c: &mut dyn Collective, figures: [f64; 6]) -> Result<[f32; 6]> {
    let mut f = figures.map(|v| v as f32);
    c.allreduce_max_f32(&mut f)?;
    Ok(f)
}

/// The medians of steps' [compute, compress, wire, decode, step, forward].
fn median_figures(steps: &[[f64; 6]]) -> Figures {
    let col = |j: usize| median(steps.iter().map(|s| s[j]).collect());
    Figures { forward: col(5), compute: col(0), compress: col(1), wire: col(2), decode: col(3), step: col(4) }
}

/// One compressor's row from its kept steps in each mode (sequential,
/// pipelined, overlapped): the medians, the target and the bounds.
fn row(a: &Args, name: &str, n: usize, buckets: usize, stages: usize, per_step: &[Vec<[f64; 6]>; 3]) -> Row {
    let [seq, pip, ovl] = [0, 1, 2].map(|m| median_figures(&per_step[m]));
    let target = 1.15 * (seq.compute + seq.compress).max(seq.wire);
    Row {
        model: a.model.clone(),
        compressor: name.to_string(),
        workers: n,
        buckets,
        bucket_mb: a.bucket_mb,
        stages,
        sequential: seq,
        pipelined: pip,
        overlapped: ovl,
        target,
        bound_without_backward_overlap: seq.compute + (seq.compress + seq.decode).max(seq.wire),
        bound_with_backward_overlap: seq.forward
            + (seq.compute - seq.forward + seq.compress + seq.decode).max(seq.wire),
        met: ovl.step <= target,
    }
}

fn print_rows(rows: &[Row], json: bool) {
    use super::output::Column;
    let columns = [
        Column::name("compressor", 10),
        Column::number("N", 3),
        Column::number("bkts", 4),
        Column::number("mode", 10),
        Column::number("compute", 8),
        Column::number("compress", 8),
        Column::number("wire", 8),
        Column::number("decode", 8),
        Column::number("step (ms)", 10),
        Column::number("target", 10),
        Column::number("ratio", 8),
        Column::number("no-bwd bnd", 10),
        Column::number("bwd bnd", 10),
        Column::number("met", 6),
    ];
    super::output::print_rows(rows, json, &columns, |r| {
        let ms = |s: f64| format!("{:.1}", s * 1e3);
        [("sequential", &r.sequential), ("pipelined", &r.pipelined), ("overlapped", &r.overlapped)]
            .into_iter()
            .map(|(mode, f)| {
                // The target and bounds are the pipelined forms'.
                let pipelined = |v: String| if mode == "sequential" { String::new() } else { v };
                vec![
                    r.compressor.clone(),
                    r.workers.to_string(),
                    r.buckets.to_string(),
                    mode.to_string(),
                    ms(f.compute),
                    ms(f.compress),
                    ms(f.wire),
                    ms(f.decode),
                    ms(f.step),
                    pipelined(ms(r.target)),
                    pipelined(format!("{:.3}", f.step / r.target * 1.15)),
                    pipelined(ms(r.bound_without_backward_overlap)),
                    pipelined(ms(r.bound_with_backward_overlap)),
                    (if mode != "overlapped" {
                        ""
                    } else if r.met {
                        "yes"
                    } else {
                        "NO"
                    })
                    .to_string(),
                ]
            })
            .collect()
    });
    if !json {
        println!(
            "ratio: step / max(compute + compress, wire); the target is <= 1.15 (met: overlapped, {} backward stages)",
            rows.first().map_or(1, |r| r.stages)
        );
    }
}
