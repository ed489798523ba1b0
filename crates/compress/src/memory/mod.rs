//! Memories: state a worker carries from one step's compression to the next.
//!
//! Around every compression (the GRACE / BytePS "decorator" role):
//! `let acc = memory.compensate(grad, lr); compress(acc) -> msg; memory.update(&msg);`
//! `compensate` folds the carried state into this step's gradient and returns
//! the buffer to compress, which the memory owns (so no copy is made);
//! `update` removes from that buffer what the message carries, leaving the
//! residual. Neither allocates after the first call for a given length.

pub mod dgc_momentum;
pub mod error_feedback;
pub mod warmup;

pub use dgc_momentum::DgcMomentum;
pub use error_feedback::{ErrorFeedback, ResidualForm};
pub use warmup::DensitySchedule;

use serde::{Deserialize, Serialize};

use crate::message::Message;

/// Which memory wraps a compressor. `Auto` lets the compressor choose
/// ([`CompressorConfig::default_memory`](crate::CompressorConfig::default_memory)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Error feedback for the biased compressors that need it, DGC momentum
    /// for DGC-k, none for the rest.
    #[default]
    Auto,
    None,
    ErrorFeedback,
    DgcMomentum,
}

impl MemoryKind {
    /// Builds the memory; `Auto` must be resolved first (it builds none).
    /// `residual` is error feedback's form and `decay` its β, `momentum` DGC's factor.
    pub fn build(self, residual: ResidualForm, momentum: f32, decay: f32) -> Box<dyn Memory> {
        match self {
            MemoryKind::ErrorFeedback => Box::new(ErrorFeedback::with_decay(residual, decay)),
            MemoryKind::DgcMomentum => Box::new(DgcMomentum::new(momentum)),
            MemoryKind::Auto | MemoryKind::None => Box::new(NoMemory),
        }
    }
}

/// Carried state around one unit's compressor. See the module docs.
pub trait Memory: Send {
    /// Returns the buffer to compress for this step's gradient `grad`. `lr` is
    /// the step's learning rate (used only by the lr-scaled residual form).
    fn compensate<'a>(&'a mut self, grad: &'a [f32], lr: f32) -> &'a [f32];

    /// Records that `sent` (compressed from the last `compensate` output) was sent.
    fn update(&mut self, sent: &Message);

    /// The carried residual, for statistics and checkpoints (empty if none).
    fn residual(&self) -> &[f32] {
        &[]
    }

    /// All carried state as flat buffers, for checkpoints.
    fn state(&self) -> Vec<&[f32]> {
        Vec::new()
    }

    /// Restores what [`Memory::state`] returned. Errors if the shapes differ.
    fn restore(&mut self, state: &[Vec<f32>]) -> Result<(), crate::StateError> {
        if state.iter().all(|s| s.is_empty()) {
            Ok(())
        } else {
            Err(crate::StateError::Buffers {
                holder: "a memory without state",
                expected: 0,
                got: state.len(),
            })
        }
    }
}

/// No memory: the gradient is compressed as it is.
#[derive(Clone, Debug, Default)]
pub struct NoMemory;

impl Memory for NoMemory {
    fn compensate<'a>(&'a mut self, grad: &'a [f32], _lr: f32) -> &'a [f32] {
        grad
    }
    fn update(&mut self, _sent: &Message) {}
}

/// Zeroes `buf[i]` at the indices a sparse message carries, or subtracts a
/// dense decompression otherwise; `mask` (if any) is zeroed where the message
/// carried a nonzero value. Shared by the memories' `update`.
pub(crate) fn remove_sent(buf: &mut [f32], sent: &Message, mut mask: Option<&mut [f32]>) {
    match sent {
        // Exact: the message's values are buf's values (in wire precision), so
        // buf[i] - v is the f16 rounding error, or 0 for f32 values.
        Message::Sparse(m) => {
            for (&i, &v) in m.indices.iter().zip(&m.values) {
                buf[i as usize] -= v;
                if let Some(mask) = mask.as_deref_mut() {
                    mask[i as usize] = 0.0;
                }
            }
        }
        _ => {
            sent.add_to(-1.0, buf);
            if let Some(mask) = mask {
                // A quantizer sends every element; DGC's masking is defined for sparsifiers.
                mask.fill(0.0);
            }
        }
    }
}
