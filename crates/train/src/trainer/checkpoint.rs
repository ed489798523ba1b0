//! The trainer's checkpoints: a directory `checkpoints/step-<S>/` per
//! checkpoint, made current by atomically rewriting `checkpoints/latest`
//! once every file is in place. Files are [`Sections`]:
//!
//! - `state.bin` (rank 0): `params` (the model, layout order), `param_ids`
//!   (the ids the optimizer state is keyed by), `optimizer` (burn's
//!   optimizer record) and `counters` (JSON of [`Counters`]).
//! - `rank-<r>.bin` (every rank): `dp` (JSON of the handle's counters) and
//!   `dp.<buffer>` (its strategy's buffers: memories, CELGC's anchor); when
//!   replicas differ between rounds (CELGC), also the rank's own `params`,
//!   `param_ids` and `optimizer`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Bytes;
use serde::{Deserialize, Serialize};

use super::run::{io, Shared, TrainError};
use crate::config::{TrainConfig, RESUME_SAFE_KEYS};
use crate::records::write_atomic;
use crate::sections::{CheckpointError, Sections, Values};
use gradcomp_dp::params;
use gradcomp_dp::{DataParallel, DataParallelError, DataParallelState};

/// The run's counters a resume continues from (rank 0's `state.bin`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Steps taken.
    pub step: u64,
    pub workers: usize,
    /// Bytes all workers sent and received through the strategy so far.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Measured and predicted wall-clock of training so far.
    pub wall_seconds: f64,
    pub predicted_wall_seconds: BTreeMap<String, f64>,
    /// The current epoch's training loss so far (sum and steps), so an
    /// epoch interrupted and resumed reports the mean over all its steps.
    pub epoch_loss_sum: f64,
    pub epoch_loss_steps: u64,
    /// How many steps of the current workers' epochs precede `step`: `step`
    /// itself unless a resume changed the number of workers (absent in
    /// checkpoints from before issue #27: then `step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// The learning rate's factor from changes of workers (`elastic.lr =
    /// "linear"`); absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_factor: Option<f64>,
}

impl Counters {
    /// These counters at step `step`, `position` steps into the current workers' epochs.
    pub fn at(&self, step: u64, position: u64) -> Self {
        Self { step, position: (position != step).then_some(position), ..self.clone() }
    }

    /// The step's position in the epochs of the workers that made the checkpoint.
    pub fn position(&self) -> u64 {
        self.position.unwrap_or(self.step)
    }
}

/// A model and its optimizer as saved.
pub(super) struct Replica {
    pub params: Vec<f32>,
    pub param_ids: Vec<u64>,
    pub optimizer: Vec<u8>,
}

impl Replica {
    fn put(&self, s: &mut Sections) {
        s.put("params", Values::F32(self.params.clone()));
        s.put("param_ids", Values::U64(self.param_ids.clone()));
        s.put("optimizer", Values::Bytes(self.optimizer.clone()));
    }

    /// An error naming the first non-finite parameter: a model that cannot
    /// be resumed or evaluated.
    fn check_finite(&self) -> Result<(), CheckpointError> {
        match self.params.iter().position(|p| !p.is_finite()) {
            None => Ok(()),
            Some(i) => Err(CheckpointError::Diverged { parameter: i, value: self.params[i] }),
        }
    }

    /// The saved replica; [`Replica::apply`] checks that it fits the model.
    fn get(s: &Sections) -> Result<Self, CheckpointError> {
        Ok(Replica {
            params: s.f32("params")?.to_vec(),
            param_ids: s.u64("param_ids")?.to_vec(),
            optimizer: s.bytes("optimizer")?.to_vec(),
        })
    }

    /// This worker's model and optimizer now.
    pub fn of<M: Module>(model: &M, optim: &ModuleOptimizer) -> Result<Self, TrainError> {
        let mut params = Vec::new();
        params::read_params(model, &mut params);
        let optimizer = optim
            .into_bytes()
            .map_err(|e| TrainError::Checkpoint(format!("the optimizer state did not serialize: {e}")))?;
        Ok(Replica { params, param_ids: params::param_ids(model), optimizer: optimizer.to_vec() })
    }

    /// Puts the saved values into `model` and `optim`; checks they fit.
    pub fn apply<M: Module>(
        &self,
        model: M,
        optim: ModuleOptimizer,
    ) -> Result<(M, ModuleOptimizer), TrainError> {
        let layout = params::layout(&model);
        if self.params.len() != layout.total() || self.param_ids.len() != layout.slots().len() {
            return Err(TrainError::Checkpoint(format!(
                "the checkpoint's model has {} values in {} tensors, this one {} in {}; was it made with another model or data?",
                self.params.len(),
                self.param_ids.len(),
                layout.total(),
                layout.slots().len()
            )));
        }
        let model = params::assign_param_ids(params::write_params(model, &self.params), &self.param_ids);
        let optim = optim
            .from_bytes(Bytes::from_bytes_vec(self.optimizer.clone()))
            .map_err(|e| TrainError::Checkpoint(format!("the optimizer state did not load: {e}")))?;
        Ok((model, optim))
    }
}

/// A checkpoint as read back.
pub(crate) struct Checkpoint {
    pub dir: PathBuf,
    pub counters: Counters,
    /// Rank 0's model and optimizer.
    pub replica: Replica,
}

fn bad(path: &Path) -> impl Fn(String) -> TrainError + '_ {
    move |problem| TrainError::Checkpoint(format!("{}: {problem}", path.display()))
}

/// [`bad`] for a checkpoint's own error.
fn bad_section(path: &Path) -> impl Fn(CheckpointError) -> TrainError + '_ {
    move |e| bad(path)(e.to_string())
}

/// Refuses a resume whose configuration `now` changes the meaning of the run
/// `saved` describes; names every differing key.
fn check_config(saved: &TrainConfig, now: &TrainConfig, allow_changes: bool) -> Result<(), TrainError> {
    let changed = saved.differing_keys(now);
    if changed.iter().any(|k| k == "workers") {
        elastic_refusal(saved, now)?;
    }
    let safe = |k: &String| RESUME_SAFE_KEYS.iter().any(|s| k == s || k.starts_with(&format!("{s}.")));
    let (allowed, refused): (Vec<String>, Vec<String>) = changed.into_iter().partition(safe);
    if !refused.is_empty() {
        return Err(TrainError::Checkpoint(format!(
            "the checkpoint was made with another {}: resuming would change the run's meaning; start a new run (another name) instead",
            refused.join(", ")
        )));
    }
    if !allowed.is_empty() && !allow_changes {
        return Err(TrainError::Checkpoint(format!(
            "the configuration changed since the checkpoint ({}): pass --allow-change to resume with the new values",
            allowed.join(", ")
        )));
    }
    Ok(())
}

/// Refuses a resume with another number of workers where N is part of the
/// run's meaning ([`TrainConfig::fixed_workers_reason`]).
fn elastic_refusal(saved: &TrainConfig, now: &TrainConfig) -> Result<(), TrainError> {
    let (from, to) = (saved.workers, now.workers);
    match saved.fixed_workers_reason() {
        Some(why) => Err(TrainError::Checkpoint(format!(
            "the checkpoint was made with {from} workers and this run has {to}: {why}; resume with workers = {from}, or start a new run"
        ))),
        None => Ok(()),
    }
}

/// The step of the checkpoint `checkpoints/latest` names, if there is one.
pub(super) fn latest_step(run_dir: &Path) -> Option<u64> {
    step_of(&latest_dir(run_dir).ok()?)
}

/// The step a checkpoint directory `…/step-<S>` holds.
fn step_of(dir: &Path) -> Option<u64> {
    dir.file_name()?.to_str()?.strip_prefix("step-")?.parse().ok()
}

/// The directory `checkpoints/latest` points at.
fn latest_dir(run_dir: &Path) -> Result<PathBuf, TrainError> {
    let latest = run_dir.join("checkpoints/latest");
    let name = std::fs::read_to_string(&latest).map_err(|_| {
        TrainError::Checkpoint(format!(
            "no checkpoint to resume in {} (looked for {})",
            run_dir.display(),
            latest.display()
        ))
    })?;
    let name = name.trim();
    if name.is_empty() || name.contains('/') || name.contains("..") {
        return Err(TrainError::Checkpoint(format!("{} names no checkpoint directory", latest.display())));
    }
    Ok(run_dir.join("checkpoints").join(name))
}

impl Checkpoint {
    /// Reads the run directory's latest checkpoint (rank 0's state) and
    /// checks it against `cfg`: the configuration it was made with (any
    /// change of meaning is refused, naming the keys; the keys of
    /// [`RESUME_SAFE_KEYS`] may change when `allow_changes`), the step its
    /// directory names, and finite parameters.
    pub fn load_latest(run_dir: &Path, cfg: &TrainConfig, allow_changes: bool) -> Result<Self, TrainError> {
        let dir = latest_dir(run_dir)?;
        let path = dir.join("state.bin");
        let s = Sections::read(&path).map_err(|e| TrainError::Checkpoint(e.to_string()))?;
        let counters: Counters = serde_json::from_slice(s.bytes("counters").map_err(bad_section(&path))?)
            .map_err(|e| bad(&path)(e.to_string()))?;
        let saved_cfg = std::str::from_utf8(s.bytes("config").map_err(bad_section(&path))?)
            .map_err(|e| e.to_string())
            .and_then(|t| TrainConfig::from_toml(t, &[]).map_err(|e| e.to_string()))
            .map_err(|e| bad(&path)(format!("its configuration does not load: {e}")))?;
        check_config(&saved_cfg, cfg, allow_changes)?;
        if step_of(&dir) != Some(counters.step) {
            return Err(bad(&path)(format!(
                "its counters say step {}, its directory {}",
                counters.step,
                dir.display()
            )));
        }
        let replica = Replica::get(&s).map_err(bad_section(&path))?;
        replica.check_finite().map_err(bad_section(&path))?;
        Ok(Self { dir, counters, replica })
    }

    /// Rank `rank`'s own file: the handle's state and, when replicas differ
    /// between rounds, its own model and optimizer.
    pub fn rank_state(&self, rank: usize) -> Result<(DataParallelState, Option<Replica>), TrainError> {
        let path = self.dir.join(format!("rank-{rank}.bin"));
        let s = Sections::read(&path).map_err(|e| TrainError::Checkpoint(e.to_string()))?;
        let mut state: DataParallelState = serde_json::from_slice(s.bytes("dp").map_err(bad_section(&path))?)
            .map_err(|e| bad(&path)(e.to_string()))?;
        state.buffers = s.f32_under("dp.");
        let own =
            s.0.contains_key("params").then(|| Replica::get(&s)).transpose().map_err(bad_section(&path))?;
        if let Some(own) = &own {
            own.check_finite().map_err(bad_section(&path))?;
        }
        Ok((state, own))
    }
}

/// One worker's checkpoint, copied out of the model, optimizer and handle at
/// a step: what [`Snapshot::write_files`] then writes, on this thread or in
/// the background.
pub(super) struct Snapshot {
    run_dir: PathBuf,
    /// `step-<S>`, zero-padded so that name order is step order.
    name: String,
    rank: usize,
    workers: usize,
    keep: usize,
    /// `rank-<r>.bin`.
    mine: Sections,
    /// Rank 0's `state.bin`.
    shared: Option<Sections>,
}

impl Snapshot {
    /// Copies this worker's state at its current step.
    pub fn take<M: Module>(
        sh: &Shared<'_>,
        dp: &DataParallel,
        model: &M,
        optim: &ModuleOptimizer,
        counters: &Counters,
    ) -> Result<Self, TrainError> {
        let rank = dp.rank();
        let replica = Replica::of(model, optim)?;
        let mut mine = Sections::default();
        let mut state = dp.state()?;
        for (k, v) in std::mem::take(&mut state.buffers) {
            mine.put(&format!("dp.{k}"), Values::F32(v));
        }
        mine.put("dp", Values::Bytes(serde_json::to_vec(&state).expect("counters serialize")));
        if !dp.identical_replicas() {
            replica.put(&mut mine);
        }
        let shared = (rank == 0).then(|| {
            let mut s = Sections::default();
            replica.put(&mut s);
            s.put("counters", Values::Bytes(serde_json::to_vec(counters).expect("counters serialize")));
            s.put("config", Values::Bytes(sh.cfg.to_toml().into_bytes()));
            s
        });
        Ok(Self {
            run_dir: sh.run_dir.clone(),
            name: format!("step-{:09}", dp.steps()),
            rank,
            workers: dp.world_size(),
            keep: sh.cfg.train.keep_checkpoints as usize,
            mine,
            shared,
        })
    }

    fn dir(&self) -> PathBuf {
        self.run_dir.join("checkpoints").join(&self.name)
    }

    /// Writes this worker's files (each atomically, with its checksum).
    pub fn write_files(&self) -> Result<(), TrainError> {
        let dir = self.dir();
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let checkpoint_err = |e: crate::sections::CheckpointError| TrainError::Checkpoint(e.to_string());
        self.mine.write(&dir.join(format!("rank-{}.bin", self.rank))).map_err(checkpoint_err)?;
        if let Some(s) = &self.shared {
            s.write(&dir.join("state.bin")).map_err(checkpoint_err)?;
        }
        Ok(())
    }

    /// Rank 0, once every rank's file is in place: points
    /// `checkpoints/latest` at this checkpoint, then prunes old ones.
    fn commit(&self) -> Result<(), TrainError> {
        let latest = self.run_dir.join("checkpoints/latest");
        write_atomic(&latest, self.name.as_bytes()).map_err(io(&latest))?;
        prune(&self.run_dir.join("checkpoints"), self.keep)
    }

    /// Whether every rank's file of this checkpoint is in place (each is
    /// renamed into place whole, so present means complete).
    fn all_ranks_written(&self) -> bool {
        let dir = self.dir();
        (0..self.workers).all(|r| dir.join(format!("rank-{r}.bin")).is_file())
    }
}

/// Writes a checkpoint of this worker now; rank 0 also writes the shared
/// state and, once every rank's file is in place, points
/// `checkpoints/latest` at it.
pub(super) fn write<M: Module>(
    sh: &Shared<'_>,
    dp: &mut DataParallel,
    model: &M,
    optim: &ModuleOptimizer,
    counters: &Counters,
) -> Result<(), TrainError> {
    let snapshot = Snapshot::take(sh, dp, model, optim, counters)?;
    snapshot.write_files()?;
    let rank = snapshot.rank;
    dp.collective_mut().barrier().map_err(|source| DataParallelError::Comm { rank, source })?;
    if rank == 0 {
        snapshot.commit()?;
    }
    Ok(())
}

/// A checkpoint being written by a thread of its own while training goes
/// on (`train.checkpoint_every_steps`). No collective marks its end: rank 0's
/// thread commits it once every rank's file is in place (the run directory
/// is shared, as every checkpoint already assumes). At most one is in
/// flight per worker: the next waits for it.
pub(super) struct Background {
    thread: Option<std::thread::JoinHandle<Result<(), TrainError>>>,
    /// Tells rank 0's thread to stop waiting for the other ranks' files (the
    /// run is ending with an error and they may never come).
    abandon: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How long rank 0 waits for the other ranks' files of a background checkpoint.
const OTHER_RANKS_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl Background {
    /// Writes `snapshot` on a new thread.
    pub fn start(snapshot: Snapshot) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let abandon = std::sync::Arc::new(AtomicBool::new(false));
        let stop = std::sync::Arc::clone(&abandon);
        let thread = std::thread::Builder::new()
            .name(format!("checkpoint-{}", snapshot.name))
            .spawn(move || {
                snapshot.write_files()?;
                if snapshot.rank != 0 {
                    return Ok(());
                }
                let start = std::time::Instant::now();
                while !snapshot.all_ranks_written() {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    if start.elapsed() > OTHER_RANKS_WAIT {
                        return Err(TrainError::Checkpoint(format!(
                            "{}: not every rank wrote its file within {} s; `latest` still names the previous checkpoint",
                            snapshot.dir().display(),
                            OTHER_RANKS_WAIT.as_secs()
                        )));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                snapshot.commit()
            })
            .expect("the OS starts a thread");
        Self { thread: Some(thread), abandon }
    }

    /// Waits for the write (and rank 0's commit) to end; its error if it failed.
    pub fn wait(mut self) -> Result<(), TrainError> {
        self.join()
    }

    fn join(&mut self) -> Result<(), TrainError> {
        match self.thread.take().map(|t| t.join()) {
            None => Ok(()),
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(TrainError::Checkpoint("the checkpoint writer panicked".into())),
        }
    }
}

impl Drop for Background {
    /// A run ending with an error: let the file being written finish (so
    /// no half-written checkpoint is left to a resume: it would be ignored,
    /// `latest` not naming it) without waiting on ranks that may be gone.
    fn drop(&mut self) {
        self.abandon.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.join();
    }
}

/// Removes checkpoint directories newer than `checkpoints/latest` (or all of
/// them without it): writes a run ended before it committed. A resume
/// starts from `latest` and would otherwise find another attempt's files in
/// the directory of a step it reaches again.
pub(super) fn remove_uncommitted(run_dir: &Path) {
    let latest = latest_step(run_dir);
    let Ok(entries) = std::fs::read_dir(run_dir.join("checkpoints")) else { return };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let newer = step_of(&path).is_some_and(|s| latest.is_none_or(|l| s > l));
        if newer && path.is_dir() {
            // Under MPI every rank clears the same directory: another may have been first.
            std::fs::remove_dir_all(&path).ok();
        }
    }
}

/// Deletes all but the newest `keep` checkpoint directories (0 keeps all).
/// Runs after `latest` names the newest, so a crash midway leaves a valid one.
fn prune(checkpoints: &Path, keep: usize) -> Result<(), TrainError> {
    if keep == 0 {
        return Ok(());
    }
    let mut steps: Vec<PathBuf> = std::fs::read_dir(checkpoints)
        .map_err(io(checkpoints))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("step-"))
        })
        .collect();
    // Zero-padded step numbers: name order is step order.
    steps.sort();
    let old = steps.len().saturating_sub(keep);
    for dir in &steps[..old] {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    Ok(())
}

/// Removes the temporary files an atomic write left behind when its process
/// died (`<name>.tmp<pid>`) in the run directory and its checkpoints.
pub(super) fn remove_stale_temporaries(run_dir: &Path) {
    let is_tmp = |p: &Path| {
        p.extension()
            .and_then(|e| e.to_str())
            .and_then(|e| e.strip_prefix("tmp"))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    };
    let mut dirs = vec![run_dir.to_path_buf(), run_dir.join("checkpoints")];
    if let Ok(entries) = std::fs::read_dir(run_dir.join("checkpoints")) {
        dirs.extend(entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()));
    }
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if path.is_file() && is_tmp(&path) {
                std::fs::remove_file(&path).ok();
            }
        }
    }
}

/// Everything a resume or an evaluation reads from one checkpoint file's
/// bytes, short of the filesystem and the comparison with the run's
/// configuration: the fuzzing entry point (`gradcomp bench fuzz`). Sections
/// present are parsed as their readers do.
pub fn parse_file_bytes(bytes: &[u8]) -> Result<(), CheckpointError> {
    let s = Sections::decode(bytes, "input")?;
    let corrupt = |problem: String| CheckpointError::Corrupt { path: "input".into(), problem };
    if s.0.contains_key("counters") {
        serde_json::from_slice::<Counters>(s.bytes("counters")?).map_err(|e| corrupt(e.to_string()))?;
    }
    if s.0.contains_key("config") {
        let text = std::str::from_utf8(s.bytes("config")?).map_err(|e| corrupt(e.to_string()))?;
        TrainConfig::from_toml(text, &[]).map_err(|e| corrupt(e.to_string()))?;
    }
    if s.0.contains_key("params") {
        Replica::get(&s)?.check_finite()?;
    }
    if s.0.contains_key("dp") {
        serde_json::from_slice::<DataParallelState>(s.bytes("dp")?).map_err(|e| corrupt(e.to_string()))?;
        let _ = s.f32_under("dp.");
    }
    Ok(())
}

/// A valid state file of a small run, as a seed for fuzzing.
pub fn sample_file_bytes() -> Vec<u8> {
    let mut s = Sections::default();
    Replica {
        params: (0..64).map(|i| i as f32 * 0.25 - 8.0).collect(),
        param_ids: (0..4).collect(),
        optimizer: b"{\"opaque\":true}".to_vec(),
    }
    .put(&mut s);
    let counters = Counters { step: 12, workers: 2, ..Default::default() };
    s.put("counters", Values::Bytes(serde_json::to_vec(&counters).expect("counters serialize")));
    s.put("config", Values::Bytes(TrainConfig::default().to_toml().into_bytes()));
    s.put("dp", Values::Bytes(serde_json::to_vec(&DataParallelState::default()).expect("state serializes")));
    s.put("dp.memory.0", Values::F32(vec![0.5; 16]));
    s.encode()
}
