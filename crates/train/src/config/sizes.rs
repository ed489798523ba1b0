//! Sizes against the machine: a mistyped size is refused at once instead of
//! aborting on allocation after the workers started.

use super::{Backend, ConfigError, Dataset, MemoryKind, OptimizerName, TrainConfig};
use crate::machine::available_memory_bytes;

fn err(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::new(key, problem)
}

/// In-process workers are threads of one process; past this many, use MPI.
pub const MAX_IN_PROCESS_WORKERS: usize = 1024;

impl TrainConfig {
    /// Upper bounds on sizes, so that a mistyped size is refused at once
    /// instead of aborting on allocation after the workers started: the
    /// in-process worker count, and the memory generated data would take,
    /// against what the machine has available.
    pub(super) fn check_sizes(&self) -> Result<(), ConfigError> {
        if self.backend == Backend::InProcess && self.workers > MAX_IN_PROCESS_WORKERS {
            return Err(err(
                "workers",
                format!(
                    "{} in-process workers is more than {MAX_IN_PROCESS_WORKERS} threads of one process: use backend = \"mpi\" for that many",
                    self.workers
                ),
            ));
        }
        let d = &self.data;
        // Synthetic data is generated in memory: the train split plus a test
        // split of a quarter, one byte per pixel (images) or four per token.
        let per_example = match d.dataset {
            Dataset::SyntheticImages => d.synthetic_shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x)),
            Dataset::SyntheticTokens => Some(4),
            _ => Some(0),
        };
        let bytes = per_example.and_then(|e| e.checked_mul(d.synthetic_size)).map(|b| b as f64 * 1.25);
        let available = available_memory_bytes();
        match (bytes, available) {
            (None, _) => Err(err("data.synthetic_size", "the generated data's size overflows: lower data.synthetic_size or data.synthetic_shape")),
            (Some(b), Some(avail)) if b > avail => Err(err(
                "data.synthetic_size",
                format!(
                    "{} examples{} would take {:.1} GB of memory, and this machine has {:.1} GB available: lower data.synthetic_size{}",
                    d.synthetic_size,
                    if d.dataset == Dataset::SyntheticImages { format!(" of data.synthetic_shape {:?}", d.synthetic_shape) } else { String::new() },
                    b / 1e9,
                    avail / 1e9,
                    if d.dataset == Dataset::SyntheticImages { " or data.synthetic_shape" } else { "" }
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl TrainConfig {
    /// Refuses a run whose workers' model state cannot fit in this machine's
    /// memory, before any thread starts: per in-process worker (one per MPI
    /// rank), `parameters` f32 values each for the parameters, their
    /// gradients, the optimizer's slots (momentum; Adam's two moments), the
    /// compression memories (error feedback, DGC's two buffers) and the
    /// exchange's three flat buffers. Activations come on top, so this is a
    /// lower bound: a run it refuses would certainly abort on allocation.
    pub fn check_model_memory(&self, parameters: usize) -> Result<(), ConfigError> {
        let optimizer = match self.optimizer.name {
            OptimizerName::Sgd => usize::from(self.optimizer.momentum > 0.0),
            OptimizerName::Adam | OptimizerName::Adamw => 2,
        };
        let memories = match self.compressor.resolve_memory(self.compression.memory) {
            MemoryKind::ErrorFeedback => 1,
            MemoryKind::DgcMomentum => 2,
            MemoryKind::Auto | MemoryKind::None => 0,
        };
        let copies = 2 + optimizer + memories + 3;
        let workers = if self.backend == Backend::InProcess { self.workers } else { 1 };
        let need = workers as f64 * parameters as f64 * 4.0 * copies as f64;
        match available_memory_bytes() {
            Some(avail) if need > avail => Err(err(
                "workers",
                format!(
                    "{workers} worker(s) of a model with {parameters} parameters need at least {:.1} GB (parameters, gradients, optimizer state, memories and exchange buffers; activations on top), and this machine has {:.1} GB available: use fewer workers, or backend = \"mpi\" across machines",
                    need / 1e9,
                    avail / 1e9
                ),
            )),
            _ => Ok(()),
        }
    }
}
