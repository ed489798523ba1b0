//! Quantizers: every element is kept, in fewer bits.

pub mod fp16;
pub mod onebit;
pub mod qsgd;
pub mod terngrad;

pub use fp16::Fp16;
pub use onebit::{OneBit, OneBitConfig};
pub use qsgd::{Qsgd, QsgdConfig};
pub use terngrad::{TernGrad, TernGradConfig};
