//! The training configuration: a TOML file plus `--set key=value`
//! overrides, validated in full before any work starts. Every option has a
//! default; the resolved configuration is written into the run directory.
//!
//! [`TrainConfig`] is one section per job: the library's own
//! (`[compressor]`, `[compression]`, `[strategy]`, and `[comm]`'s topology
//! and server: [`gradcomp_dp::DataParallelConfig`]'s fields, whose types it
//! uses) and the trainer's (`[data]`, `[model]`, `[optimizer]`,
//! `[schedule]`, `[train]`, `[network]`, `[comm]`'s timeouts). The
//! reference of every key is docs/CONFIG.md, checked against these structs
//! by a test.

mod comm;
mod data;
mod elastic;
mod model;
mod optimizer;
mod overrides;
mod resume;
mod sizes;
#[cfg(test)]
mod tests;
mod training;
mod validate;

pub use comm::{CommConfig, NetworkConfig};
pub use data::{Augment, DataConfig, Dataset, ImageFiles, ImageLayout, Normalize, TextFiles};
pub use elastic::{ElasticConfig, ElasticLr, LostState};
pub use gradcomp_compress::memory::MemoryKind;
pub use gradcomp_dp::config::{
    Average, ClipNorm, CompressionConfig, ConfigError, Exclusions, Granularity, OuterConfig, PeriodRule,
    PlanChoice, ServerPlacement, StrategyConfig, StrategyKind, SyncPhase, Topology,
};
pub use gradcomp_dp::OnNonFinite;
pub use model::{GptConfig, LstmLmConfig, ModelConfig, ModelName};
pub use optimizer::{OptimizerConfig, OptimizerName, ScheduleConfig, ScheduleKind};
pub use overrides::{parse_override, set_key};
pub use resume::RESUME_SAFE_KEYS;
pub use sizes::MAX_IN_PROCESS_WORKERS;
pub use training::LoopConfig;

use std::path::PathBuf;

use gradcomp_compress::CompressorConfig;
use gradcomp_dp::config::{CompressionConfig as Compression, StrategyConfig as Strategy};
use gradcomp_dp::DataParallelConfig;
use serde::{Deserialize, Serialize};

use crate::device::DeviceSpec;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Run name; the run directory defaults to `runs/<name>`.
    pub name: String,
    /// Where the run writes (config, manifest, records, checkpoints).
    pub run_dir: Option<PathBuf>,
    pub seed: u64,
    /// Data-parallel workers.
    pub workers: usize,
    pub backend: Backend,
    /// Where the workers compute: `cpu` (default), `cuda`, `cuda:N`, `wgpu`.
    pub device: DeviceSpec,
    pub data: data::DataConfig,
    pub model: model::ModelConfig,
    pub optimizer: optimizer::OptimizerConfig,
    pub schedule: optimizer::ScheduleConfig,
    pub train: training::LoopConfig,
    pub compressor: CompressorConfig,
    pub compression: Compression,
    pub comm: comm::CommConfig,
    pub network: comm::NetworkConfig,
    pub strategy: Strategy,
    /// A resume with another number of workers (issue #27).
    pub elastic: ElasticConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            name: "run".into(),
            run_dir: None,
            seed: 1,
            workers: 1,
            backend: Backend::InProcess,
            device: DeviceSpec::Cpu,
            data: data::DataConfig::default(),
            model: model::ModelConfig::default(),
            optimizer: optimizer::OptimizerConfig::default(),
            schedule: optimizer::ScheduleConfig::default(),
            train: training::LoopConfig::default(),
            compressor: CompressorConfig::default(),
            compression: Compression::default(),
            comm: comm::CommConfig::default(),
            network: comm::NetworkConfig::default(),
            strategy: Strategy::default(),
            elastic: ElasticConfig::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// N worker threads in this process.
    InProcess,
    /// One worker per MPI rank (`mpirun -np N gradcomp train ...`).
    Mpi,
}

impl TrainConfig {
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("configs serialize")
    }

    /// The data-parallel part of the configuration, as the library API takes it.
    pub fn data_parallel(&self) -> DataParallelConfig {
        DataParallelConfig {
            compressor: self.compressor.clone().into(),
            compression: self.compression.clone(),
            topology: self.comm.topology,
            server: self.comm.server,
            strategy: self.strategy.clone(),
            seed: self.seed,
            base_lr: Some(self.optimizer.lr),
            on_nonfinite: self.train.on_nonfinite,
            checksum_every: self.train.checksum_every,
            stats_every: self.train.stats_every,
        }
    }

    pub fn run_dir(&self) -> PathBuf {
        self.run_dir.clone().unwrap_or_else(|| PathBuf::from("runs").join(&self.name))
    }

    pub fn is_language_model(&self) -> bool {
        self.model.name.is_language_model()
    }
}
