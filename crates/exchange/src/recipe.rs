//! What every unit's compressor and memory are built from: a built-in
//! compressor's configuration, or a compressor of the user's own.

use gradcomp_compress::memory::{Memory, MemoryKind, ResidualForm};
use gradcomp_compress::{Combine, Compressor};

use crate::config::DataParallelConfig;
use crate::spec::CompressorSpec;

/// The compressor and memory of every compressed unit.
#[derive(Clone, Debug)]
pub(crate) struct Recipe {
    pub compressor: CompressorSpec,
    /// The memory kind requested (`compression.memory`).
    requested: MemoryKind,
    pub residual: ResidualForm,
    /// DGC momentum's factor.
    pub momentum: f32,
    /// Error feedback's decay β (a built-in method's; 1 for a user's
    /// compressor), for the device memories (the host's come from the method).
    #[cfg(feature = "device-kernels")]
    pub decay: f32,
    /// How the compressor's messages combine across workers.
    pub combine: Combine,
}

impl Recipe {
    pub(crate) fn new(cfg: &DataParallelConfig) -> Self {
        let c = &cfg.compression;
        Recipe {
            compressor: cfg.compressor.clone(),
            requested: c.memory,
            residual: c.residual,
            momentum: c.dgc_momentum,
            #[cfg(feature = "device-kernels")]
            decay: match &cfg.compressor {
                CompressorSpec::Builtin(b) => b.method().memory_decay(),
                CompressorSpec::Custom(_) => 1.0,
            },
            combine: cfg.combine(),
        }
    }

    /// The memory kind in effect (a built-in method's `auto` resolved).
    pub(crate) fn memory_kind(&self) -> MemoryKind {
        self.compressor.memory_kind(self.requested)
    }

    /// The compressor of a unit of `shape` (PowerSGD sees its matrix).
    pub(crate) fn compressor(&self, shape: &[usize]) -> Box<dyn Compressor> {
        self.compressor.build_for(shape)
    }

    /// Whether a unit of `shape` is compressed at all.
    pub(crate) fn compresses(&self, shape: &[usize]) -> bool {
        self.compressor.compresses(shape)
    }

    /// A compressed unit's memory (`None`: the identity).
    pub(crate) fn memory(&self) -> Option<Box<dyn Memory>> {
        self.compressor.memory(self.requested, self.residual, self.momentum)
    }

    pub(crate) fn has_memory(&self) -> bool {
        self.compressor.has_memory(self.requested)
    }

    /// Whether memories hold lr-scaled residuals (gradcomp's error feedback
    /// in its `lr-scaled` form; a user's memory is taken to hold gradients).
    pub(crate) fn lr_scaled(&self) -> bool {
        self.memory_kind() == MemoryKind::ErrorFeedback && self.residual == ResidualForm::LrScaled
    }

    /// Whether every unit travels as it is (the dense method).
    pub(crate) fn compresses_nothing(&self) -> bool {
        self.compressor.sends_values_as_they_are()
    }
}
