//! [`StateError`]: why saved state (a checkpoint's memories and compressor
//! state) does not fit what it is restored into. Every `restore` on the way
//! from a checkpoint to a unit returns it, so a caller can tell a missing
//! buffer from a wrong length without reading a message.

use thiserror::Error;

/// Why saved state does not fit the compressor, memory or exchange it is
/// restored into: the state is from another model, another configuration,
/// or a damaged file.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum StateError {
    /// `holder` keeps `expected` buffers; the saved state has `got`.
    #[error("{holder} keeps {expected} buffer(s), the saved state has {got}")]
    Buffers { holder: &'static str, expected: usize, got: usize },
    /// A buffer holds another number of values than this model needs.
    #[error("{buffer} holds {got} values where {expected} are needed")]
    Length { buffer: String, expected: usize, got: usize },
    /// A buffer the state lacks (its checkpoint name).
    #[error("{buffer} is missing")]
    Missing { buffer: String },
    /// One unit's state does not fit: which unit, and why.
    #[error("unit {unit}: {source}")]
    Unit { unit: String, source: Box<StateError> },
    /// A buffer's values are not what it may hold (a corrupt checkpoint).
    #[error("{buffer}: {problem}")]
    Invalid { buffer: String, problem: String },
    /// The device could not take the state.
    #[error("the device could not take the state: {0}")]
    Device(String),
}

impl StateError {
    /// This error, as unit `unit`'s.
    pub fn in_unit(self, unit: &str) -> Self {
        StateError::Unit { unit: unit.to_string(), source: Box::new(self) }
    }
}

/// `Ok` when `state` holds exactly `expected` buffers, for `holder`.
pub fn expect_buffers(holder: &'static str, state: &[Vec<f32>], expected: usize) -> Result<(), StateError> {
    if state.len() == expected {
        Ok(())
    } else {
        Err(StateError::Buffers { holder, expected, got: state.len() })
    }
}
