//! What a run takes and gives: its options, progress and observer, its
//! summary and errors, what its workers share, and the seeded construction
//! of a model.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use burn::tensor::Device;
use serde::Serialize;

use crate::config::{ConfigError, TrainConfig};
use crate::data::{DataError, TrainData};
use crate::models::Net;
use crate::records::EpochRecord;
use gradcomp_dp::DataParallelError;

/// Why a run stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    DataParallel(#[from] DataParallelError),
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
    pub(super) fn is_secondary(&self) -> bool {
        matches!(self, TrainError::DataParallel(e) if e.is_secondary())
    }
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}

/// Progress as the run goes, for a progress bar.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Steps done, this one included: the run's count, across epochs and resumes.
    pub step: u64,
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
    /// Fault injection, for tests of what a lost worker costs.
    pub fault: Option<Fault>,
    /// `strategy.plan = "auto"`: the inputs the plan was chosen for; the
    /// workers decide its period again on drift
    /// ([`DataParallel::decide_again_from`](gradcomp_dp::DataParallel::decide_again_from)).
    pub replan: Option<gradcomp_dp::exchange::auto_plan::PlanInputs>,
}

/// A fault the trainer injects into its own run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Worker `rank` dies (its thread panics) once `after_step` steps are
    /// done, as a crashed or killed worker would; its peers' collectives fail.
    LoseWorker { rank: usize, after_step: u64 },
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
    pub cfg: &'a TrainConfig,
    pub data: &'a TrainData,
    pub run_dir: PathBuf,
    pub opts: RunOptions,
    pub observer: Mutex<Box<dyn Observer>>,
    /// Steps rank 0 has completed: what a lost worker costs is counted from it.
    pub steps_done: std::sync::atomic::AtomicU64,
}

/// Serializes model construction. burn draws initial weights from a
/// process-global generator, so two trainers (or a trainer's workers)
/// building models at once would interleave their draws and a seeded run
/// would not be reproducible when another runs beside it.
pub(super) static INIT_LOCK: Mutex<()> = Mutex::new(());

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
