//! How gradients are cut into compression units and what surrounds the
//! compressor: memories, warm-up, exclusions, buckets (`[compression]`).

use gradcomp_compress::memory::{DensitySchedule, MemoryKind, ResidualForm};

use crate::spec::CompressorSpec;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Granularity {
    /// What the compressor needs: `global` for eSGD (which numbers
    /// coordinates across all layers), `layer` for every other.
    #[default]
    Auto,
    /// Each tensor is a compression unit.
    Layer,
    /// The whole flattened model is one unit.
    Global,
}

impl Granularity {
    /// The granularity in effect for `compressor`.
    pub fn resolve(self, compressor: &CompressorSpec) -> Granularity {
        match self {
            Granularity::Auto if compressor.declares(|m| m.whole_model()) => Granularity::Global,
            Granularity::Auto => Granularity::Layer,
            g => g,
        }
    }
}

/// Which tensors stay dense (layer granularity).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Exclusions {
    /// Tensors with fewer elements stay dense (1: none excluded).
    pub min_size: usize,
    /// The output layer (weight and bias) stays dense.
    pub last_layer: bool,
    /// 1-D tensors (biases) stay dense (DGC).
    pub biases: bool,
}

impl Default for Exclusions {
    fn default() -> Self {
        Self { min_size: 1, last_layer: false, biases: false }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    pub granularity: Granularity,
    pub memory: MemoryKind,
    /// Where the learning rate enters error feedback.
    pub residual: ResidualForm,
    /// DGC momentum correction factor.
    pub dgc_momentum: f32,
    pub warmup: DensitySchedule,
    pub exclude: Exclusions,
    /// DGC's local gradient clipping: each worker scales its gradient to norm
    /// at most `local_clip · N^(−1/2)` before its memory (0: off).
    pub local_clip: f64,
    /// Compress on the model's device when its gradients live on a GPU
    /// (a cubecl device: `cuda`, `wgpu`) and the run has a device form
    /// (synchronous exchange; every method but trimmed top-k and eSGD):
    /// memories stay in device memory and only messages cross to the host.
    /// False compresses on the host. Builds without the `cuda` and `wgpu`
    /// features always compress on the host.
    pub on_device: bool,
    /// Units are exchanged in buckets of at least this many MiB of f32
    /// values, cut from the output layer backwards (PyTorch DDP's
    /// `bucket_cap_mb`). Units are never split, so a model smaller than one
    /// bucket, or `granularity = "global"`, moves in one.
    pub bucket_mb: f64,
    /// Move bucket i on a communication thread while the next is compressed
    /// and the previous decoded. The result is bitwise the same either way.
    pub pipeline: bool,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self {
            granularity: Granularity::Auto,
            memory: MemoryKind::Auto,
            residual: ResidualForm::Raw,
            dgc_momentum: 0.9,
            warmup: DensitySchedule::None,
            exclude: Exclusions::default(),
            local_clip: 0.0,
            on_device: true,
            bucket_mb: 25.0,
            pipeline: true,
        }
    }
}
