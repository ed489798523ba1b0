//! The built-in trainer: N workers, each with a model replica and a data
//! shard, trained through the library's own [`DataParallel`] handle, with
//! records, checkpoints, evaluation and progress.
//!
//! Per worker and step (`worker`): [`DataParallel::begin_step`] (CELGC's
//! round, the epoch's density) → forward/backward on its minibatch →
//! [`DataParallel::step`] (non-finite check, stop agreement, the strategy's
//! exchange, the configured burn optimizer at the step's learning rate). Parameters
//! never travel after the initial broadcast; the handle compares checksums
//! every `train.checksum_every` steps.
//!
//! Modules by job: `run` (what a run takes and gives), `launch` (in-process
//! threads or this MPI rank), `worker` (the step loop), `recorder` (step and
//! epoch records), `checkpoint` (write and resume), `eval` (the one
//! evaluation routine).
//!
//! [`DataParallel`]: gradcomp_dp::DataParallel
//! [`DataParallel::begin_step`]: gradcomp_dp::DataParallel::begin_step
//! [`DataParallel::step`]: gradcomp_dp::DataParallel::step

mod checkpoint;
mod eval;
mod launch;
mod recorder;
mod run;
mod worker;

pub use checkpoint::Counters;
/// Checkpoint files at the byte level, for fuzzing.
pub mod checkpoint_bytes {
    pub use super::checkpoint::{parse_file_bytes, sample_file_bytes};
}
pub use eval::EvalSet;
pub use run::{Fault, Observer, Progress, RunOptions, RunSummary, Silent, TrainError};

/// The step of the run's latest complete checkpoint (the one
/// `checkpoints/latest` names), if it has one: what a resume continues from.
pub fn latest_checkpoint_step(run_dir: &Path) -> Option<u64> {
    checkpoint::latest_step(run_dir)
}

use std::path::Path;
use std::sync::Mutex;

use burn::tensor::Device;

use crate::config::TrainConfig;
use crate::data::TrainData;
use crate::models::{EvalStats, ModelChoice, Net, WithModel};
use run::{build_model, io, Shared, INIT_LOCK};

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
    let (mut cfg, mut opts, mut observer) = (cfg.clone(), opts, observer);
    crate::schedule::resolve_period_rule(&mut cfg, data);
    loop {
        let shared = Shared {
            cfg: &cfg,
            data,
            run_dir: run_dir.clone(),
            opts: opts.clone(),
            observer: Mutex::new(observer),
            steps_done: Default::default(),
        };
        let result = launch::run(&shared, make.clone());
        let steps_done = shared.steps_done.load(std::sync::atomic::Ordering::Relaxed);
        observer = shared.observer.into_inner().unwrap_or_else(|e| e.into_inner());
        match result {
            Err(TrainError::Panic { rank, message }) if continues_without_one(&cfg) => {
                let started = std::time::Instant::now();
                let resume = checkpoint::latest_step(&run_dir);
                eprintln!(
                    "worker {rank} of {} lost after step {steps_done} ({message}); going on with {} from {}",
                    cfg.workers,
                    cfg.workers - 1,
                    resume.map_or("the start".to_string(), |s| format!("the checkpoint of step {s}"))
                );
                record_restart(&run_dir, rank, &message, steps_done, resume, cfg.workers, started)?;
                cfg.workers -= 1;
                // Another try from the latest checkpoint (or from the start, without one).
                opts = RunOptions {
                    resume: resume.is_some(),
                    overwrite: resume.is_none(),
                    allow_changes: true,
                    fault: None,
                    ..opts
                };
                prepare_run_dir(&run_dir, &opts)?;
            }
            other => return other,
        }
    }
}

/// Whether an in-process run that lost a worker goes on with the others:
/// `elastic.min_workers` allows it and that many remain.
fn continues_without_one(cfg: &TrainConfig) -> bool {
    cfg.backend == crate::config::Backend::InProcess
        && cfg.elastic.min_workers > 0
        && cfg.workers > cfg.elastic.min_workers
}

/// A line of `membership.jsonl` for a restart after a lost worker: its
/// cause, the steps lost (done, less the checkpoint's) and what it resumes.
fn record_restart(
    run_dir: &Path,
    rank: usize,
    message: &str,
    steps_done: u64,
    resume: Option<u64>,
    workers: usize,
    started: std::time::Instant,
) -> Result<(), TrainError> {
    std::fs::create_dir_all(run_dir).map_err(io(run_dir))?;
    let line = serde_json::json!({
        "event": "worker lost", "rank": rank, "cause": message, "workers": workers,
        "steps_done": steps_done, "resume_from": resume,
        "steps_lost": steps_done.saturating_sub(resume.unwrap_or(0)),
        "restart_seconds": started.elapsed().as_secs_f64(),
    });
    crate::records::append_membership(run_dir, &line).map_err(io(run_dir))
}

/// What marks a directory as holding a run.
const RUN_FILES: &[&str] =
    &["config.toml", "manifest.json", "steps.jsonl", "epochs.jsonl", "evals.jsonl", "checkpoints"];

/// Refuses to start a new run over an existing one unless asked to
/// overwrite it (then removes the old run's files); a resume keeps it.
fn prepare_run_dir(run_dir: &Path, opts: &RunOptions) -> Result<(), TrainError> {
    if opts.resume {
        checkpoint::remove_stale_temporaries(run_dir);
        checkpoint::remove_uncommitted(run_dir);
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
