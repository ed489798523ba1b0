//! Why a call failed: [`DataParallelError`], what a [`DataParallel`](crate::DataParallel)
//! call returns, and [`ExchangeError`], what the exchange and the strategies
//! return inside it.

use gradcomp_comm::CommError;
use gradcomp_compress::codec::CodecError;
use gradcomp_compress::StateError;

use crate::config::ConfigError;

/// Why a [`DataParallel`](crate::DataParallel) call failed. Every error that
/// comes from the group (a peer's failure, a corrupt message, a non-finite
/// value somewhere) is returned on every worker, so no worker is left waiting.
#[derive(Debug, thiserror::Error)]
pub enum DataParallelError {
    /// A configuration mistake, named by the builder call that sets it.
    #[error("{}", .0.in_library_terms())]
    Config(#[from] ConfigError),
    #[error("worker {rank}: {source}")]
    Comm { rank: usize, source: CommError },
    #[error("worker {rank}: corrupt message from worker {sender}: {source}")]
    Codec { rank: usize, sender: usize, source: CodecError },
    #[error("step {step}: worker {rank} produced a non-finite {what} (tensor {tensor}); lower the learning rate, or skip such steps (train.on_nonfinite = \"skip\")")]
    NonFinite { step: u64, rank: usize, what: &'static str, tensor: String },
    #[error("step {step}: worker(s) {ranks:?} produced non-finite gradients or loss")]
    PeerNonFinite { step: u64, ranks: Vec<usize> },
    #[error("the outer round started at step {step}: worker(s) {ranks:?} hold non-finite parameters; nothing of the round was applied")]
    NonFiniteModel { step: u64, ranks: Vec<usize> },
    #[error("step {step}: replicas diverged: parameter checksums differ between workers {ranks:?}")]
    ReplicaMismatch { step: u64, ranks: Vec<usize> },
    #[error("the workers disagree: {0}")]
    Mismatch(String),
    #[error("{0}")]
    Usage(String),
    /// Saved state that does not fit this model and configuration.
    #[error("cannot restore the data-parallel state: {0}")]
    State(#[from] StateError),
    #[error("worker {rank}: {message}; set compression.on_device = false to compress on the host")]
    Device { rank: usize, message: String },
    /// An in-process worker's thread panicked ([`run_in_process`](crate::run_in_process)).
    #[error("worker {rank} panicked: {message}")]
    Panic { rank: usize, message: String },
}

impl DataParallelError {
    /// Whether this error only reports another worker's failure (the
    /// collective's `PeerFailed`, a peer's non-finite value): when picking
    /// the error to show for a run, the original one is more useful.
    pub fn is_secondary(&self) -> bool {
        matches!(
            self,
            DataParallelError::Comm { source: CommError::PeerFailed { .. }, .. }
                | DataParallelError::PeerNonFinite { .. }
        )
    }

    /// The error worker `rank` reports for an exchange's error.
    pub fn from_exchange(rank: usize, e: ExchangeError) -> Self {
        match e {
            ExchangeError::Comm(source) => DataParallelError::Comm { rank, source },
            ExchangeError::Codec { rank: sender, source } => {
                DataParallelError::Codec { rank, sender, source }
            }
            e @ ExchangeError::Device(_) => DataParallelError::Device { rank, message: e.to_string() },
            ExchangeError::Usage(message) => DataParallelError::Usage(message),
            ExchangeError::Thread(message) => DataParallelError::Panic { rank, message },
            ExchangeError::NonFiniteModel { step, ranks } => {
                DataParallelError::NonFiniteModel { step, ranks }
            }
        }
    }
}

/// Why an exchange cannot move to a device: the reason the host compresses
/// instead (a compressor without a device form, nothing to compress, state
/// the device could not take). Not a failure of the run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoDeviceForm {
    /// Every unit travels uncompressed: one read-back on the host is cheapest.
    #[error("every unit travels uncompressed: one read-back on the host is cheapest")]
    NothingToCompress,
    /// The strategy, or the compressor, runs on the host only.
    #[error("{0}")]
    HostOnly(String),
    /// The device refused the compressor or its state.
    #[error("{0}")]
    Device(String),
}

/// Why an exchange (or a strategy's step around it) could not complete.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error(transparent)]
    Comm(#[from] CommError),
    #[error("corrupt message from worker {rank}: {source}")]
    Codec { rank: usize, source: CodecError },
    /// A device kernel or transfer failed (the device was lost, or a buffer
    /// did not hold what it should).
    #[error("the device exchange failed: {0}")]
    Device(String),
    /// The caller broke a rule of the call (a gradient of the wrong size,
    /// a parameter in two backward stages).
    #[error("{0}")]
    Usage(String),
    /// The thread a round's exchange ran on failed (it panicked, or could
    /// not be started).
    #[error("{0}")]
    Thread(String),
    /// Workers `ranks` handed an outer round a model with a non-finite
    /// value, agreed inside the round's first collective: every worker
    /// refuses the round, and nothing of it is applied.
    #[error("the outer round started at step {step}: worker(s) {ranks:?} hold non-finite parameters; nothing of the round was applied (resume from a checkpoint, with a lower learning rate or gradient clipping)")]
    NonFiniteModel { step: u64, ranks: Vec<usize> },
}
