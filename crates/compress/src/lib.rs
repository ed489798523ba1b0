//! gradcomp-compress: the gradient-compression algorithms of gradcomp, on
//! plain `&[f32]` buffers.
//!
//! - [`quantize`]: TernGrad, QSGD, 1-bit sign, fp16.
//! - [`sparsify`]: exact Top-k, Gaussian-k, DGC-k, trimmed top-k, Rand-k, threshold.
//! - [`lowrank`]: low-rank approximation, PowerSGD.
//! - [`chunked`]: chunked top-k for the change, SparseLoCo and DeMo's DCT top-k.
//! - [`memory`]: error feedback (raw and lr-scaled), DGC momentum correction, density warm-up.
//! - [`codec`]: the versioned wire format; [`aggregate`]: sums of N workers' messages.
//! - [`stats`]: contraction ratio and bounds, TernGrad's bound ratio, histograms.
//!
//! Everything follows `docs/ALGORITHMS.md`. No I/O, no threads, no burn: the
//! trainer drives one [`Compressor`] and one [`memory::Memory`] per
//! compression unit (see [`compressor`] for the protocol).

// Kernels index fixed-size lane arrays with `for l in 0..LANES`: the form the
// vectorizer handles best, and clearer than zipped iterators over four arrays.
#![allow(clippy::needless_range_loop)]

#[macro_use]
mod simd;

pub mod aggregate;
pub mod chunked;
pub mod codebook;
pub mod codec;
pub mod compressor;
pub mod config;
pub mod lowrank;
pub mod memory;
pub mod message;
pub mod method;
pub mod quantize;
pub mod reduce;
pub mod rng;
pub mod sparsify;
pub mod state;
pub mod stats;
pub mod unit;

pub use compressor::{compress_as_sole_worker, k_for, Combine, Compressor, Dense, ReduceOp, UnitContext};
pub use config::CompressorConfig;
pub use message::Message;
pub use rng::{RngKey, UnitRng};
pub use state::StateError;
pub use unit::CompressionUnit;
