//! What every unit's compressor and memory are built from: a built-in
//! compressor's configuration, or a compressor of the user's own.

use gradcomp_compress::memory::{Memory, MemoryKind, NoMemory, ResidualForm};
use gradcomp_compress::{Combine, Compressor, CompressorConfig};

use crate::config::DataParallelConfig;
use crate::custom::CustomCompressor;

/// The compressor and memory of every compressed unit.
#[derive(Clone, Debug)]
pub(crate) struct Recipe {
    pub compressor: CompressorConfig,
    pub custom: Option<CustomCompressor>,
    /// The memory kind in effect (built-in compressors).
    pub memory: MemoryKind,
    pub residual: ResidualForm,
    /// DGC momentum's factor.
    pub momentum: f32,
    /// How the compressor's messages combine across workers.
    pub combine: Combine,
}

impl Recipe {
    pub(crate) fn new(cfg: &DataParallelConfig) -> Self {
        let c = &cfg.compression;
        Recipe {
            compressor: cfg.compressor.clone(),
            custom: cfg.custom.clone(),
            memory: cfg.compressor.resolve_memory(c.memory),
            residual: c.residual,
            momentum: c.dgc_momentum,
            combine: cfg.combine(),
        }
    }

    /// The compressor of a unit of `shape` (PowerSGD sees its matrix).
    pub(crate) fn compressor(&self, shape: &[usize]) -> Box<dyn Compressor> {
        match &self.custom {
            Some(c) => c.compressor(),
            None => self.compressor.build_for(shape),
        }
    }

    /// Whether a unit of `shape` is compressed at all (PowerSGD leaves vectors and the
    /// matrices it would not shrink to travel dense).
    pub(crate) fn compresses(&self, shape: &[usize]) -> bool {
        self.custom.is_some() || self.compressor.compresses(shape)
    }

    /// A compressed unit's memory (none: the identity).
    pub(crate) fn memory(&self) -> Box<dyn Memory> {
        match &self.custom {
            Some(c) => c.memory().unwrap_or_else(|| Box::new(NoMemory)),
            None => self.memory.build(self.residual, self.momentum),
        }
    }

    pub(crate) fn has_memory(&self) -> bool {
        match &self.custom {
            Some(c) => c.memory().is_some(),
            None => self.memory != MemoryKind::None && self.memory != MemoryKind::Auto,
        }
    }

    /// Whether memories hold lr-scaled residuals (gradcomp's error feedback
    /// in its `lr-scaled` form; a user's memory is taken to hold gradients).
    pub(crate) fn lr_scaled(&self) -> bool {
        self.custom.is_none()
            && self.memory == MemoryKind::ErrorFeedback
            && self.residual == ResidualForm::LrScaled
    }

    /// Whether every unit travels as it is (the dense compressor).
    pub(crate) fn passes_through(&self) -> bool {
        self.custom.is_none() && matches!(self.compressor, CompressorConfig::Dense {})
    }
}
