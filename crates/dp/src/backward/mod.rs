//! A step's backward pass: what the handle takes ([`Backward`]), a backward
//! pass cut into stages ([`Cuts`], [`StagedBackward`]) so the exchange can
//! overlap it, and the reading of its gradients into the flat buffer the
//! exchange works on.

mod input;
pub mod read;
mod stages;

pub use input::{Backward, BackwardPass, Pass};
pub use stages::{Cuts, StagedBackward};
