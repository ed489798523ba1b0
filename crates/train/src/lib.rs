//! gradcomp-train: compressed data-parallel training on burn.
//!
//! - [`api`]: the library's front door: a [`DataParallel`](api::DataParallel)
//!   handle for any burn model and training loop, in-process or under MPI.
//! - [`strategy`]: how workers combine their work (synchronous compressed
//!   exchange, CELGC), behind one trait.
//! - [`trainer`]: the built-in trainer (`gradcomp train`), the API's first
//!   user: launch, step loop, records, checkpoints, evaluation.
//! - [`data`], [`models`]: datasets (IDX images of any shape, text corpora)
//!   and the built-in models, which take their input shape from the data.
//! - [`records`]: the typed run records that `gradcomp report` reads.

pub mod api;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod device;
#[cfg(feature = "device-kernels")]
pub mod device_grad;
pub mod layout;
#[cfg(feature = "learner")]
pub mod learner;
pub mod models;
pub mod optim;
pub mod params;
pub mod records;
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
    use crate::models::{Batch, ImageTask, LeNet5, Net};

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
}
