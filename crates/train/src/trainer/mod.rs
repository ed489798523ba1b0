//! The built-in trainer: N workers, each with a model replica and a data
//! shard, trained through the library's own [`DataParallel`] handle, with
//! records, checkpoints, evaluation and progress.
//!
//! Per worker and step ([`worker`]): forward/backward on its minibatch →
//! [`DataParallel::sync`] (non-finite check, stop agreement, the strategy's
//! exchange) → the configured burn optimizer at the step's learning rate.
//! Under CELGC, [`DataParallel::average_model`] comes first. Parameters
//! never travel after the initial broadcast; the handle compares checksums
//! every `train.checksum_every` steps.
//!
//! Modules by job: [`launch`] (in-process threads or this MPI rank),
//! [`worker`] (the step loop), [`recorder`] (step and epoch records),
//! [`checkpoint`] (write and resume), [`eval`] (the one evaluation routine).
//!
//! [`DataParallel`]: gradcomp_dp::DataParallel
//! [`DataParallel::sync`]: gradcomp_dp::DataParallel::sync
//! [`DataParallel::average_model`]: gradcomp_dp::DataParallel::average_model

mod checkpoint;
mod eval;
mod launch;
mod recorder;
mod worker;

pub use checkpoint::Counters;
/// Checkpoint files at the byte level, for fuzzing.
pub mod checkpoint_bytes {
    pub use super::checkpoint::{parse_file_bytes, sample_file_bytes};
}
pub use eval::EvalSet;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use burn::tensor::Device;
use serde::Serialize;

use gradcomp_dp::SyncError;
use crate::config::{ConfigError, TrainConfig};
use crate::data::{DataError, TrainData};
use crate::models::{EvalStats, ModelChoice, Net, WithModel};
use crate::records::EpochRecord;

/// Why a run stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error("records: {0}")]
    Records(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("worker {rank} panicked: {message}")]
    Panic { rank: usize, message: String },
}

impl TrainError {
    /// Whether this error only reports another worker's failure.
    fn is_secondary(&self) -> bool {
        matches!(self, TrainError::Sync(e) if e.is_secondary())
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}

/// Progress as the run goes, for a progress bar.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    pub epoch: u32,
    pub epochs: u32,
    pub step_in_epoch: u64,
    pub steps_per_epoch: u64,
    /// Mean loss of the workers this step.
    pub loss: f64,
    /// Bytes all workers sent through the strategy so far.
    pub bytes_sent: u64,
    pub last_accuracy: Option<f64>,
    pub last_perplexity: Option<f64>,
    /// Where rank 0 compresses (the GPU, or the host and why).
    pub location: gradcomp_dp::CompressionLocation,
}

/// Receives progress on rank 0.
pub trait Observer: Send {
    fn step(&mut self, _p: &Progress) {}
    fn epoch(&mut self, _r: &EpochRecord) {}
}

/// An observer that ignores everything.
pub struct Silent;
impl Observer for Silent {}

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Continue from the run directory's latest checkpoint.
    pub resume: bool,
    /// Replace a run already in the run directory (without it, or
    /// `resume`, an existing run is an error, never silently overwritten).
    pub overwrite: bool,
    /// On resume, accept changes of the keys in
    /// [`RESUME_SAFE_KEYS`](crate::config::RESUME_SAFE_KEYS) (more epochs, another device).
    pub allow_changes: bool,
    /// Set (e.g. by Ctrl-C) to checkpoint and stop after the current step.
    pub stop: Arc<AtomicBool>,
}

/// What a finished (or stopped) run produced.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub run_dir: PathBuf,
    pub epochs: Vec<EpochRecord>,
    pub steps: u64,
    /// Checksum of the final parameters (identical on every worker; CELGC:
    /// of the averaged model).
    pub params_checksum: u64,
    /// Stopped by the stop flag (a checkpoint was written).
    pub interrupted: bool,
    /// The step whose evaluation first reached `train.target_accuracy`
    /// (the run stopped there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_target: Option<u64>,
    #[serde(skip)]
    pub final_params: Vec<f32>,
}

/// Everything the workers share.
pub(crate) struct Shared<'a> {
    cfg: &'a TrainConfig,
    data: &'a TrainData,
    run_dir: PathBuf,
    opts: RunOptions,
    observer: Mutex<Box<dyn Observer>>,
}

/// Trains the configured built-in model on the configured data with N
/// in-process workers (or this process's MPI rank, when `backend = "mpi"`),
/// writing records into the run directory.
pub fn train(
    cfg: &TrainConfig,
    opts: RunOptions,
    observer: Box<dyn Observer>,
) -> Result<RunSummary, TrainError> {
    cfg.validate()?;
    let data = TrainData::load(cfg)?;
    struct Train<'a> {
        cfg: &'a TrainConfig,
        data: &'a TrainData,
        opts: RunOptions,
        observer: Box<dyn Observer>,
    }
    impl WithModel for Train<'_> {
        type Output = Result<RunSummary, TrainError>;
        fn run<M: Net>(self, make: impl Fn(&Device) -> M + Send + Sync + Clone + 'static) -> Self::Output {
            train_with(self.cfg, self.data, make, self.opts, self.observer)
        }
    }
    ModelChoice::new(cfg, &data)?.with(Train { cfg, data: &data, opts, observer })
}

/// Trains any model with the built-in trainer: `make` builds a replica on a
/// device (it is called once per worker; the seed is set before rank 0's),
/// `data` is the training and test data. Everything else (workers,
/// compression, optimizer, schedule, records, checkpoints) comes from `cfg`;
/// `cfg.model` is not read.
pub fn train_with<M: Net>(
    cfg: &TrainConfig,
    data: &TrainData,
    make: impl Fn(&Device) -> M + Send + Sync + Clone,
    opts: RunOptions,
    observer: Box<dyn Observer>,
) -> Result<RunSummary, TrainError> {
    cfg.validate()?;
    // Reading a parameter's shape initializes it, drawing from burn's global
    // generator: under the lock, as every model construction, so another
    // trainer's seeded draws are not interleaved with these.
    let parameters = {
        let _guard = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        gradcomp_dp::params::layout(&make(&gradcomp_dp::default_device())).total()
    };
    cfg.check_model_memory(parameters)?;
    let run_dir = cfg.run_dir();
    prepare_run_dir(&run_dir, &opts)?;
    let shared = Shared { cfg, data, run_dir, opts, observer: Mutex::new(observer) };
    launch::run(&shared, make)
}

/// What marks a directory as holding a run.
const RUN_FILES: &[&str] =
    &["config.toml", "manifest.json", "steps.jsonl", "epochs.jsonl", "evals.jsonl", "checkpoints"];

/// Refuses to start a new run over an existing one unless asked to
/// overwrite it (then removes the old run's files); a resume keeps it.
fn prepare_run_dir(run_dir: &Path, opts: &RunOptions) -> Result<(), TrainError> {
    if opts.resume {
        checkpoint::remove_stale_temporaries(run_dir);
        return Ok(());
    }
    let existing: Vec<&str> = RUN_FILES.iter().copied().filter(|f| run_dir.join(f).exists()).collect();
    if existing.is_empty() {
        return Ok(());
    }
    if !opts.overwrite {
        return Err(TrainError::Config(crate::config::ConfigError {
            key: "run_dir".into(),
            problem: format!(
                "{} already holds a run ({}): pass --resume to continue it, --overwrite to replace it, or choose another name",
                run_dir.display(),
                existing.join(", ")
            ),
        }));
    }
    for f in existing {
        let path = run_dir.join(f);
        let removed =
            if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        // Under MPI every rank clears the same directory: another may have been first.
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path)(e)),
            _ => {}
        }
    }
    Ok(())
}

/// Serializes model construction. burn draws initial weights from a
/// process-global generator, so two trainers (or a trainer's workers)
/// building models at once would interleave their draws and a seeded run
/// would not be reproducible when another runs beside it.
static INIT_LOCK: Mutex<()> = Mutex::new(());

/// Builds a model; with `seed`, from a freshly seeded generator. burn
/// initializes parameters lazily, on first use, so they are materialized
/// (read once) while the lock is held.
pub(crate) fn build_model<M: Net>(make: &impl Fn(&Device) -> M, device: &Device, seed: Option<u64>) -> M {
    let _guard = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = seed {
        device.seed(s);
    }
    let model = make(device);
    gradcomp_dp::params::read_params(&model, &mut Vec::new());
    model
}

/// Evaluates the parameters of a run directory's latest checkpoint on the
/// test split (one process, no workers).
pub fn evaluate_run(run_dir: &Path, data_dir: Option<&Path>) -> Result<(TrainConfig, EvalStats), TrainError> {
    let mut cfg = TrainConfig::load(&run_dir.join("config.toml"), &[])?;
    if let Some(d) = data_dir {
        cfg.data.dir = Some(d.to_path_buf());
    }
    // The run's own configuration, the data directory aside (a safe change).
    let saved = checkpoint::Checkpoint::load_latest(run_dir, &cfg, true)?;
    // Only rank 0's state holds the model, but a checkpoint with a damaged
    // rank file is damaged: say so now, not at the next resume.
    for rank in 0..cfg.workers {
        saved.rank_state(rank)?;
    }
    let data = TrainData::load(&cfg)?;
    struct Evaluate<'a> {
        saved: &'a checkpoint::Checkpoint,
        data: &'a TrainData,
        cfg: &'a TrainConfig,
    }
    impl WithModel for Evaluate<'_> {
        type Output = Result<EvalStats, TrainError>;
        fn run<M: Net>(self, make: impl Fn(&Device) -> M + Send + Sync + Clone + 'static) -> Self::Output {
            let model = build_model(&make, &self.cfg.device.device(0), None);
            eval::checkpoint(self.saved, model, self.data, self.cfg)
        }
    }
    let stats = ModelChoice::new(&cfg, &data)?.with(Evaluate { saved: &saved, data: &data, cfg: &cfg })?;
    Ok((cfg, stats))
}
