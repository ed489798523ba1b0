//! gradcomp-train: the data-parallel training engine on burn.
//!
//! Issue #4 builds the trainer here. What exists now is the piece every
//! worker must agree on before any gradient moves: the flat gradient layout.

pub mod layout;

pub use layout::{GradientLayout, ParamSlot};

/// The compute device gradcomp trains on by default: burn's pure-Rust CPU
/// backend `flex`.
pub fn default_device() -> burn::tensor::Device {
    burn::tensor::Device::flex()
}
