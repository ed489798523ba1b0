//! The flat buffers of `gradcomp_dp::params` round-trip a built-in model's
//! gradients and parameters through burn; the GPT's size, causality and
//! learning.

use burn::tensor::{Int, Tensor, TensorData};
use gradcomp_dp::{default_device, params};

use crate::data::Batch;
use crate::models::{Gpt, GptConfig, ImageTask, LeNet5, Net};

fn synthetic(n: usize) -> Batch {
    // Class c lights up row 3c of the image: trivially learnable.
    let mut pixels = vec![0.0f32; n * 784];
    let labels: Vec<i64> = (0..n as i64).map(|i| i % 10).collect();
    for (i, &c) in labels.iter().enumerate() {
        for x in 0..28 {
            pixels[i * 784 + (c as usize * 2 + 4) * 28 + x] = 1.0;
        }
    }
    Batch::Images { pixels, labels, channels: 1, height: 28, width: 28 }
}

#[test]
fn flat_round_trip_through_burn_gradients_lowers_the_loss() {
    let device = default_device();
    device.seed(1);
    let mut model = LeNet5::new(&ImageTask { shape: [1, 28, 28], classes: 10 }, &device);
    let lay = params::layout(&model);
    assert_eq!(lay.total(), 431_080);
    assert_eq!(lay.slots().len(), 8);
    let batch = synthetic(32);
    let mut g = Vec::new();
    let first: f32 = model.loss(&batch, &device).into_scalar();
    let mut optim = burn::optim::SgdConfig::new().init();
    for _ in 0..10 {
        let loss = model.loss(&batch, &device);
        let grads = loss.backward();
        params::read_grads(&model, &grads, &mut g);
        assert_eq!(g.len(), lay.total());
        // Flat out and back into burn gradients: the same update as burn's own.
        model = optim.step(0.1, model.clone(), params::grads_params(&model, &g));
    }
    let last: f32 = model.loss(&batch, &device).into_scalar();
    assert!(last < first * 0.95, "loss {first} -> {last}");
    let mut p = Vec::new();
    params::read_params(&model, &mut p);
    let ids = params::param_ids(&model);
    let fresh = LeNet5::new(&ImageTask { shape: [1, 28, 28], classes: 10 }, &device);
    let copy = params::assign_param_ids(params::write_params(fresh, &p), &ids);
    let mut q = Vec::new();
    params::read_params(&copy, &mut q);
    assert_eq!(p, q);
    assert_eq!(params::param_ids(&copy), ids);
}

/// A token batch of `rows` rows of `steps` tokens below `vocab`, each row a
/// repeating pattern (learnable), targets the next tokens.
fn tokens(rows: usize, steps: usize, vocab: i64, key: u64) -> Batch {
    let row = |r: usize| (0..=steps).map(move |i| (r as i64 * 3 + i as i64 * 7) % vocab);
    let inputs = (0..rows).flat_map(|r| row(r).take(steps)).collect();
    let targets = (0..rows).flat_map(|r| row(r).skip(1)).collect();
    Batch::Tokens { inputs, targets, batch: rows, steps, key }
}

fn tiny_gpt() -> GptConfig {
    GptConfig {
        vocab: 50,
        layers: 2,
        heads: 2,
        embed: 16,
        mlp: Some(24),
        context: 12,
        dropout: 0.0,
        tie: true,
    }
}

#[test]
fn gpt_parameters_are_its_layers_and_the_default_is_5_75m() {
    let device = default_device();
    device.seed(1);
    // Embeddings, per block two layer norms, q/k/v/o with biases and the
    // MLP's two layers, the final layer norm, and an untied head.
    let formula = |c: &GptConfig| {
        let (d, m) = (c.embed, c.mlp_width());
        let block = 2 * 2 * d + 4 * (d * d + d) + (d * m + m) + (m * d + d);
        c.vocab * d + c.context * d + c.layers * block + 2 * d + if c.tie { 0 } else { d * c.vocab }
    };
    for c in [
        GptConfig::default(),
        GptConfig { tie: false, ..GptConfig::default() },
        tiny_gpt(),
        GptConfig { tie: false, mlp: None, ..tiny_gpt() },
    ] {
        let lay = params::layout(&Gpt::new(&c, &device));
        assert_eq!(lay.total(), formula(&c), "{c:?}");
        // 2 embeddings, 16 tensors per block, the final norm's 2, the head.
        assert_eq!(lay.slots().len(), 2 + 16 * c.layers + 2 + usize::from(!c.tie), "{c:?}");
    }
    assert_eq!(formula(&GptConfig::default()), 5_752_320);
    assert_eq!(formula(&GptConfig { tie: false, ..GptConfig::default() }), 8_312_320);
}

#[test]
fn gpt_positions_see_no_later_token() {
    let device = default_device();
    device.seed(2);
    let model = Gpt::new(&GptConfig { tie: false, ..tiny_gpt() }, &device);
    let Batch::Tokens { inputs, .. } = tokens(1, 10, 50, 0) else { unreachable!() };
    let logits = |inputs: Vec<i64>| -> Vec<f32> {
        let x = Tensor::<2, Int>::from_data(TensorData::new(inputs, [1, 10]), &device);
        model.logits(x, 0).into_data().try_to_vec::<f32>().unwrap()
    };
    let before = logits(inputs.clone());
    let mut changed = inputs;
    changed[6] = (changed[6] + 1) % 50;
    let after = logits(changed);
    let (early, late) = (6 * 50, 10 * 50);
    let largest = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(largest(&before[..early], &after[..early]) < 1e-6, "an earlier position saw token 6");
    assert!(largest(&before[early..late], &after[early..late]) > 1e-4, "token 6 changed nothing");
}

#[test]
fn gpt_loss_falls_on_a_tiny_model() {
    let device = default_device();
    device.seed(3);
    for c in [tiny_gpt(), GptConfig { tie: false, dropout: 0.1, ..tiny_gpt() }] {
        let mut model = Gpt::new(&c, &device);
        let mut optim = burn::optim::AdamConfig::new().init();
        let first: f32 = model.loss(&tokens(4, 12, 50, 0), &device).into_scalar();
        for step in 0..30 {
            let loss = model.loss(&tokens(4, 12, 50, step), &device);
            let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.01, model, grads);
        }
        let last: f32 = model.loss(&tokens(4, 12, 50, 0), &device).into_scalar();
        assert!(last < first * 0.5, "{c:?}: loss {first} -> {last}");
    }
}

#[test]
fn gpt_layout_and_initialization_are_gpt2s() {
    let device = default_device();
    device.seed(4);
    let c = GptConfig { tie: false, ..GptConfig::default() };
    let model = Gpt::new(&c, &device);
    let lay = params::layout(&model);
    let (v, d, m, t) = (c.vocab, c.embed, c.mlp_width(), c.context);
    // bench/peer/models.py's `Gpt` in `parameters()` order, torch's
    // `[out, in]` linear weights read as burn's `[in, out]`.
    let block = [
        vec![d],
        vec![d],
        vec![d, d],
        vec![d],
        vec![d, d],
        vec![d],
        vec![d, d],
        vec![d],
        vec![d, d],
        vec![d],
        vec![d],
        vec![d],
        vec![d, m],
        vec![m],
        vec![m, d],
        vec![d],
    ];
    let mut shapes = vec![vec![v, d], vec![t, d]];
    (0..c.layers).for_each(|_| shapes.extend(block.iter().cloned()));
    shapes.extend([vec![d], vec![d], vec![d, v]]);
    let got: Vec<Vec<usize>> = lay.slots().iter().map(|s| s.shape.clone()).collect();
    assert_eq!(got, shapes);
    let mut p = Vec::new();
    params::read_params(&model, &mut p);
    // Weights N(0, 0.02); biases and the norms' shifts 0; the norms' scales 1:
    // counted from the token embedding's end, 16 tensors a block, the norms'
    // scales are at 0 and 10 (the final norm's at 0 after the last block).
    for (i, s) in lay.slots().iter().enumerate() {
        let x = lay.view(&p, i);
        let mean = x.iter().map(|&a| f64::from(a)).sum::<f64>() / x.len() as f64;
        let std = (x.iter().map(|&a| (f64::from(a) - mean).powi(2)).sum::<f64>() / x.len() as f64).sqrt();
        let in_block = i.checked_sub(2).map(|j| j % 16);
        let scale =
            s.shape.len() == 1 && (in_block == Some(0) || in_block == Some(10) || i == 2 + 16 * c.layers);
        if s.shape.len() == 2 {
            assert!(mean.abs() < 2e-3 && (std - 0.02).abs() < 1e-3, "{}: mean {mean}, std {std}", s.name);
        } else {
            let want = if scale { 1.0 } else { 0.0 };
            assert!(x.iter().all(|&a| a == want), "{} is not all {want}", s.name);
        }
    }
}
