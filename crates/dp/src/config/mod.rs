//! [`DataParallelConfig`]: what a [`DataParallel`](super::DataParallel)
//! handle does, as a plain serializable struct with defaults and `with_*`
//! builders (the burn way: `SgdConfig::new().with_momentum(...)`).

use gradcomp_comm::ServerPlacement;
use gradcomp_compress::memory::{DensitySchedule, MemoryKind, ResidualForm};
use gradcomp_compress::{Combine, CompressorConfig};
use serde::{Deserialize, Serialize};

use crate::config::{
    Average, CompressionConfig, ConfigError, Exclusions, Granularity, OnNonFinite, ServerPlace,
    StrategyConfig, StrategyKind, Topology,
};
use crate::layout::GradientLayout;
use crate::strategy::{Celgc, GradientExchange, Strategy, Synchronous};

/// How a worker's gradients are compressed, exchanged and combined.
///
/// Every worker must build the same configuration; [`init`](Self::init)
/// checks that they did. Validation errors name the key as a gradcomp TOML
/// configuration spells it (`compressor.density`, `comm.topology`, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataParallelConfig {
    /// The compressor of every compression unit.
    pub compressor: CompressorConfig,
    /// Granularity, memory, residual form, density warm-up, exclusions, DGC's local clipping.
    pub compression: CompressionConfig,
    /// The collective pattern; `None` picks the one the compressor's
    /// messages need (allreduce for summable messages, allgather otherwise).
    pub topology: Option<Topology>,
    /// Where the parameter server runs (topology `parameter-server`).
    pub server: ServerPlace,
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
            compressor: CompressorConfig::dense(),
            compression: CompressionConfig::default(),
            topology: None,
            server: ServerPlace::CoLocated,
            strategy: StrategyConfig::default(),
            seed: 1,
            base_lr: None,
            on_nonfinite: OnNonFinite::Stop,
            checksum_every: 50,
            stats_every: 0,
        }
    }
}

fn err(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError { key: key.to_string(), problem: problem.into() }
}

impl DataParallelConfig {
    /// Synchronous data parallelism with `compressor` and every other option
    /// at its default.
    pub fn new(compressor: CompressorConfig) -> Self {
        Self { compressor, ..Default::default() }
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

    pub fn with_server(mut self, server: ServerPlace) -> Self {
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
        self.strategy = StrategyConfig { kind: StrategyKind::Celgc, period, gamma, ..Default::default() };
        self.base_lr = Some(base_lr);
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

    /// The topology in effect: the configured one, or the one the
    /// compressor's messages need.
    pub fn topology(&self) -> Topology {
        self.topology.unwrap_or(match self.compressor.build().combine() {
            Combine::Gather => Topology::Allgather,
            _ => Topology::Allreduce,
        })
    }

    pub fn placement(&self) -> ServerPlacement {
        self.server.placement()
    }

    /// Every check that can be made before any work starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.compressor.validate().map_err(|e| err(&format!("compressor.{}", e.key), e.problem))?;
        let c = &self.compression;
        if let DensitySchedule::List { densities } = &c.warmup {
            if let Some(d) = densities.iter().find(|d| !(**d > 0.0 && **d <= 1.0)) {
                return Err(err("compression.warmup.densities", format!("{d} is not in (0, 1]")));
            }
        }
        if !(c.dgc_momentum >= 0.0 && c.dgc_momentum < 1.0) {
            return Err(err("compression.dgc_momentum", "must be in [0, 1)"));
        }
        if c.exclude.min_size == 0 {
            return Err(err("compression.exclude.min_size", "must be at least 1 (1 excludes nothing)"));
        }
        if !(c.local_clip >= 0.0 && c.local_clip.is_finite()) {
            return Err(err("compression.local_clip", "must be ≥ 0 (0 turns it off)"));
        }
        if !(c.bucket_mb > 0.0 && c.bucket_mb <= 1e6) {
            return Err(err(
                "compression.bucket_mb",
                "must be > 0 and at most 1e6 MiB (25 is DDP's default; a value larger than the model sends one bucket)",
            ));
        }
        if let CompressorConfig::Esgd(_) = self.compressor {
            if c.granularity != Granularity::Global {
                return Err(err(
                    "compression.granularity",
                    "eSGD numbers coordinates across all layers; set granularity = \"global\"",
                ));
            }
            if !matches!(c.memory, MemoryKind::Auto | MemoryKind::None) {
                return Err(err(
                    "compression.memory",
                    "eSGD carries its own momentum residual; use \"auto\" or \"none\"",
                ));
            }
        }
        let st = &self.strategy;
        if st.period == 0 {
            return Err(err("strategy.period", "must be at least 1 (the communication period I)"));
        }
        if !(st.gamma >= 0.0 && st.gamma.is_finite()) {
            return Err(err("strategy.gamma", "must be ≥ 0 (0 turns clipping off)"));
        }
        if st.average_at_epoch_end && !(st.kind == StrategyKind::Celgc && st.average == Average::Models) {
            return Err(err(
                "strategy.average_at_epoch_end",
                "applies to CELGC's model averaging (kind = \"celgc\", average = \"models\")",
            ));
        }
        if st.kind == StrategyKind::Celgc {
            if st.average == Average::Gradients && st.period != 1 {
                return Err(err(
                    "strategy.average",
                    "averaging gradients (naive parallel clipping) needs period = 1",
                ));
            }
            if st.average == Average::Gradients && st.compress_delta {
                return Err(err("strategy.compress_delta", "applies to model averaging only"));
            }
            if !st.compress_delta && !matches!(self.compressor, CompressorConfig::Dense {}) {
                return Err(err(
                    "compressor.name",
                    "CELGC averages models densely; set strategy.compress_delta = true to send the model change through a compressor",
                ));
            }
            if st.gamma > 0.0 && !self.base_lr.is_some_and(|l| l > 0.0 && l.is_finite()) {
                return Err(err(
                    "optimizer.lr",
                    "CELGC's γ decays with the learning rate: give the base learning rate (with_base_lr)",
                ));
            }
        }
        if self.topology() == Topology::Allreduce && self.compressor.build().combine() == Combine::Gather {
            return Err(err(
                "comm.topology",
                format!(
                    "compressor {} sends per-worker messages that allreduce cannot sum; use topology = \"allgather\" or \"parameter-server\"",
                    self.compressor.name()
                ),
            ));
        }
        Ok(())
    }

    /// The strategy this configuration describes, for a model of `layout`.
    pub(crate) fn build_strategy(&self, layout: &GradientLayout) -> Box<dyn Strategy> {
        let exchange = |seed| {
            GradientExchange::new(
                layout,
                &self.compressor,
                &self.compression,
                self.topology(),
                self.placement(),
                seed,
            )
        };
        match self.strategy.kind {
            StrategyKind::Sync => {
                Box::new(Synchronous::new(exchange(self.seed), self.compression.local_clip))
            }
            StrategyKind::Celgc => {
                // The model delta's random stream differs from a gradient exchange's.
                let delta = self.strategy.compress_delta.then(|| exchange(self.seed ^ 0xCE16C));
                Box::new(Celgc::new(&self.strategy, self.base_lr.unwrap_or(1.0), delta))
            }
        }
    }

    /// A 64-bit hash of the whole configuration, compared across workers.
    pub(crate) fn fingerprint(&self) -> u64 {
        let json = serde_json::to_string(self).expect("configurations serialize");
        crate::params::checksum_bytes(json.as_bytes())
    }
}
