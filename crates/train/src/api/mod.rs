//! Compressed data-parallel training for any burn model and any training
//! loop: the library's front door.
//!
//! Each worker (a thread with an in-process collective, or an MPI rank)
//! builds a [`DataParallelConfig`], calls [`DataParallelConfig::init`] with
//! its collective and its model (rank 0's parameters are broadcast, so the
//! replicas start identical), and then, every step, hands the gradients of
//! `loss.backward()` to [`DataParallel::sync`]. What comes back is a burn
//! [`GradientsParams`](burn::optim::GradientsParams) holding the combined
//! gradient, for any burn optimizer (`SgdConfig`, `AdamConfig`,
//! `AdamWConfig`, ...):
//!
//! ```ignore
//! let dp = DataParallelConfig::new(CompressorConfig::terngrad());
//! let (mut dp, mut model) = dp.init(collective, model)?;       // broadcasts rank 0's model
//! let mut optim = AdamWConfig::new().init();
//! for batch in batches {
//!     let loss = model.forward_loss(batch);
//!     let synced = dp.sync(&model, loss.backward(), lr)?;     // compress, exchange, decode, average
//!     model = optim.step(synced.lr, model, synced.grads);
//! }
//! ```
//!
//! Compression, the memories (error feedback, DGC momentum), the topology,
//! byte metering and the step statistics all live behind the handle. The
//! CELGC strategy (local steps with per-worker clipping, models averaged
//! every I steps) is offered through the same handle: before a step,
//! `model = dp.average_model(model)?` averages the models when the step
//! begins a round ([`DataParallel::averages_now`] says whether it does), and
//! [`Synced::lr`] is the clipped step size.
//!
//! Host buffers stay behind the handle: the signatures take and return burn
//! types only, so compression can move onto the model's device without
//! changing them.

mod config;
mod error;
mod handle;
mod stages;

pub use config::DataParallelConfig;
pub use error::SyncError;
pub use handle::{DataParallel, DataParallelState, Site, StepStats, Synced};
pub use stages::{BurnStages, Cuts, StagedBackward};

/// Everything a burn user needs for compressed data-parallel training.
pub mod prelude {
    pub use super::{Cuts, DataParallel, DataParallelConfig, SyncError, Synced};
    pub use crate::config::{OnNonFinite, Topology};
    pub use gradcomp_comm::{Collective, InProcessGroup};
    pub use gradcomp_compress::CompressorConfig;
}
