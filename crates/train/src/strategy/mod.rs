//! Training strategies: how the workers' gradients (or models) are combined.
//!
//! [`sync::GradientExchange`] is synchronous compressed SGD: every step,
//! every worker's gradient goes memory → compressor → codec → collective →
//! decode → aggregate → memory update, and all workers obtain the same
//! averaged gradient. eSGD and DGC are compressors and memories inside it.
//! [`celgc::Celgc`] is local SGD with per-worker clipping and periodic model
//! averaging.

pub mod celgc;
pub mod sync;

pub use sync::{ExchangeStats, GradientExchange};
