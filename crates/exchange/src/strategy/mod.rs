//! Strategies: how the workers combine their work each step.
//!
//! A [`Strategy`] turns each worker's gradient into the update every worker
//! applies, and may average the workers' models now and then. Two implement
//! it:
//!
//! - `Synchronous`: compressed gradient exchange every step
//!   ([`GradientExchange`](crate::GradientExchange): memory →
//!   compressor → codec → collective → decode → aggregate → memory update).
//!   eSGD and DGC are compressors and memories inside it; DGC's local
//!   clipping is an option of it.
//! - `Celgc`: local steps with a round every I steps (ALGORITHMS.md §2):
//!   CELGC's per-worker norm clipping and model averaging; local updates
//!   with an outer optimizer (DiLoCo) and Streaming fragments
//!   ([`ModelRounds`]); or, averaging gradients with I = 1, naive parallel
//!   clipping.
//!
//! The library's [`DataParallel`](crate::DataParallel) handle drives a
//! strategy through this trait and knows nothing else of it.

mod base;
mod build;
mod celgc;
mod model_rounds;
mod outer;
mod round_thread;
mod sync;

pub use base::{StepResult, Strategy};
pub use build::{build, build_local};
pub use celgc::Celgc;
pub(crate) use model_rounds::partition;
pub use model_rounds::{ModelRounds, Schedule};

/// The outer optimizer alone, for the performance model's measurement.
pub(crate) fn outer_for_pricing(cfg: crate::config::OuterConfig) -> outer::Outer {
    outer::Outer::new(cfg)
}
