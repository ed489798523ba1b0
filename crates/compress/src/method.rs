//! [`Method`]: what the exchange asks of a built-in method's configuration
//! (its options' validation, memory, density, which tensors it compresses,
//! its compressor), answered beside the method, in its own file. The
//! registry ([`CompressorConfig`](crate::CompressorConfig), `config.rs`)
//! holds one line per method: its name and its configuration type.
//!
//! What the built compressor knows (its exchange rounds, how workers'
//! messages combine, its message) is the [`Compressor`] trait's, also beside
//! the method; what a message costs on the wire is its kind's
//! ([`codec::encoded_len`](crate::codec::encoded_len)). A device form is
//! optional: a method the GPU kernels do not know compresses on the host.

use std::fmt;

use crate::compressor::Compressor;
use crate::memory::MemoryKind;

/// A compressor option outside its valid range.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("compressor.{key}: {problem}")]
pub struct InvalidOption {
    /// The option's key under `compressor`.
    pub key: &'static str,
    pub problem: String,
}

/// A built-in method's configuration. See the module docs.
pub trait Method: fmt::Debug + Send + Sync {
    /// Checks every option's range; the error names the option's key.
    fn validate(&self) -> Result<(), InvalidOption> {
        Ok(())
    }

    /// The memory `auto` means for this method: error feedback for the
    /// biased ones whose dropped mass must come back, none for the unbiased.
    fn default_memory(&self) -> MemoryKind;

    /// Error feedback's decay β for this method (`e ← β·e + g`): 1 (no
    /// decay) but for the change's compressors, whose references decay.
    fn memory_decay(&self) -> f32 {
        1.0
    }

    /// The target density, for sparsifiers that have one.
    fn density(&self) -> Option<f64> {
        None
    }

    /// Sets the target density; false for methods without one.
    fn set_density(&mut self, _rho: f64) -> bool {
        false
    }

    /// Whether a unit of `shape` is compressed at all (PowerSGD leaves
    /// vectors and the matrices it would not shrink enough to travel dense).
    fn compresses(&self, _shape: &[usize]) -> bool {
        true
    }

    /// Whether the method draws from the random stream that `seed` keys
    /// (stochastic rounding, random indices, DGC's sample offset); for the
    /// others `seed` changes nothing (the tests that walk every option read it).
    fn draws_random(&self) -> bool {
        false
    }

    /// Whether the method selects across the whole flattened model (eSGD
    /// numbers coordinates across all layers): its unit is the whole model,
    /// so `auto` granularity means `global` and `layer` is refused.
    fn whole_model(&self) -> bool {
        false
    }

    /// Whether the method carries its own residual (eSGD's momentum
    /// residual), so the exchange adds no memory of its own.
    fn own_residual(&self) -> bool {
        false
    }

    /// Whether the method reads each worker's training loss (eSGD's
    /// selection rule): a front must pass it.
    fn needs_loss(&self) -> bool {
        false
    }

    /// The first step on which the method compresses (PowerSGD's `start_iter`).
    fn first_compressed_step(&self) -> u64 {
        0
    }

    /// The compressor of a unit of `shape`. Call [`Method::validate`] first.
    fn build(&self, shape: &[usize]) -> Box<dyn Compressor>;

    /// The name these options go by when they make a variant of the method
    /// a name of its own (Gaussian-k's `gaussiank-refined`); `None`: the
    /// registered name.
    fn variant_name(&self) -> Option<&'static str> {
        None
    }

    /// The options a variant's name stands for (see [`Method::variant_name`]).
    fn variant(_name: &str) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }
}

/// Checks one option: `Ok` when `ok`, else the option `key` and the problem.
pub(crate) fn check(
    ok: bool,
    key: &'static str,
    problem: impl FnOnce() -> String,
) -> Result<(), InvalidOption> {
    if ok {
        Ok(())
    } else {
        Err(InvalidOption { key, problem: problem() })
    }
}

/// A sparsifier's density: in (0, 1].
pub(crate) fn check_density(rho: f64) -> Result<(), InvalidOption> {
    check(rho > 0.0 && rho <= 1.0, "density", || {
        format!("{rho} is not in (0, 1]; e.g. 0.001 keeps one element in a thousand")
    })
}

/// The `Method` items every sparsifier with a `density` field shares.
macro_rules! density_option {
    () => {
        fn density(&self) -> Option<f64> {
            Some(self.density)
        }

        fn set_density(&mut self, rho: f64) -> bool {
            self.density = rho;
            true
        }
    };
}
pub(crate) use density_option;

/// The `Method` of a sparsifier that keeps a share `density` of its input
/// and whose dropped mass comes back through error feedback (Top-k,
/// trimmed top-k, Rand-k, Gaussian-k): its compressor is
/// `$compressor::compressor(&config)`; more items (a variant's name) follow
/// in braces.
macro_rules! error_feedback_sparsifier {
    ($config:ty => $compressor:ident { $($more:tt)* }) => {
        impl $crate::method::Method for $config {
            fn validate(&self) -> Result<(), $crate::method::InvalidOption> {
                $crate::method::check_density(self.density)
            }
            fn default_memory(&self) -> $crate::memory::MemoryKind {
                $crate::memory::MemoryKind::ErrorFeedback
            }
            $crate::method::density_option!();
            fn build(&self, _shape: &[usize]) -> Box<dyn $crate::Compressor> {
                Box::new($compressor::compressor(self))
            }
            $($more)*
        }
    };
}
pub(crate) use error_feedback_sparsifier;
