//! gradcomp-train: the data-parallel training engine on burn.

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod layout;
pub mod metrics;
pub mod models;
pub mod optim;
pub mod params;
pub mod schedule;
pub mod strategy;
pub mod trainer;

pub use layout::{GradientLayout, ParamSlot};

/// The compute device gradcomp trains on by default: burn's pure-Rust CPU
/// backend `flex`, with autodiff.
pub fn default_device() -> burn::tensor::Device {
    burn::tensor::Device::flex().autodiff()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{Batch, LeNet5, Net};

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
    fn flat_sgd_round_trip_lowers_the_loss() {
        let device = default_device();
        device.seed(1);
        let mut model = LeNet5::new(&device);
        let lay = params::layout(&model);
        assert_eq!(lay.total(), 431_080);
        assert_eq!(lay.slots().len(), 8);
        let batch = synthetic(32);
        let mut p = Vec::new();
        let mut g = Vec::new();
        let first: f32 = model.loss(&batch, &device).into_scalar();
        for _ in 0..10 {
            let loss = model.loss(&batch, &device);
            let grads = loss.backward();
            params::read_grads(&model, &grads, &mut g);
            params::read_params(&model, &mut p);
            assert_eq!((g.len(), p.len()), (lay.total(), lay.total()));
            for (w, d) in p.iter_mut().zip(&g) {
                *w -= 0.1 * d;
            }
            model = params::write_params(model, &p, &device);
        }
        let last: f32 = model.loss(&batch, &device).into_scalar();
        assert!(last < first * 0.95, "loss {first} -> {last}");
        let mut q = Vec::new();
        params::read_params(&model, &mut q);
        assert_eq!(p, q);
    }
}
