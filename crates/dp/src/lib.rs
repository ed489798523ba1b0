//! gradcomp-dp: compressed data-parallel training for any burn model and
//! any training loop; gradcomp's burn front over the framework-agnostic
//! core, `gradcomp-exchange` (re-exported here: [`config`], [`exchange`],
//! [`predict`], ...).
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
//! `strategy.plan = "auto"` is resolved among the workers before `init`,
//! from the communication-free step each measured and the run's length:
//! rank 0 chooses (the link probed over the group where none is given) and
//! every rank takes its plan:
//!
//! ```ignore
//! use gradcomp_dp::exchange::auto_plan::resolve_in_group;
//!
//! let layout = gradcomp_dp::params::layout(&model);              // the trainable tensors, in order
//! let shapes: Vec<Vec<usize>> = layout.slots().iter().map(|s| s.shape.clone()).collect();
//! for line in resolve_in_group(&mut config, &mut collective, &shapes, step_seconds, None, total_steps)? {
//!     println!("{line}");
//! }
//! ```
//!
//! Compression, the memories (error feedback, DGC momentum), the topology,
//! byte metering and the step statistics all live behind the handle, and so
//! does the step size: CELGC's clipped step and lr-scaled error feedback
//! reach the optimizer without the caller seeing them.
//!
//! Modules by job (this crate's own: what knows burn):
//! - `handle`: [`DataParallel`], one worker's handle, and
//!   `DataParallelConfig::init` (through [`InitDataParallel`]).
//! - [`backward`]: what a step takes ([`Backward`]) and the staged backward
//!   pass ([`Cuts`]) that lets the exchange overlap it.
//! - [`params`]: burn parameters and gradients ↔ flat buffers.
//! - `device_grad` (feature `device-kernels`): burn's gradient tensors as
//!   the core's per-unit device buffers, with no copy.
//! - `learner` (feature `learner`): a burn-train training strategy.
//!
//! From the core (`gradcomp-exchange`): [`config`] ([`DataParallelConfig`]
//! and every option it reads), [`exchange`] (the compressed exchange, one
//! schedule for the host and the device, and the strategies), [`layout`],
//! [`custom`] (a compressor of the user's own) and [`predict`] (the
//! performance model's methods and step times).

pub mod backward;
#[cfg(feature = "device-kernels")]
pub mod device_grad;
mod handle;
#[cfg(feature = "learner")]
pub mod learner;
pub mod params;

pub use gradcomp_exchange as exchange;
pub use gradcomp_exchange::{checksum, config, custom, grad_stages, layout, predict, strategy};

pub use backward::{Backward, Cuts, StagedBackward};
pub use config::{DataParallelConfig, OnNonFinite, Topology};
pub use custom::CustomCompressor;
pub use gradcomp_exchange::{DataParallelError, ExchangeError};
pub use handle::{CompressionLocation, DataParallel, DataParallelState, InitDataParallel, StepStats};
pub use layout::{GradientLayout, ParamSlot};

/// Everything a burn user needs for compressed data-parallel training.
pub mod prelude {
    pub use crate::config::{CompressionConfig, Granularity, StrategyConfig};
    pub use crate::{
        Backward, CompressionLocation, CustomCompressor, Cuts, DataParallel, DataParallelConfig,
        DataParallelError, InitDataParallel, OnNonFinite, Topology,
    };
    pub use gradcomp_comm::{Collective, InProcessGroup};
    pub use gradcomp_compress::lowrank::PowerSgdConfig;
    pub use gradcomp_compress::memory::{DensitySchedule, ErrorFeedback, Memory, MemoryKind, ResidualForm};
    pub use gradcomp_compress::message::Message;
    pub use gradcomp_compress::{Combine, Compressor, CompressorConfig, UnitContext};
    pub use gradcomp_exchange::run_in_process;
}

/// The compute device gradcomp trains on by default: burn's pure-Rust CPU
/// backend `flex`, with autodiff.
pub fn default_device() -> burn::tensor::Device {
    burn::tensor::Device::flex().autodiff()
}
