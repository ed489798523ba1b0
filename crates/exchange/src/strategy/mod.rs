//! Strategies: how the workers combine their work each step.
//!
//! A [`Strategy`] turns each worker's gradient into the update every worker
//! applies. Two implement it:
//!
//! - `Synchronous`: compressed gradient exchange every step
//!   ([`GradientExchange`](crate::GradientExchange): memory →
//!   compressor → codec → collective → decode → aggregate → memory update).
//!   eSGD and DGC are compressors and memories inside it; DGC's local
//!   clipping is an option of it.
//! - [`LocalUpdates`]: local steps, with the workers' models meeting in
//!   outer rounds (ALGORITHMS.md §2): CELGC's per-worker norm clipping and
//!   model averaging; an outer optimizer (DiLoCo) and Streaming fragments
//!   ([`OuterRounds`], run by the outer-round machine); or, averaging
//!   gradients with I = 1, naive parallel clipping.
//!
//! A strategy that averages models has the capability [`ModelAveraging`]
//! ([`Strategy::averaging`]); a synchronous one has none. The burn front's
//! [`DataParallel`](crate::DataParallel) handle and the PyTorch front's
//! `LocalUpdates` drive a strategy through these two traits and know
//! nothing else of it.

mod base;
mod build;
mod local_updates;
mod outer_machine;
mod outer_optimizer;
mod outer_rounds;
mod outer_schedule;
#[cfg(test)]
mod phase_tests;
mod sync;

pub use base::{ModelAveraging, Strategy, Update};
pub use build::{build, build_local};
pub use local_updates::LocalUpdates;
pub use outer_rounds::OuterRounds;
pub(crate) use outer_schedule::partition;
pub use outer_schedule::OuterSchedule;

/// The outer optimizer alone, for the performance model's measurement.
pub(crate) fn outer_for_pricing(cfg: crate::config::OuterConfig) -> outer_optimizer::OuterOptimizer {
    outer_optimizer::OuterOptimizer::new(cfg)
}
