//! The training configuration: a TOML file plus `--set key=value`
//! overrides, validated in full before any work starts. Every option has a
//! default; the resolved configuration is written into the run directory.

use std::path::{Path, PathBuf};

use gradcomp_comm::{AllgathervAlgorithm, AllreduceAlgorithm, Calibration, NetworkModel, ServerPlacement};
pub use gradcomp_compress::memory::MemoryKind;
use gradcomp_compress::memory::{DensitySchedule, ResidualForm};
use gradcomp_compress::CompressorConfig;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::api::DataParallelConfig;
use crate::data::{ImageFiles, ImageLayout, TextFiles};
use crate::device::DeviceSpec;
use crate::models::LstmLmConfig;

/// A configuration problem: names the key and says what is wrong.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("config: {key}: {problem}")]
pub struct ConfigError {
    pub key: String,
    pub problem: String,
}

fn err(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError { key: key.to_string(), problem: problem.into() }
}

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
    pub data: DataConfig,
    pub model: ModelConfig,
    pub optimizer: OptimizerConfig,
    pub schedule: ScheduleConfig,
    pub train: LoopConfig,
    pub compressor: CompressorConfig,
    pub compression: CompressionConfig,
    pub comm: CommConfig,
    pub network: NetworkConfig,
    pub strategy: StrategyConfig,
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
            data: DataConfig::default(),
            model: ModelConfig::default(),
            optimizer: OptimizerConfig::default(),
            schedule: ScheduleConfig::default(),
            train: LoopConfig::default(),
            compressor: CompressorConfig::default(),
            compression: CompressionConfig::default(),
            comm: CommConfig::default(),
            network: NetworkConfig::default(),
            strategy: StrategyConfig::default(),
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dataset {
    /// `mnist/` in the data directory (`scripts/fetch-data.sh mnist`).
    Mnist,
    /// `fashion-mnist/` in the data directory (`scripts/fetch-data.sh fashion-mnist`).
    FashionMnist,
    /// Any IDX image dataset in `data.dir`: any size, channel count and
    /// number of classes; file names `data.train_images` etc.
    Images,
    /// `ptb/` in the data directory (`scripts/fetch-data.sh ptb`).
    Ptb,
    /// Any word-level corpus in `data.dir`; file names `data.train_text` etc.
    Text,
    /// Generated images (tests, smoke runs): `synthetic_size` examples of
    /// `synthetic_shape` in `synthetic_classes` classes.
    SyntheticImages,
    /// A generated token stream (tests, smoke runs).
    SyntheticTokens,
}

impl Dataset {
    pub fn is_text(self) -> bool {
        matches!(self, Dataset::Ptb | Dataset::Text | Dataset::SyntheticTokens)
    }
}

/// Per-channel input normalisation of images (the papers' scripts use
/// MNIST's mean 0.1307 and std 0.3081).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normalize {
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

/// Training-time augmentation of images, the CIFAR recipe of the papers'
/// scripts: a random crop of the zero-padded image back to its size, then a
/// random left-right flip. Evaluation sees the images as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Augment {
    /// Pixels of zero padding on each side before the crop; 0: no crop.
    pub crop_padding: usize,
    /// Mirror each image left-right with probability 1/2.
    pub flip: bool,
}

impl Augment {
    pub fn is_on(&self) -> bool {
        self.crop_padding > 0 || self.flip
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    pub dataset: Dataset,
    /// Data directory; default `$GRADCOMP_DATA`, else `~/.cache/gradcomp/data`.
    /// For `images` and `text`, the directory that holds the files.
    pub dir: Option<PathBuf>,
    /// Minibatch per worker.
    pub batch_size: usize,
    /// Use only this many training examples (0: all), for quick runs.
    pub train_examples: usize,
    /// Evaluate on at most this many test examples (0: all).
    pub test_examples: usize,
    /// Truncated-BPTT length (language models).
    pub bptt: usize,
    /// AWD-LSTM's variable BPTT: each training segment's length is drawn
    /// around `bptt` and the step (η, and CELGC's γ with it) is scaled by
    /// length/`bptt`. Evaluation keeps `bptt`.
    pub variable_bptt: bool,
    /// Synthetic datasets: examples (images) or tokens.
    pub synthetic_size: usize,
    /// Synthetic images: `[channels, rows, cols]`.
    pub synthetic_shape: [usize; 3],
    /// Synthetic images: number of classes (at most 256).
    pub synthetic_classes: usize,
    /// Rotate language-model shards among workers every epoch (CELGC).
    pub rotate_shards: bool,
    /// `images`: the IDX files in `dir` (each tried as named, then with `.gz`).
    pub train_images: String,
    pub train_labels: String,
    pub test_images: String,
    pub test_labels: String,
    /// `images`: how 4-D IDX files order an image (`chw` or `hwc`).
    pub image_layout: ImageLayout,
    /// Image datasets: inputs `(p/255 − mean)/std` per channel (one value, or
    /// one per channel), at training and test alike; none: `p/255`.
    pub normalize: Option<Normalize>,
    /// Image datasets: random crop and flip of training images.
    pub augment: Augment,
    /// `text`: the corpus files in `dir`; an empty `valid_text` means none.
    pub train_text: String,
    pub valid_text: String,
    pub test_text: String,
}

impl Default for DataConfig {
    fn default() -> Self {
        let images = ImageFiles::default();
        let text = TextFiles::default();
        Self {
            dataset: Dataset::Mnist,
            dir: None,
            batch_size: 16,
            train_examples: 0,
            test_examples: 0,
            bptt: 35,
            variable_bptt: false,
            synthetic_size: 2048,
            synthetic_shape: [1, 28, 28],
            synthetic_classes: 10,
            rotate_shards: false,
            train_images: images.train_images,
            train_labels: images.train_labels,
            test_images: images.test_images,
            test_labels: images.test_labels,
            image_layout: ImageLayout::Chw,
            normalize: None,
            augment: Augment::default(),
            train_text: text.train,
            valid_text: text.valid,
            test_text: text.test,
        }
    }
}

impl DataConfig {
    pub fn image_files(&self) -> ImageFiles {
        ImageFiles {
            train_images: self.train_images.clone(),
            train_labels: self.train_labels.clone(),
            test_images: self.test_images.clone(),
            test_labels: self.test_labels.clone(),
        }
    }

    pub fn text_files(&self) -> TextFiles {
        TextFiles {
            train: self.train_text.clone(),
            valid: self.valid_text.clone(),
            test: self.test_text.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelName {
    Fcn5,
    Lenet5,
    FashionCnn,
    Resnet18,
    Lstm,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub name: ModelName,
    /// Language model sizes (`vocab` is set from the corpus).
    pub lstm: LstmLmConfig,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self { name: ModelName::Lenet5, lstm: LstmLmConfig::default() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerName {
    /// SGD with momentum (PyTorch semantics), Nesterov, L2 weight decay.
    Sgd,
    /// Adam with L2 weight decay.
    Adam,
    /// AdamW: Adam with decoupled weight decay.
    Adamw,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    pub name: OptimizerName,
    pub lr: f64,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    /// No weight decay on 1-D parameters (biases), as in Shi et al.'s code.
    pub no_decay_on_biases: bool,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self {
            name: OptimizerName::Sgd,
            lr: 0.01,
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
            no_decay_on_biases: false,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    Constant,
    /// lr × gamma^(epoch / step_epochs).
    Step,
    /// lr × (1 − t/T)^power over all steps (TernGrad's default, power 0.5).
    Poly,
    /// lr / (2·(e + 1)) in epoch e (0-based): eSGD's η_e = 0.1/(2e), epochs from 1.
    InverseEpoch,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleConfig {
    pub kind: ScheduleKind,
    pub step_epochs: u32,
    pub gamma: f64,
    pub power: f64,
    /// Linear warm-up from lr/warmup_steps to lr over this many epochs.
    pub warmup_epochs: f64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self { kind: ScheduleKind::Constant, step_epochs: 1, gamma: 0.1, power: 0.5, warmup_epochs: 0.0 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnNonFinite {
    /// Stop the run with the step, worker and tensor named.
    Stop,
    /// Skip the step on every worker and go on.
    Skip,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopConfig {
    pub epochs: u32,
    /// Stop after this many steps in all (0: no limit).
    pub max_steps: u64,
    /// Compare a parameter checksum across workers every this many steps (0: never).
    pub checksum_every: u64,
    pub on_nonfinite: OnNonFinite,
    /// Write a checkpoint every this many epochs (0: only on Ctrl-C).
    pub checkpoint_every: u32,
    /// Measure the contraction ratio and gradient histogram every this many steps (0: never).
    pub stats_every: u64,
    /// Evaluate on the test set after every epoch.
    pub eval: bool,
    /// Also evaluate every this many steps within an epoch (0: at epoch
    /// ends only); every evaluation is a line of `evals.jsonl`, with the
    /// cumulative measured and predicted wall-clock (time to accuracy).
    pub eval_every: u64,
    /// Stop the run at the first evaluation whose test accuracy (a fraction,
    /// e.g. 0.98) reaches this (image tasks).
    pub target_accuracy: Option<f64>,
    /// Keep this many of the newest checkpoints, deleting older ones (0: keep all).
    pub keep_checkpoints: u32,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            epochs: 1,
            max_steps: 0,
            checksum_every: 50,
            on_nonfinite: OnNonFinite::Stop,
            checkpoint_every: 1,
            stats_every: 50,
            eval: true,
            eval_every: 0,
            target_accuracy: None,
            keep_checkpoints: 3,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Granularity {
    /// Each tensor is a compression unit.
    Layer,
    /// The whole flattened model is one unit.
    Global,
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
            granularity: Granularity::Layer,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// Summable messages through allreduce.
    Allreduce,
    /// Every worker's messages to every worker (allgatherv), summed locally.
    Allgather,
    /// Upload to a server that aggregates and broadcasts (TernGrad's protocol).
    ParameterServer,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerPlace {
    /// Rank 0 is both a worker and the server.
    #[default]
    CoLocated,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommConfig {
    pub topology: Topology,
    pub server: ServerPlace,
    /// Seconds a collective waits for a peer before failing.
    pub timeout_seconds: f64,
    /// MPI: seconds a peer's heartbeat may be silent, while a rank waits in a
    /// collective, before the job ends naming that peer (a stopped, dead or
    /// cut-off rank); 0 turns heartbeats off.
    pub heartbeat_seconds: f64,
}

impl Default for CommConfig {
    fn default() -> Self {
        Self {
            topology: Topology::Allreduce,
            server: ServerPlace::CoLocated,
            timeout_seconds: 300.0,
            heartbeat_seconds: 10.0,
        }
    }
}

impl ServerPlace {
    pub fn placement(self) -> ServerPlacement {
        match self {
            ServerPlace::CoLocated => ServerPlacement::CoLocated,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// Synchronous compressed SGD: gradients exchanged every step.
    Sync,
    /// CELGC: local SGD with per-worker clipping, models averaged every `period` steps.
    Celgc,
}

/// Which norm CELGC clips with (ALGORITHMS.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClipNorm {
    /// The worker's own raw gradient norm (the paper).
    Local,
    /// The norm of the average gradient of the last communication round.
    GlobalAverage,
    /// The larger of the two.
    Max,
}

/// What CELGC averages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Average {
    /// Models, every `period` steps (CELGC).
    Models,
    /// Gradients, every step, clipping on the average: "naive parallel
    /// clipping", the paper's baseline (`period` must be 1).
    Gradients,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StrategyConfig {
    pub kind: StrategyKind,
    /// CELGC: the communication period I.
    pub period: u64,
    /// CELGC: γ in η_eff = min(η, γ/‖g‖); decays with η. 0 turns clipping off.
    pub gamma: f64,
    pub clip_norm: ClipNorm,
    pub average: Average,
    /// CELGC: also average the models at every epoch end but the last,
    /// whatever the period (the authors' scripts do; the paper's algorithm
    /// does not say). The last epoch's evaluation uses the average anyway.
    pub average_at_epoch_end: bool,
    /// CELGC: send the periodic model change through `[compressor]` with
    /// error feedback instead of averaging models densely.
    pub compress_delta: bool,
}

impl Default for StrategyConfig {
    fn default() -> Self {
        Self {
            kind: StrategyKind::Sync,
            period: 1,
            gamma: 0.0,
            clip_norm: ClipNorm::Local,
            average: Average::Models,
            average_at_epoch_end: false,
            compress_delta: false,
        }
    }
}

/// The links a run's wall-clock is predicted for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Link bandwidths in bit/s.
    pub links_bps: Vec<f64>,
    /// Per-message latency α in seconds.
    pub alpha: f64,
    /// The allreduce algorithm priced: ring, recursive-doubling,
    /// rabenseifner, nonoverlapping, or open-mpi (Open MPI 4.1's choice
    /// for the size and worker count).
    pub allreduce: AllreduceAlgorithm,
    /// The allgatherv algorithm priced: ring, neighbor, bruck,
    /// gather-broadcast, or open-mpi.
    pub allgatherv: AllgathervAlgorithm,
    /// Link calibrations from `gradcomp bench comm --calibrate-out`: each
    /// replaces the nominal model (`alpha`, line rate, algorithms) of the
    /// link speed it was measured at, and adds that speed if missing.
    pub calibration: Vec<PathBuf>,
}

impl NetworkConfig {
    /// The model of every link speed predicted for, in bit/s: the nominal
    /// line rate with `alpha` and the configured algorithms, replaced by its
    /// calibration where `calibration` has one (which also adds its speed).
    pub fn models(&self) -> Result<Vec<(f64, NetworkModel)>, ConfigError> {
        let mut links: Vec<(f64, NetworkModel)> = self
            .links_bps
            .iter()
            .map(|&b| {
                let m = NetworkModel::from_bits_per_second(b, self.alpha)
                    .with_allreduce(self.allreduce)
                    .with_allgatherv(self.allgatherv);
                (b, m)
            })
            .collect();
        for path in &self.calibration {
            let c = Calibration::load(path).map_err(|e| err("network.calibration", e))?;
            match links.iter_mut().find(|(b, _)| *b == c.link_bps) {
                Some(link) => link.1 = c.model,
                None => links.push((c.link_bps, c.model)),
            }
        }
        Ok(links)
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            links_bps: vec![1e8, 1e9, 1e10],
            alpha: 1e-4,
            allreduce: AllreduceAlgorithm::Ring,
            allgatherv: AllgathervAlgorithm::Ring,
            calibration: Vec::new(),
        }
    }
}

/// Sets `key` (dotted path) to `value` in a TOML table. The value is parsed
/// as a TOML literal (`0.01`, `true`, `[1, 2]`, `"x"`), else taken as a string.
pub fn set_key(table: &mut toml::Table, key: &str, value: &str) -> Result<(), ConfigError> {
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut parts = key.split('.').peekable();
    let mut cur = table;
    while let Some(part) = parts.next() {
        if part.is_empty() {
            return Err(err(key, "empty key segment"));
        }
        if parts.peek().is_none() {
            cur.insert(part.to_string(), parsed);
            return Ok(());
        }
        let next = cur.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = next.as_table_mut().ok_or_else(|| err(key, format!("{part} is not a table")))?;
    }
    Err(err(key, "empty key"))
}

/// Splits a `--set KEY=VALUE` argument; the one parser every command uses.
pub fn parse_override(arg: &str) -> Result<(String, String), ConfigError> {
    let (k, v) = arg.split_once('=').ok_or_else(|| {
        err("--set", format!("{arg}: expected KEY=VALUE, e.g. --set compressor.density=0.01"))
    })?;
    let k = k.trim();
    if k.is_empty() {
        return Err(err("--set", format!("{arg}: the key before '=' is empty")));
    }
    Ok((k.to_string(), v.trim().to_string()))
}

impl TrainConfig {
    /// Parses TOML text with `--set` overrides applied, then validates.
    pub fn from_toml(text: &str, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| err("(file)", one_line(&e.to_string())))?;
        for (k, v) in overrides {
            set_key(&mut table, k, v)?;
        }
        let cfg: TrainConfig = toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| {
            let msg = one_line(&e.to_string());
            let key = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.contains("unknown field"))
                .map_or_else(|| "(value)".to_string(), str::to_string);
            err(&key, msg)
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads a config file with overrides.
    pub fn load(path: &Path, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("--config", format!("cannot read {}: {e}", path.display())))?;
        Self::from_toml(&text, overrides)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("configs serialize")
    }

    /// The data-parallel part of the configuration, as the library API takes it.
    pub fn data_parallel(&self) -> DataParallelConfig {
        DataParallelConfig {
            compressor: self.compressor.clone(),
            compression: self.compression.clone(),
            topology: Some(self.comm.topology),
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
        self.model.name == ModelName::Lstm
    }

    /// Every check that can be made before any work starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() || self.name.contains('/') {
            return Err(err("name", "must be a non-empty name without '/'"));
        }
        if self.workers == 0 {
            return Err(err("workers", "must be at least 1"));
        }
        self.device.check().map_err(|p| err("device", p))?;
        if self.data.batch_size == 0 {
            return Err(err("data.batch_size", "must be at least 1"));
        }
        if self.data.dataset.is_text() != self.is_language_model() {
            return Err(err(
                "model.name",
                format!("{:?} does not fit dataset {:?} (the LSTM takes ptb, text or synthetic-tokens; the others take images)", self.model.name, self.data.dataset),
            ));
        }
        if self.data.bptt == 0 {
            return Err(err("data.bptt", "must be at least 1"));
        }
        if let Some(n) = &self.data.normalize {
            if n.mean.is_empty() || n.mean.len() != n.std.len() {
                return Err(err(
                    "data.normalize",
                    format!(
                        "{} mean(s) and {} std(s): give one value, or one per channel, of each",
                        n.mean.len(),
                        n.std.len()
                    ),
                ));
            }
            if let Some(m) = n.mean.iter().find(|m| !m.is_finite()) {
                return Err(err("data.normalize.mean", format!("{m} is not finite")));
            }
            if let Some(s) = n.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
                return Err(err(
                    "data.normalize.std",
                    format!("{s} is out of range: must be finite and > 0"),
                ));
            }
            if self.data.dataset.is_text() {
                return Err(err(
                    "data.normalize",
                    "applies to image datasets; a language model's inputs are tokens",
                ));
            }
        }
        if self.data.augment.is_on() && self.data.dataset.is_text() {
            return Err(err(
                "data.augment",
                "applies to image datasets; a language model's inputs are tokens",
            ));
        }
        if self.data.variable_bptt && !self.data.dataset.is_text() {
            return Err(err(
                "data.variable_bptt",
                "applies to language models; an image dataset has no BPTT",
            ));
        }
        if self.data.synthetic_shape.contains(&0) {
            return Err(err("data.synthetic_shape", "every dimension must be at least 1"));
        }
        if !(2..=256).contains(&self.data.synthetic_classes) {
            return Err(err(
                "data.synthetic_classes",
                format!(
                    "{} is out of range: 2..=256 classes (one byte per label)",
                    self.data.synthetic_classes
                ),
            ));
        }
        if matches!(self.data.dataset, Dataset::SyntheticImages | Dataset::SyntheticTokens)
            && self.data.synthetic_size == 0
        {
            return Err(err("data.synthetic_size", "must be at least 1"));
        }
        let lstm = &self.model.lstm;
        for (key, v) in [
            ("model.lstm.vocab", lstm.vocab),
            ("model.lstm.embed", lstm.embed),
            ("model.lstm.hidden", lstm.hidden),
        ] {
            if v == 0 {
                return Err(err(key, "must be at least 1"));
            }
        }
        if !(0.0..1.0).contains(&lstm.dropout) {
            return Err(err(
                "model.lstm.dropout",
                format!("{} is out of range: a probability in [0, 1)", lstm.dropout),
            ));
        }
        let o = &self.optimizer;
        for (key, v, ok) in [
            ("optimizer.lr", o.lr, o.lr > 0.0 && o.lr.is_finite()),
            ("optimizer.momentum", o.momentum, (0.0..1.0).contains(&o.momentum)),
            ("optimizer.weight_decay", o.weight_decay, o.weight_decay >= 0.0 && o.weight_decay.is_finite()),
            ("optimizer.beta1", o.beta1, (0.0..1.0).contains(&o.beta1)),
            ("optimizer.beta2", o.beta2, (0.0..1.0).contains(&o.beta2)),
            ("optimizer.eps", o.eps, o.eps > 0.0),
        ] {
            if !ok {
                return Err(err(key, format!("{v} is out of range")));
            }
        }
        if o.nesterov && o.momentum == 0.0 {
            return Err(err("optimizer.nesterov", "needs momentum > 0"));
        }
        let s = &self.schedule;
        // Checked whatever the kind, so a typo waits for no schedule change to show.
        if s.step_epochs == 0 {
            return Err(err("schedule.step_epochs", "must be at least 1"));
        }
        if !(positive(s.gamma) && s.gamma.is_finite()) {
            return Err(err(
                "schedule.gamma",
                format!("{} is out of range: must be finite and > 0", s.gamma),
            ));
        }
        if !(non_negative(s.warmup_epochs) && s.warmup_epochs.is_finite()) {
            return Err(err("schedule.warmup_epochs", "must be finite and ≥ 0"));
        }
        if !(non_negative(s.power) && s.power.is_finite()) {
            return Err(err(
                "schedule.power",
                format!("{} is out of range: the poly schedule needs a finite power ≥ 0", s.power),
            ));
        }
        self.check_sizes()?;
        if self.train.epochs == 0 && self.train.max_steps == 0 {
            return Err(err("train.epochs", "must be at least 1 (or set train.max_steps)"));
        }
        if let Some(t) = self.train.target_accuracy {
            if !(t > 0.0 && t <= 1.0) {
                return Err(err("train.target_accuracy", "must be a fraction in (0, 1], e.g. 0.98"));
            }
            if !self.train.eval || self.is_language_model() {
                return Err(err(
                    "train.target_accuracy",
                    "needs train.eval = true and an image task (language models report perplexity)",
                ));
            }
        }
        self.data_parallel().validate()?;
        if !(positive(self.comm.timeout_seconds) && self.comm.timeout_seconds.is_finite()) {
            return Err(err("comm.timeout_seconds", "must be finite and positive"));
        }
        let hb = self.comm.heartbeat_seconds;
        if !(non_negative(hb) && hb.is_finite()) || (hb > 0.0 && hb < 2.0) {
            return Err(err(
                "comm.heartbeat_seconds",
                format!("{hb} is out of range: 0 (off) or at least 2 (heartbeats go every 0.5 s)"),
            ));
        }
        if let Some(b) = self.network.links_bps.iter().find(|&&b| !(positive(b) && b.is_finite())) {
            return Err(err(
                "network.links_bps",
                format!("{b} is out of range: every link must be finite and > 0"),
            ));
        }
        if !(non_negative(self.network.alpha) && self.network.alpha.is_finite()) {
            return Err(err("network.alpha", "must be finite and ≥ 0"));
        }
        self.network.models()?;
        Ok(())
    }
}

/// In-process workers are threads of one process; past this many, use MPI.
pub const MAX_IN_PROCESS_WORKERS: usize = 1024;

impl TrainConfig {
    /// Upper bounds on sizes, so that a mistyped size is refused at once
    /// instead of aborting on allocation after the workers started: the
    /// in-process worker count, and the memory generated data would take,
    /// against what the machine has available.
    fn check_sizes(&self) -> Result<(), ConfigError> {
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

/// The memory the machine has available (Linux `MemAvailable`), if known.
pub(crate) fn available_memory_bytes() -> Option<f64> {
    crate::records::proc_kb("/proc/meminfo", "MemAvailable").map(|kb| kb * 1024.0)
}

/// `x > 0`, false for NaN.
fn positive(x: f64) -> bool {
    x > 0.0
}

/// `x ≥ 0`, false for NaN.
fn non_negative(x: f64) -> bool {
    x >= 0.0
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Keys a resumed run may change with `--allow-change`: where the run
/// writes and computes, how long it goes on, what it measures and how
/// patiently it waits. Every other key (model, data, compressor, optimizer,
/// learning rate, seed, workers, strategy) is the run's meaning.
pub const RESUME_SAFE_KEYS: &[&str] = &[
    "name",
    "run_dir",
    "device",
    "data.dir",
    "train.epochs",
    "train.max_steps",
    "train.eval",
    "train.eval_every",
    "train.target_accuracy",
    "train.checkpoint_every",
    "train.stats_every",
    "train.checksum_every",
    "train.on_nonfinite",
    "train.keep_checkpoints",
    "comm.timeout_seconds",
    "comm.heartbeat_seconds",
    "compression.on_device",
    "compression.pipeline",
    "network.links_bps",
    "network.alpha",
    "network.allreduce",
    "network.allgatherv",
    "network.calibration",
];

impl TrainConfig {
    /// The dotted keys whose values differ between `self` and `other`.
    pub fn differing_keys(&self, other: &TrainConfig) -> Vec<String> {
        fn flatten(
            prefix: &str,
            v: &serde_json::Value,
            out: &mut std::collections::BTreeMap<String, String>,
        ) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                        flatten(&key, v, out);
                    }
                }
                other => {
                    out.insert(prefix.to_string(), other.to_string());
                }
            }
        }
        let (mut a, mut b) = (Default::default(), Default::default());
        flatten("", &serde_json::to_value(self).expect("configs serialize"), &mut a);
        flatten("", &serde_json::to_value(other).expect("configs serialize"), &mut b);
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        keys.into_iter().filter(|k| a.get(*k) != b.get(*k)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_the_machine_and_bad_schedule_powers_are_refused() {
        let bad = |sets: &[(&str, &str)]| {
            let ov: Vec<(String, String)> =
                sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            TrainConfig::from_toml("", &ov).and_then(|c| c.validate()).unwrap_err()
        };
        let e = bad(&[("data.dataset", "\"synthetic-images\""), ("data.synthetic_size", "1000000000000")]);
        assert_eq!(e.key, "data.synthetic_size", "{e}");
        assert!(e.problem.contains("GB"), "{e}");
        let e = bad(&[
            ("data.synthetic_shape", "[100000, 100000, 100000]"),
            ("data.dataset", "\"synthetic-images\""),
        ]);
        assert_eq!(e.key, "data.synthetic_size", "{e}");
        let e = bad(&[("workers", "100000")]);
        assert!(e.key == "workers" && e.problem.contains("mpi"), "{e}");
        for power in ["nan", "-1.0", "inf"] {
            let e = bad(&[("schedule.power", power)]);
            assert_eq!(e.key, "schedule.power", "{power}: {e}");
        }
    }

    #[test]
    fn defaults_validate_and_round_trip() {
        let c = TrainConfig::default();
        c.validate().unwrap();
        let back = TrainConfig::from_toml(&c.to_toml(), &[]).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn overrides_and_errors_name_the_key() {
        let text =
            "name = \"t\"\nworkers = 4\n[compressor]\nname = \"topk\"\n[comm]\ntopology = \"allgather\"\n";
        let c = TrainConfig::from_toml(text, &[("compressor.density".into(), "0.01".into())]).unwrap();
        assert_eq!(c.compressor.density(), Some(0.01));
        assert_eq!(c.workers, 4);
        let e = TrainConfig::from_toml(text, &[("compressor.densty".into(), "0.01".into())]).unwrap_err();
        assert!(e.to_string().contains("densty"), "{e}");
        let e = TrainConfig::from_toml(text, &[("comm.topology".into(), "allreduce".into())]).unwrap_err();
        assert_eq!(e.key, "comm.topology");
        let e = TrainConfig::from_toml(text, &[("workers".into(), "0".into())]).unwrap_err();
        assert_eq!(e.key, "workers");
        let e = TrainConfig::from_toml(text, &[("compressor.density".into(), "2".into())]).unwrap_err();
        assert_eq!(e.key, "compressor.density");
        let e = TrainConfig::from_toml("[optimizer]\nlr = -1\n", &[]).unwrap_err();
        assert_eq!(e.key, "optimizer.lr");
        let e = TrainConfig::from_toml("bogus = 1\n", &[]).unwrap_err();
        assert_eq!(e.key, "bogus");
        let e = TrainConfig::from_toml("[model]\nname = \"lstm\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "model.name");
    }
}
