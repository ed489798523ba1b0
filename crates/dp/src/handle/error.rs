//! [`SyncError`]: why a data-parallel call failed.

use gradcomp_comm::CommError;
use gradcomp_compress::codec::CodecError;

use crate::config::ConfigError;
use crate::strategy::StrategyError;

/// Why a [`DataParallel`](super::DataParallel) call failed. Every error that
/// comes from the group (a peer's failure, a corrupt message, a non-finite
/// value somewhere) is returned on every worker, so no worker is left waiting.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("worker {rank}: {source}")]
    Comm { rank: usize, source: CommError },
    #[error("worker {rank}: corrupt message from worker {sender}: {source}")]
    Codec { rank: usize, sender: usize, source: CodecError },
    #[error("step {step}: worker {rank} produced a non-finite {what} (tensor {tensor}); lower the learning rate, or skip such steps (train.on_nonfinite = \"skip\")")]
    NonFinite { step: u64, rank: usize, what: &'static str, tensor: String },
    #[error("step {step}: worker(s) {ranks:?} produced non-finite gradients or loss")]
    PeerNonFinite { step: u64, ranks: Vec<usize> },
    #[error("step {step}: replicas diverged: parameter checksums differ between workers {ranks:?}")]
    ReplicaMismatch { step: u64, ranks: Vec<usize> },
    #[error("the workers disagree: {0}")]
    Mismatch(String),
    #[error("{0}")]
    Usage(String),
    #[error("cannot restore the data-parallel state: {0}")]
    State(String),
    #[error("worker {rank}: {message}; set compression.on_device = false to compress on the host")]
    Device { rank: usize, message: String },
}

impl SyncError {
    /// Whether this error only reports another worker's failure (the
    /// collective's `PeerFailed`, a peer's non-finite value): when picking
    /// the error to show for a run, the original one is more useful.
    pub fn is_secondary(&self) -> bool {
        matches!(
            self,
            SyncError::Comm { source: CommError::PeerFailed { .. }, .. } | SyncError::PeerNonFinite { .. }
        )
    }

    pub(crate) fn from_strategy(rank: usize, e: StrategyError) -> Self {
        match e {
            StrategyError::Comm(source) => SyncError::Comm { rank, source },
            StrategyError::Codec { rank: sender, source } => SyncError::Codec { rank, sender, source },
            e @ StrategyError::Device(_) => SyncError::Device { rank, message: e.to_string() },
            StrategyError::Usage(message) => SyncError::Usage(message),
        }
    }
}
