//! The flat buffers of `gradcomp_dp::params` round-trip a built-in model's
//! gradients and parameters through burn.

use gradcomp_dp::{default_device, params};

use crate::data::Batch;
use crate::models::{ImageTask, LeNet5, Net};

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
