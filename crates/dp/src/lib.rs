//! gradcomp-dp: compressed data-parallel training for any burn model and
//! any training loop.
//!
//! Each worker (a thread with an in-process collective, or an MPI rank)
//! builds a [`DataParallelConfig`], calls [`DataParallelConfig::init`] with
//! its collective and its model (rank 0's parameters are broadcast, so the
//! replicas start identical), and then, every step, hands its loss and its
//! burn optimizer to [`DataParallel::step`]:
//!
//! ```ignore
//! use gradcomp_dp::prelude::*;
//!
//! let (mut dp, mut model) = DataParallelConfig::new(CompressorConfig::terngrad()).init(collective, model)?;
//! let mut optim = AdamWConfig::new().init();                 // any burn optimizer
//! for (epoch, batch) in batches {
//!     model = dp.begin_step(model, epoch)?;                  // CELGC's rounds, density warm-up
//!     let loss = model.forward_loss(batch);
//!     model = dp.step(model, loss, &mut optim, lr)?;         // compress, exchange, decode, average, apply
//! }
//! ```
//!
//! Compression, the memories (error feedback, DGC momentum), the topology,
//! byte metering and the step statistics all live behind the handle, and so
//! does the step size: CELGC's clipped step and lr-scaled error feedback
//! reach the optimizer without the caller seeing them.
//!
//! Modules by job:
//! - [`config`]: [`DataParallelConfig`] and every option it reads.
//! - `handle`: [`DataParallel`], one worker's handle.
//! - [`backward`]: what a step takes ([`Backward`]) and the staged backward
//!   pass ([`Cuts`]) that lets the exchange overlap it.
//! - [`exchange`]: the compressed exchange, one schedule for the host and
//!   the device; `strategy`: synchronous exchange and CELGC behind one trait.
//! - [`params`], [`layout`]: burn parameters and gradients ↔ flat buffers.
//! - [`custom`]: a compressor of the user's own.
//! - [`predict`]: the performance model's methods and step times.
//! - `learner` (feature `learner`): a burn-train training strategy.

pub mod backward;
mod checksum;
pub mod config;
pub mod custom;
#[cfg(feature = "device-kernels")]
pub mod device_grad;
mod error;
pub mod exchange;
pub mod grad_stages;
mod handle;
pub mod layout;
#[cfg(feature = "learner")]
pub mod learner;
pub mod params;
pub mod predict;
mod strategy;

pub use backward::{Backward, Cuts, StagedBackward};
pub use config::{DataParallelConfig, OnNonFinite, Topology};
pub use custom::CustomCompressor;
pub use error::{ExchangeError, SyncError};
pub use handle::{CompressionLocation, DataParallel, DataParallelState, StepStats};
pub use layout::{GradientLayout, ParamSlot};

/// Everything a burn user needs for compressed data-parallel training.
pub mod prelude {
    pub use crate::{
        Backward, CompressionLocation, CustomCompressor, Cuts, DataParallel, DataParallelConfig, OnNonFinite,
        SyncError, Topology,
    };
    pub use gradcomp_comm::{Collective, InProcessGroup};
    pub use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
    pub use gradcomp_compress::{Compressor, CompressorConfig};
}

/// The compute device gradcomp trains on by default: burn's pure-Rust CPU
/// backend `flex`, with autodiff.
pub fn default_device() -> burn::tensor::Device {
    burn::tensor::Device::flex().autodiff()
}
