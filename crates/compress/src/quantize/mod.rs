//! Quantizers: every element is kept, in fewer bits.

pub mod fp16;
pub mod onebit;
pub mod qsgd;
pub mod terngrad;

pub use fp16::Fp16;
pub use onebit::{OneBit, OneBitConfig};
pub use qsgd::{Qsgd, QsgdConfig};
pub use terngrad::{TernGrad, TernGradConfig};

/// Splits one 64-bit draw into two 32-bit uniforms.
#[inline(always)]
pub(crate) fn two_u32(r: u64) -> [u32; 2] {
    [r as u32, (r >> 32) as u32]
}
