//! [`DataParallelConfig`]: what a [`DataParallel`](crate::DataParallel)
//! handle does, as a plain serializable struct with defaults and `with_*`
//! builders (the burn way: `SgdConfig::new().with_momentum(...)`), and every
//! option it reads, grouped as gradcomp's TOML groups them.

mod compression;
mod error;
mod inert;
mod phases;
mod strategy;
mod validate;

pub use crate::route::Topology;
pub use compression::{CompressionConfig, Exclusions, Granularity};
pub use error::ConfigError;
pub use gradcomp_comm::ServerPlacement;
pub use phases::{PeriodRule, PlanChoice, SyncPhase};
pub use strategy::{
    Average, ClipNorm, OuterConfig, OuterKind, Overlap, StrategyConfig, StrategyKind, STREAMING_MIX,
};

use gradcomp_compress::memory::{DensitySchedule, MemoryKind, ResidualForm};
use gradcomp_compress::Combine;
use serde::{Deserialize, Serialize};

use crate::custom::CustomCompressor;
use crate::spec::CompressorSpec;

/// What a NaN or Inf in any worker's gradient or loss does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnNonFinite {
    /// Stop the run with the step, worker and tensor named.
    Stop,
    /// Skip the step on every worker and go on.
    Skip,
}

/// How a worker's gradients are compressed, exchanged and combined.
///
/// Every worker must build the same configuration; `init` checks that they
/// did. Validation errors name the key as a gradcomp TOML configuration
/// spells it (`compressor.density`, `comm.topology`, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataParallelConfig {
    /// The compressor of every compression unit: a built-in method (the
    /// TOML's `[compressor]`) or a compressor of the user's own.
    pub compressor: CompressorSpec,
    /// Granularity, memory, residual form, density warm-up, exclusions, DGC's local clipping.
    pub compression: CompressionConfig,
    /// The collective pattern; `None` picks the one the compressor's
    /// messages need (allreduce for summable messages, allgather otherwise).
    pub topology: Option<Topology>,
    /// Where the parameter server runs (topology `parameter-server`).
    pub server: ServerPlacement,
    /// Synchronous exchange, or CELGC's local steps with periodic averaging.
    pub strategy: StrategyConfig,
    /// Seeds every random choice of the compressors, with the rank, step and unit.
    pub seed: u64,
    /// η₀, the learning rate CELGC's γ is given at (γ decays with η/η₀).
    /// Needed by CELGC with clipping only.
    pub base_lr: Option<f64>,
    /// What a NaN or Inf in any worker's gradient or loss does: stop (an
    /// error on every worker, naming the step, worker and tensor) or skip
    /// the step on every worker.
    pub on_nonfinite: OnNonFinite,
    /// Compare a checksum of the parameters across workers every this many
    /// steps (CELGC: rounds); 0 never. A mismatch is an error.
    pub checksum_every: u64,
    /// Measure the contraction ratio, TernGrad's bound ratios and a gradient
    /// histogram every this many steps; 0 never.
    pub stats_every: u64,
}

impl Default for DataParallelConfig {
    fn default() -> Self {
        Self {
            compressor: CompressorSpec::default(),
            compression: CompressionConfig::default(),
            topology: None,
            server: ServerPlacement::CoLocated,
            strategy: StrategyConfig::default(),
            seed: 1,
            base_lr: None,
            on_nonfinite: OnNonFinite::Stop,
            checksum_every: 50,
            stats_every: 0,
        }
    }
}

impl DataParallelConfig {
    /// Synchronous data parallelism with `compressor` (a `CompressorConfig`,
    /// or a `CustomCompressor`) and every other option at its default (the
    /// topology and granularity the compressor needs).
    pub fn new(compressor: impl Into<CompressorSpec>) -> Self {
        Self { compressor: compressor.into(), ..Default::default() }
    }

    /// Synchronous data parallelism with a compressor of the user's own.
    pub fn custom(compressor: CustomCompressor) -> Self {
        Self::new(compressor)
    }

    pub fn with_topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    pub fn with_compression(mut self, compression: CompressionConfig) -> Self {
        self.compression = compression;
        self
    }

    pub fn with_granularity(mut self, granularity: Granularity) -> Self {
        self.compression.granularity = granularity;
        self
    }

    pub fn with_memory(mut self, memory: MemoryKind) -> Self {
        self.compression.memory = memory;
        self
    }

    pub fn with_residual(mut self, residual: ResidualForm) -> Self {
        self.compression.residual = residual;
        self
    }

    pub fn with_exclusions(mut self, exclude: Exclusions) -> Self {
        self.compression.exclude = exclude;
        self
    }

    pub fn with_warmup(mut self, warmup: DensitySchedule) -> Self {
        self.compression.warmup = warmup;
        self
    }

    /// DGC momentum's correction factor (`compression.dgc_momentum`, in [0, 1)).
    pub fn with_dgc_momentum(mut self, momentum: f32) -> Self {
        self.compression.dgc_momentum = momentum;
        self
    }

    /// DGC's local gradient clipping at `local_clip · N^(−1/2)` (0: off).
    pub fn with_local_clip(mut self, local_clip: f64) -> Self {
        self.compression.local_clip = local_clip;
        self
    }

    /// Whether to compress on the model's GPU when it can (`compression.on_device`).
    pub fn with_on_device(mut self, on_device: bool) -> Self {
        self.compression.on_device = on_device;
        self
    }

    /// Bucket size in MiB (`compression.bucket_mb`) and whether buckets are
    /// pipelined through a communication thread (`compression.pipeline`).
    pub fn with_buckets(mut self, bucket_mb: f64, pipeline: bool) -> Self {
        self.compression.bucket_mb = bucket_mb;
        self.compression.pipeline = pipeline;
        self
    }

    pub fn with_server(mut self, server: ServerPlacement) -> Self {
        self.server = server;
        self
    }

    pub fn with_strategy(mut self, strategy: StrategyConfig) -> Self {
        self.strategy = strategy;
        self
    }

    /// CELGC with local clipping at `gamma` (given at learning rate
    /// `base_lr`) and model averaging every `period` steps.
    pub fn with_celgc(mut self, period: u64, gamma: f64, base_lr: f64) -> Self {
        self.strategy =
            StrategyConfig { kind: StrategyKind::ClippedAveraging, period, gamma, ..Default::default() };
        self.base_lr = Some(base_lr);
        self
    }

    /// CELGC (or any model averaging): send the periodic model change
    /// through the compressor with error feedback instead of averaging the
    /// models densely (`strategy.compress_change`).
    pub fn with_compress_change(mut self, compress_change: bool) -> Self {
        self.strategy.compress_change = compress_change;
        self
    }

    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn with_base_lr(mut self, lr: f64) -> Self {
        self.base_lr = Some(lr);
        self
    }

    pub fn with_on_nonfinite(mut self, on: OnNonFinite) -> Self {
        self.on_nonfinite = on;
        self
    }

    pub fn with_checksum_every(mut self, steps: u64) -> Self {
        self.checksum_every = steps;
        self
    }

    pub fn with_stats_every(mut self, steps: u64) -> Self {
        self.stats_every = steps;
        self
    }

    /// The synchronous phase's own configuration (`strategy.sync`, or the
    /// dense `warmup_steps`): this one with the phase's compressor, memory
    /// and topology, exchanging every step. `None` without a phase.
    pub fn sync_phase_config(&self) -> Option<DataParallelConfig> {
        let phase = self.strategy.sync_phase()?;
        Some(DataParallelConfig {
            compressor: phase.compressor().into(),
            compression: CompressionConfig { memory: phase.memory, ..self.compression.clone() },
            topology: phase.topology,
            strategy: StrategyConfig::default(),
            ..self.clone()
        })
    }

    /// How the compressor's messages combine across workers.
    pub fn combine(&self) -> Combine {
        self.compressor.combine()
    }

    /// The compressor's name, as records and errors show it.
    pub fn compressor_name(&self) -> String {
        self.compressor.name().to_string()
    }

    /// The topology in effect: the configured one, or the one the
    /// compressor's messages need.
    pub fn topology(&self) -> Topology {
        self.topology.unwrap_or_else(|| crate::route::default_topology(self.combine()))
    }

    /// The granularity in effect: the configured one, or the one the compressor needs.
    pub fn granularity(&self) -> Granularity {
        self.compression.granularity.resolve(&self.compressor)
    }

    pub fn placement(&self) -> ServerPlacement {
        self.server
    }

    /// A 64-bit hash of the whole configuration (a custom compressor by its
    /// name), compared across workers.
    pub fn fingerprint(&self) -> u64 {
        let mut json = serde_json::to_string(self).expect("configurations serialize");
        if let CompressorSpec::Custom(c) = &self.compressor {
            json.push_str(&format!("{c:?}"));
        }
        crate::checksum::checksum_bytes(json.as_bytes())
    }
}
