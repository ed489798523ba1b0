//! The data-parallel trainer: N workers, each with a model replica and a
//! data shard, joined by a [`Collective`]; synchronous compressed SGD.
//!
//! A step on every worker: forward/backward on its minibatch → flat gradient
//! → (non-finite check and stop flag, one small allreduce) →
//! [`GradientExchange`] → the same optimizer step on the same averaged
//! gradient → parameters written back into the model. Parameters never
//! travel after the initial broadcast; a checksum comparison every
//! `train.checksum_every` steps proves the replicas stayed identical.

use std::collections::BTreeMap;

use burn::module::Module;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::tensor::Device;
use gradcomp_comm::{
    AllreduceAlgorithm, Collective, CommError, Gathered, InProcessGroup, NetworkModel, OpKind,
};
use gradcomp_compress::stats::{ContractionBounds, Histogram};
use gradcomp_compress::{k_for, Combine};
use serde::Serialize;

use crate::checkpoint::{CheckpointError, Sections, Values};
#[allow(unused_imports)]
use crate::config::ConfigError;
use crate::config::{
    AllreduceAlgo, Average, Backend, Dataset, ModelName, OnNonFinite, StrategyKind, TrainConfig,
};
use crate::data::{self, eval_batches, Corpus, DataError, ImageDataset, ImageLoader, ImageSet, TokenLoader};
use crate::layout::GradientLayout;
use crate::metrics::{link_key, write_atomic, EpochRecord, JsonLines, StepRecord};
use crate::models::{Batch, EvalStats, FashionCnn, Fcn5, LeNet5, LstmLm, Net};
use crate::optim::Optimizer;
use crate::params;
use crate::schedule::Schedule;
use crate::strategy::celgc::Celgc;
use crate::strategy::sync::{ExchangeError, GradientExchange};

/// Why a run stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("worker {rank}: {source}")]
    Comm { rank: usize, source: CommError },
    #[error("worker {rank}: {source}")]
    Exchange { rank: usize, source: ExchangeError },
    #[error("step {step}: worker {rank} produced a non-finite {what} (tensor {tensor}); lower the learning rate, or set train.on_nonfinite = \"skip\"")]
    NonFinite { step: u64, rank: usize, what: &'static str, tensor: String },
    #[error("step {step}: worker(s) {ranks:?} produced non-finite gradients or loss")]
    PeerNonFinite { step: u64, ranks: Vec<usize> },
    #[error("step {step}: replicas diverged: parameter checksums differ between workers {ranks:?}")]
    ReplicaMismatch { step: u64, ranks: Vec<usize> },
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("worker {rank} panicked: {message}")]
    Panic { rank: usize, message: String },
}

impl From<CheckpointError> for TrainError {
    fn from(e: CheckpointError) -> Self {
        TrainError::Checkpoint(e.to_string())
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
    pub loss: f64,
    pub bytes_sent: u64,
    pub last_accuracy: Option<f64>,
    pub last_perplexity: Option<f64>,
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
    /// Set (e.g. by Ctrl-C) to checkpoint and stop at the next step.
    pub stop: Arc<AtomicBool>,
}

/// What a finished (or stopped) run produced.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub run_dir: PathBuf,
    pub epochs: Vec<EpochRecord>,
    pub steps: u64,
    /// Checksum of the final parameters (identical on every worker).
    pub params_checksum: u64,
    /// Stopped by the stop flag (a checkpoint was written).
    pub interrupted: bool,
    #[serde(skip)]
    pub final_params: Vec<f32>,
}

/// FNV-1a over the parameters' bit patterns.
pub fn checksum(params: &[f32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in params {
        h ^= u64::from(p.to_bits());
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The training data, loaded once and shared by the workers.
#[derive(Clone)]
pub enum TrainData {
    Images { train: ImageDataset, test: ImageDataset },
    Tokens { train: Arc<Vec<u32>>, test: Arc<Vec<u32>>, vocab: usize },
}

impl TrainData {
    /// Loads (or generates) what the configuration names; a missing or
    /// damaged file is an error that says how to fetch it.
    pub fn load(cfg: &TrainConfig) -> Result<Self, TrainError> {
        let dir = data::data_dir(cfg.data.dir.as_deref());
        let cut = |d: ImageDataset, n: usize| -> ImageDataset {
            if n == 0 || n >= d.len() {
                return d;
            }
            let sz = d.rows * d.cols;
            ImageDataset {
                pixels: Arc::new(d.pixels[..n * sz].to_vec()),
                labels: Arc::new(d.labels[..n].to_vec()),
                ..d
            }
        };
        Ok(match cfg.data.dataset {
            Dataset::Mnist | Dataset::FashionMnist => {
                let set =
                    if cfg.data.dataset == Dataset::Mnist { ImageSet::Mnist } else { ImageSet::FashionMnist };
                TrainData::Images {
                    train: cut(ImageDataset::load(set, &dir, true)?, cfg.data.train_examples),
                    test: cut(ImageDataset::load(set, &dir, false)?, cfg.data.test_examples),
                }
            }
            Dataset::SyntheticImages => {
                let n = cfg.data.synthetic_size;
                TrainData::Images {
                    train: data::synthetic::images(n, cfg.seed, 0),
                    test: data::synthetic::images((n / 4).max(10), cfg.seed, 1),
                }
            }
            Dataset::Ptb => {
                let c = Corpus::load_ptb(&dir)?;
                let mut train = c.train;
                if cfg.data.train_examples > 0 {
                    train.truncate(cfg.data.train_examples);
                }
                let mut test = c.valid;
                if cfg.data.test_examples > 0 {
                    test.truncate(cfg.data.test_examples);
                }
                TrainData::Tokens { train: Arc::new(train), test: Arc::new(test), vocab: c.vocab.len() }
            }
            Dataset::SyntheticTokens => {
                let vocab = cfg.model.lstm.vocab.min(1000) as u32;
                let n = cfg.data.synthetic_size;
                TrainData::Tokens {
                    train: Arc::new(data::synthetic::tokens(n, vocab, cfg.seed, 0)),
                    test: Arc::new(data::synthetic::tokens((n / 4).max(100), vocab, cfg.seed, 1)),
                    vocab: vocab as usize,
                }
            }
        })
    }
}

/// A worker's minibatch source.
enum Loader {
    Images(ImageLoader),
    Tokens { tokens: Arc<Vec<u32>>, rotate: bool, current: Option<(usize, TokenLoader)> },
}

impl Loader {
    fn new(data: &TrainData, cfg: &TrainConfig, rank: usize) -> Self {
        match data {
            TrainData::Images { train, .. } => Loader::Images(ImageLoader::shard(
                train.clone(),
                rank,
                cfg.workers,
                cfg.data.batch_size,
                cfg.seed,
            )),
            TrainData::Tokens { train, .. } => {
                Loader::Tokens { tokens: Arc::clone(train), rotate: cfg.data.rotate_shards, current: None }
            }
        }
    }

    fn token_loader(&mut self, cfg: &TrainConfig, rank: usize, epoch: u32) -> &TokenLoader {
        let Loader::Tokens { tokens, rotate, current } = self else {
            unreachable!("token loader of an image run")
        };
        let rotation = if *rotate { epoch as usize } else { 0 };
        if current.as_ref().is_none_or(|(r, _)| *r != rotation) {
            let l =
                TokenLoader::shard(tokens, rank, cfg.workers, rotation, cfg.data.batch_size, cfg.data.bptt);
            *current = Some((rotation, l));
        }
        &current.as_ref().expect("set above").1
    }

    fn batches_per_epoch(&mut self, cfg: &TrainConfig, rank: usize) -> usize {
        match self {
            Loader::Images(l) => l.batches_per_epoch(),
            Loader::Tokens { .. } => self.token_loader(cfg, rank, 0).batches_per_epoch(),
        }
    }

    fn batch(&mut self, cfg: &TrainConfig, rank: usize, epoch: u32, i: usize) -> Batch {
        match self {
            Loader::Images(l) => l.batch(epoch, i),
            Loader::Tokens { .. } => self.token_loader(cfg, rank, epoch).batch(i),
        }
    }
}

/// What one worker measured in one step (gathered to rank 0 each epoch).
#[derive(Clone, Copy, Debug, Default)]
struct StepLocal {
    compute: f64,
    compress: f64,
    communicate: f64,
    decode: f64,
    optimizer: f64,
    loss: f64,
    wire_bytes: f64,
    selected: f64,
    elements: f64,
    sent: [f64; 8],
    received: [f64; 8],
}

const LOCAL_WORDS: usize = 9 + 16;

impl StepLocal {
    fn to_words(self, out: &mut Vec<f64>) {
        out.extend_from_slice(&[
            self.compute,
            self.compress,
            self.communicate,
            self.decode,
            self.optimizer,
            self.loss,
            self.wire_bytes,
            self.selected,
            self.elements,
        ]);
        out.extend_from_slice(&self.sent);
        out.extend_from_slice(&self.received);
    }

    fn from_words(w: &[f64]) -> Self {
        let mut s = StepLocal {
            compute: w[0],
            compress: w[1],
            communicate: w[2],
            decode: w[3],
            optimizer: w[4],
            loss: w[5],
            wire_bytes: w[6],
            selected: w[7],
            elements: w[8],
            ..Default::default()
        };
        s.sent.copy_from_slice(&w[9..17]);
        s.received.copy_from_slice(&w[17..25]);
        s
    }
}

/// What rank 0 alone records about a step.
#[derive(Clone, Debug, Default)]
struct StepMain {
    step: u64,
    epoch: u32,
    lr: f64,
    density: Option<f64>,
    wall: f64,
    residual_norm: f64,
    contraction: Option<f64>,
    bound_ratio: Vec<f64>,
    histogram: Option<(Vec<f32>, Vec<u64>)>,
    /// Per op kind: bytes rank 0 sent (allreduce message size).
    op_bytes: [u64; 8],
    op_calls: [u64; 8],
    gathered_sizes: Vec<u64>,
    download_bytes: u64,
    extra: Vec<(&'static str, f64)>,
    skipped: bool,
}

/// Everything the workers share.
struct Shared<'a> {
    cfg: &'a TrainConfig,
    data: &'a TrainData,
    layout: GradientLayout,
    init_params: Vec<f32>,
    run_dir: PathBuf,
    opts: RunOptions,
    observer: Mutex<Box<dyn Observer>>,
    resume_from: Option<Sections>,
}

/// Builds the model the configuration names and runs `body` with it.
macro_rules! with_model {
    ($cfg:expr, $data:expr, |$make:ident| $body:expr) => {{
        match $cfg.model.name {
            ModelName::Lenet5 => {
                let $make = |d: &Device| LeNet5::new(d);
                $body
            }
            ModelName::Fcn5 => {
                let $make = |d: &Device| Fcn5::new(d);
                $body
            }
            ModelName::FashionCnn => {
                let $make = |d: &Device| FashionCnn::new(d);
                $body
            }
            ModelName::Lstm => {
                let mut lc = $cfg.model.lstm.clone();
                if let TrainData::Tokens { vocab, .. } = $data {
                    lc.vocab = *vocab;
                }
                let $make = move |d: &Device| LstmLm::new(&lc, d);
                $body
            }
        }
    }};
}

/// Trains as configured with N in-process workers (or this process's MPI
/// rank, when `backend = "mpi"`), writing records into the run directory.
pub fn train(
    cfg: &TrainConfig,
    opts: RunOptions,
    observer: Box<dyn Observer>,
) -> Result<RunSummary, TrainError> {
    cfg.validate()?;
    let data = TrainData::load(cfg)?;
    with_model!(cfg, &data, |make| run_with(cfg, &data, opts, observer, make))
}

/// Serializes model construction. burn draws initial weights from a
/// process-global generator, so two trainers (or a trainer's workers)
/// building models at once would interleave their draws and a seeded run
/// would not be reproducible when another runs beside it.
static INIT_LOCK: Mutex<()> = Mutex::new(());

/// Builds a model; with `seed`, from a freshly seeded generator. burn
/// initializes parameters lazily, on first use, so they are read once here
/// while the lock is held. Returns the model and its flat parameters.
fn build_model<M: Net>(make: &impl Fn(&Device) -> M, device: &Device, seed: Option<u64>) -> (M, Vec<f32>) {
    let _guard = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = seed {
        device.seed(s);
    }
    let model = make(device);
    let mut flat = Vec::new();
    params::read_params(&model, &mut flat);
    (model, flat)
}

fn run_with<M: Net>(
    cfg: &TrainConfig,
    data: &TrainData,
    opts: RunOptions,
    observer: Box<dyn Observer>,
    make: impl Fn(&Device) -> M + Send + Sync + Clone,
) -> Result<RunSummary, TrainError> {
    let device = crate::default_device();
    let (model, init_params) = build_model(&make, &device, Some(cfg.seed));
    let layout = params::layout(&model);
    let run_dir = cfg.run_dir();
    let resume_from = if opts.resume { Some(load_latest(&run_dir, cfg.workers)?) } else { None };
    let shared =
        Shared { cfg, data, layout, init_params, run_dir, opts, observer: Mutex::new(observer), resume_from };
    match cfg.backend {
        Backend::InProcess => {
            let timeout = Duration::from_secs_f64(cfg.comm.timeout_seconds);
            let handles = InProcessGroup::new(cfg.workers)
                .timeout(timeout)
                .build()
                .map_err(|source| TrainError::Comm { rank: 0, source })?;
            let results: Vec<Result<Option<RunSummary>, TrainError>> = std::thread::scope(|s| {
                let threads: Vec<_> = handles
                    .into_iter()
                    .enumerate()
                    .map(|(rank, mut c)| {
                        let (shared, make) = (&shared, make.clone());
                        std::thread::Builder::new()
                            .name(format!("worker-{rank}"))
                            .spawn_scoped(s, move || worker(rank, &mut c, shared, make))
                            .expect("spawning a worker thread")
                    })
                    .collect();
                threads
                    .into_iter()
                    .enumerate()
                    .map(|(rank, t)| {
                        t.join().unwrap_or_else(|p| {
                            let message = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            Err(TrainError::Panic { rank, message })
                        })
                    })
                    .collect()
            });
            pick_result(results)
        }
        Backend::Mpi => run_mpi(&shared, make),
    }
}

/// The first worker error that is not a consequence of another's failure.
fn pick_result(results: Vec<Result<Option<RunSummary>, TrainError>>) -> Result<RunSummary, TrainError> {
    let mut summary = None;
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(Some(s)) => summary = Some(s),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        let secondary = |e: &TrainError| {
            matches!(
                e,
                TrainError::Comm { source: CommError::PeerFailed { .. }, .. }
                    | TrainError::Exchange { source: ExchangeError::Comm(CommError::PeerFailed { .. }), .. }
                    | TrainError::PeerNonFinite { .. }
            )
        };
        let idx = errors.iter().position(|e| !secondary(e)).unwrap_or(0);
        return Err(errors.swap_remove(idx));
    }
    Ok(summary.expect("rank 0 returns the summary"))
}

#[cfg(feature = "mpi")]
fn run_mpi<M: Net>(
    shared: &Shared<'_>,
    make: impl Fn(&Device) -> M + Send + Sync + Clone,
) -> Result<RunSummary, TrainError> {
    let timeout = Duration::from_secs_f64(shared.cfg.comm.timeout_seconds);
    let mut c = gradcomp_comm::mpi::MpiCollective::init(Some(shared.cfg.workers), timeout)
        .map_err(|source| TrainError::Comm { rank: 0, source })?;
    let rank = c.rank();
    match worker(rank, &mut c, shared, make) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Ok(RunSummary {
            run_dir: shared.run_dir.clone(),
            epochs: Vec::new(),
            steps: 0,
            params_checksum: 0,
            interrupted: false,
            final_params: Vec::new(),
        }),
        Err(e) => {
            // MPI cannot cancel the peers' collectives: end the job, naming this rank.
            eprintln!("error: MPI rank {rank}: {e}");
            c.abort(1)
        }
    }
}

#[cfg(not(feature = "mpi"))]
fn run_mpi<M: Net>(_shared: &Shared<'_>, _make: impl Fn(&Device) -> M) -> Result<RunSummary, TrainError> {
    Err(TrainError::Config(crate::config::ConfigError {
        key: "backend".into(),
        problem: "this gradcomp was built without MPI; rebuild with `--features mpi`".into(),
    }))
}

fn comm(rank: usize) -> impl Fn(CommError) -> TrainError {
    move |source| TrainError::Comm { rank, source }
}

/// Reads the run directory's latest checkpoint (rank 0's state).
fn load_latest(run_dir: &Path, workers: usize) -> Result<Sections, TrainError> {
    let latest = run_dir.join("checkpoints/latest");
    let name = std::fs::read_to_string(&latest).map_err(|_| {
        TrainError::Checkpoint(format!(
            "no checkpoint to resume in {} (looked for {})",
            run_dir.display(),
            latest.display()
        ))
    })?;
    let dir = run_dir.join("checkpoints").join(name.trim());
    let s = Sections::read(&dir.join("state.bin"))?;
    let w = s.u64("counters").map_err(TrainError::Checkpoint)?;
    if w.get(4).copied() != Some(workers as u64) {
        return Err(TrainError::Checkpoint(format!(
            "the checkpoint was made with {} workers, the config has {workers}",
            w.get(4).copied().unwrap_or(0)
        )));
    }
    Ok(s)
}

/// Network models for the configured link speeds.
fn link_models(cfg: &TrainConfig) -> Vec<(String, NetworkModel)> {
    cfg.network
        .links_bps
        .iter()
        .map(|&b| {
            let m = NetworkModel::from_bits_per_second(b, cfg.network.alpha).with_allreduce(
                match cfg.network.allreduce {
                    AllreduceAlgo::Ring => AllreduceAlgorithm::Ring,
                    AllreduceAlgo::RecursiveDoubling => AllreduceAlgorithm::RecursiveDoubling,
                },
            );
            (link_key(b), m)
        })
        .collect()
}

/// The predicted communication time of a step's gradient exchange.
fn predicted_comm(m: &NetworkModel, main: &StepMain, n: usize, cfg: &TrainConfig) -> f64 {
    let mut t = 0.0;
    for op in [OpKind::AllreduceSumF32, OpKind::AllreduceSumI32, OpKind::AllreduceMaxF32] {
        if main.op_calls[op as usize] > 0 {
            t += m.allreduce(n, main.op_bytes[op as usize]);
        }
    }
    if main.op_calls[OpKind::Allgatherv as usize] > 0 {
        t += m.allgatherv(&main.gathered_sizes);
    }
    if main.op_calls[OpKind::PsPush as usize] > 0 {
        t += m.push_pull_sizes(cfg.comm.placement(), &main.gathered_sizes, main.download_bytes);
    }
    t
}

fn worker<M: Net>(
    rank: usize,
    c: &mut dyn Collective,
    sh: &Shared<'_>,
    make: impl Fn(&Device) -> M,
) -> Result<Option<RunSummary>, TrainError> {
    let cfg = sh.cfg;
    let n = cfg.workers;
    let err = comm(rank);
    let device = crate::default_device();
    // Its initial values are replaced by rank 0's below.
    let (mut model, _) = build_model(&make, &device, None);

    // Identical replicas: everyone takes rank 0's initial parameters (or the checkpoint's).
    let mut params_buf = if let Some(s) = &sh.resume_from {
        s.f32("params").map_err(TrainError::Checkpoint)?.to_vec()
    } else {
        sh.init_params.clone()
    };
    {
        let mut bytes: Vec<u8> = params_buf.iter().flat_map(|p| p.to_le_bytes()).collect();
        c.broadcast(&mut bytes, 0).map_err(&err)?;
        params_buf =
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
    }
    if params_buf.len() != sh.layout.total() {
        return Err(TrainError::Checkpoint("the checkpoint's parameters do not fit this model".into()));
    }
    let mut params = params_buf;
    model = params::write_params(model, &params, &device);

    let mut loader = Loader::new(sh.data, cfg, rank);
    let steps_per_epoch = loader.batches_per_epoch(cfg, rank) as u64;
    if steps_per_epoch == 0 {
        return Err(TrainError::Config(crate::config::ConfigError {
            key: "data.batch_size".into(),
            problem: "larger than a worker's shard: no full batch per epoch".into(),
        }));
    }
    let total_steps = if cfg.train.max_steps > 0 {
        cfg.train.max_steps.min(steps_per_epoch * u64::from(cfg.train.epochs.max(1)))
    } else {
        steps_per_epoch * u64::from(cfg.train.epochs)
    };
    let epochs = total_steps.div_ceil(steps_per_epoch) as u32;
    let schedule = Schedule::new(cfg.optimizer.lr, &cfg.schedule, steps_per_epoch, total_steps);
    let mut optimizer = Optimizer::new(&cfg.optimizer, &sh.layout);
    let count = sh.layout.slots().len();
    let output_param = |i: usize| model.is_output_param(i, count);
    let mut exchange = GradientExchange::new(
        &sh.layout,
        &cfg.compressor,
        &cfg.compression,
        cfg.comm.topology,
        cfg.comm.placement(),
        cfg.seed,
        output_param,
    );
    let mut celgc = (cfg.strategy.kind == StrategyKind::Celgc).then(|| {
        let delta = cfg.strategy.compress_delta.then(|| {
            GradientExchange::new(
                &sh.layout,
                &cfg.compressor,
                &cfg.compression,
                cfg.comm.topology,
                cfg.comm.placement(),
                cfg.seed ^ 0xCE16C,
                |i| model.is_output_param(i, count),
            )
        });
        Celgc::new(&cfg.strategy, &cfg.optimizer, sh.layout.total(), delta)
    });
    // Replicas are identical after every step (sync, naive parallel clipping)
    // or only after each averaging round (CELGC's model averaging).
    let synchronous = celgc.is_none() || cfg.strategy.average == Average::Gradients;
    let lr_scaled = cfg.compression.residual == gradcomp_compress::memory::ResidualForm::LrScaled;
    let target_density = cfg.compressor.density();
    let compressed_elems: usize = exchange.units().iter().filter(|u| !u.dense).map(|u| u.len).sum();

    // Resume: counters, optimizer, this rank's memories.
    let mut step: u64 = 0;
    let mut totals = Totals::default();
    if let Some(s) = &sh.resume_from {
        let k = s.u64("counters").map_err(TrainError::Checkpoint)?;
        step = k[0];
        let m = s.f32("opt_m").map_err(TrainError::Checkpoint)?.to_vec();
        let v = s.f32("opt_v").map_err(TrainError::Checkpoint)?.to_vec();
        optimizer.restore(m, v, k[3]).map_err(TrainError::Checkpoint)?;
        totals.bytes_sent = k[1];
        totals.bytes_received = k[2];
        let f = s.f64("wall").map_err(TrainError::Checkpoint)?;
        totals.wall = f[0];
        totals.predicted =
            link_models(cfg).iter().map(|(k, _)| k.clone()).zip(f[1..].iter().copied()).collect();
        let dir = checkpoint_dir_of(&sh.run_dir)?;
        let mine = Sections::read(&dir.join(format!("rank-{rank}.bin")))?;
        restore_memories(&mine, "mem", &mut exchange)?;
        if let Some(cg) = &mut celgc {
            // Between rounds CELGC's replicas differ: each rank resumes its own.
            params = mine.f32("params").map_err(TrainError::Checkpoint)?.to_vec();
            model = params::write_params(model, &params, &device);
            let n_state = mine.u64("celgc.count").map_err(TrainError::Checkpoint)?[0] as usize;
            let st: Result<Vec<Vec<f32>>, String> =
                (0..n_state).map(|i| mine.f32(&format!("celgc.{i}")).map(<[f32]>::to_vec)).collect();
            cg.restore(&st.map_err(TrainError::Checkpoint)?).map_err(TrainError::Checkpoint)?;
            if let Some(dx) = cg.delta_exchange() {
                restore_memories(&mine, "delta", dx)?;
            }
        }
    }

    let mut rec = Records {
        locals: Vec::new(),
        mains: Vec::new(),
        totals,
        models: link_models(cfg),
        compressed_elems,
        steps_out: None,
        epochs_out: None,
    };
    if rank == 0 {
        std::fs::create_dir_all(&sh.run_dir).map_err(io(&sh.run_dir))?;
        let append = sh.resume_from.is_some();
        rec.steps_out =
            Some(JsonLines::open(&sh.run_dir.join("steps.jsonl"), append).map_err(io(&sh.run_dir))?);
        rec.epochs_out =
            Some(JsonLines::open(&sh.run_dir.join("epochs.jsonl"), append).map_err(io(&sh.run_dir))?);
        write_atomic(&sh.run_dir.join("config.toml"), cfg.to_toml().as_bytes()).map_err(io(&sh.run_dir))?;
        write_manifest(cfg, &sh.run_dir, &sh.layout, &exchange)?;
    }

    let mut grad = vec![0.0f32; sh.layout.total()];
    let mut avg = vec![0.0f32; sh.layout.total()];
    let mut epoch_records = Vec::new();
    let mut interrupted = false;
    let mut gathered = Gathered::default();
    let mut epoch = (step / steps_per_epoch) as u32;
    let mut last_eval: (Option<f64>, Option<f64>) = (None, None);

    while step < total_steps {
        let i = (step % steps_per_epoch) as usize;
        let wall_start = Instant::now();
        let lr = schedule.lr(step);
        if let Some(rho) = target_density {
            exchange.set_density(cfg.compression.warmup.density(epoch, rho));
        }
        c.meter_mut().take_step();

        // CELGC: average the models before this step's gradient.
        let mut round_seconds = 0.0;
        let communicated = match &mut celgc {
            Some(cg) => {
                let t = Instant::now();
                let did = cg
                    .begin_step(step, &mut params, c)
                    .map_err(|source| TrainError::Exchange { rank, source })?;
                round_seconds = t.elapsed().as_secs_f64();
                if did {
                    model = params::write_params(model, &params, &device);
                    // Replicas agree right after a round, before local steps move them apart.
                    let round = step / cfg.strategy.period;
                    if cfg.train.checksum_every > 0 && round.is_multiple_of(cfg.train.checksum_every) {
                        let pre = c.meter_mut().take_step();
                        compare_checksums(c, &params, step, &mut gathered, rank)?;
                        c.meter_mut().take_step();
                        c.meter_mut().restore_step(pre);
                    }
                }
                did
            }
            None => false,
        };

        // Forward and backward.
        let t = Instant::now();
        let batch = loader.batch(cfg, rank, epoch, i);
        let loss = model.loss(&batch, &device);
        let grads = loss.backward();
        let loss_value = f64::from(loss.into_scalar::<f32>());
        params::read_grads(&model, &grads, &mut grad);
        drop(grads);
        let mut local =
            StepLocal { compute: t.elapsed().as_secs_f64(), loss: loss_value, ..Default::default() };

        // Non-finite values and the stop flag, agreed by all.
        let bad = if !loss_value.is_finite() {
            Some(("loss", "(loss)".to_string()))
        } else if gradcomp_compress::reduce::all_finite(&grad) {
            None
        } else {
            grad.iter().position(|g| !g.is_finite()).map(|j| {
                let slot =
                    sh.layout.slots().iter().find(|s| j < s.offset + s.len).expect("index inside the layout");
                ("gradient", slot.name.clone())
            })
        };
        let mut control = vec![0.0f32; 2 + n];
        control[0] = f32::from(u8::from(rank == 0 && sh.opts.stop.load(Ordering::Relaxed)));
        control[1] = if loss_value.is_finite() { loss_value as f32 } else { 0.0 };
        control[2 + rank] = f32::from(u8::from(bad.is_some()));
        // The control round's bytes are not the strategy's: keep them apart.
        let mut strategy_bytes = c.meter_mut().take_step();
        c.allreduce_sum_f32(&mut control).map_err(&err)?;
        c.meter_mut().take_step();
        let bad_ranks: Vec<usize> = (0..n).filter(|&r| control[2 + r] > 0.0).collect();
        if control[0] > 0.0 {
            interrupted = true;
            break;
        }
        let mut main = StepMain {
            step,
            epoch,
            lr,
            density: target_density.map(|r| cfg.compression.warmup.density(epoch, r)),
            ..Default::default()
        };
        if !bad_ranks.is_empty() {
            match cfg.train.on_nonfinite {
                OnNonFinite::Stop => {
                    return Err(match bad {
                        Some((what, tensor)) => TrainError::NonFinite { step, rank, what, tensor },
                        None => TrainError::PeerNonFinite { step, ranks: bad_ranks },
                    })
                }
                OnNonFinite::Skip => {
                    main.skipped = true;
                    local.loss = 0.0;
                }
            }
        }

        if !main.skipped {
            if let Some(cg) = &mut celgc {
                let t = Instant::now();
                let cs = cg.update(&mut params, &grad, lr, communicated, c).map_err(&err)?;
                model = params::write_params(model, &params, &device);
                local.communicate = round_seconds;
                local.optimizer = t.elapsed().as_secs_f64();
                main.extra = vec![
                    ("eta_eff", cs.eta_eff),
                    ("grad_norm", cs.grad_norm),
                    ("clipped", f64::from(u8::from(cs.clipped))),
                    ("communicated", f64::from(u8::from(communicated))),
                ];
            } else {
                if cfg.compression.local_clip > 0.0 {
                    // DGC's local clipping: the norm bound shrinks with N^(-1/2) because
                    // the N workers' gradients add up.
                    let bound = cfg.compression.local_clip / (n as f64).sqrt();
                    let norm = gradcomp_compress::reduce::sum_of_squares(&grad).sqrt();
                    if norm > bound {
                        let scale = (bound / norm) as f32;
                        grad.iter_mut().for_each(|g| *g *= scale);
                    }
                }
                let measure = cfg.train.stats_every > 0 && step.is_multiple_of(cfg.train.stats_every);
                let ef_lr = if lr_scaled { lr as f32 } else { 1.0 };
                let st = exchange
                    .exchange(&grad, loss_value, &mut avg, step, ef_lr, measure, c)
                    .map_err(|source| TrainError::Exchange { rank, source })?;
                local.compress = st.compress_seconds;
                local.communicate = st.communicate_seconds;
                local.decode = st.decode_seconds;
                local.wire_bytes = st.wire_bytes as f64;
                local.selected = st.selected as f64;
                local.elements = compressed_elems as f64;
                if rank == 0 {
                    main.residual_norm = st.residual_norm;
                    main.contraction = st.contraction;
                    main.bound_ratio = st.bound_ratios;
                    main.gathered_sizes = st.gathered_sizes;
                    main.download_bytes = st.download_bytes;
                    main.extra = st.extra;
                    if measure {
                        main.histogram = Some({
                            let h = Histogram::symmetric(&grad, 41);
                            (h.edges(), h.counts)
                        });
                    }
                }

                // The same update on every worker.
                let t = Instant::now();
                optimizer.step(&mut params, &avg, if lr_scaled { 1.0 } else { lr as f32 });
                model = params::write_params(model, &params, &device);
                local.optimizer = t.elapsed().as_secs_f64();
            }
        }
        strategy_bytes.add(&c.meter_mut().take_step());
        for (k, o) in strategy_bytes.iter() {
            local.sent[k as usize] = o.sent as f64;
            local.received[k as usize] = o.received as f64;
            main.op_bytes[k as usize] = o.sent.max(o.received);
            main.op_calls[k as usize] = o.calls;
        }
        step += 1;

        if synchronous && cfg.train.checksum_every > 0 && step.is_multiple_of(cfg.train.checksum_every) {
            compare_checksums(c, &params, step, &mut gathered, rank)?;
            c.meter_mut().take_step();
        }
        main.wall = wall_start.elapsed().as_secs_f64();
        rec.locals.push(local);
        if rank == 0 {
            let bytes = rec.totals.bytes_sent
                + rec.locals.iter().map(|l| l.sent.iter().sum::<f64>() as u64).sum::<u64>() * n as u64;
            let mut obs = sh.observer.lock().unwrap_or_else(|e| e.into_inner());
            obs.step(&Progress {
                epoch,
                epochs,
                step_in_epoch: step - u64::from(epoch) * steps_per_epoch,
                steps_per_epoch,
                loss: f64::from(control[1]) / (n - bad_ranks.len()).max(1) as f64,
                bytes_sent: bytes,
                last_accuracy: last_eval.0,
                last_perplexity: last_eval.1,
            });
            rec.mains.push(main);
        }

        let epoch_done = step.is_multiple_of(steps_per_epoch) || step == total_steps;
        if epoch_done {
            let record = if synchronous {
                rec.finish_epoch(rank, c, sh, &model, &device, epoch, step)?
            } else {
                // Evaluation uses the averaged model (ALGORITHMS.md §2); the
                // workers' own models are left as they are.
                let mut averaged = params.clone();
                c.allreduce_sum_f32(&mut averaged).map_err(&err)?;
                c.meter_mut().take_step();
                averaged.iter_mut().for_each(|p| *p /= n as f32);
                let eval_model = params::write_params(model.clone(), &averaged, &device);
                rec.finish_epoch(rank, c, sh, &eval_model, &device, epoch, step)?
            };
            if let Some(r) = record {
                last_eval = (r.test_accuracy, r.test_perplexity);
                sh.observer.lock().unwrap_or_else(|e| e.into_inner()).epoch(&r);
                epoch_records.push(r);
            }
            epoch += 1;
            let due = cfg.train.checkpoint_every > 0 && epoch.is_multiple_of(cfg.train.checkpoint_every);
            if due || step == total_steps {
                write_checkpoint(
                    c,
                    sh,
                    rank,
                    step,
                    &params,
                    &optimizer,
                    rank_sections(&exchange, &mut celgc, &params),
                    &rec.totals,
                )?;
            }
        }
    }
    if interrupted {
        // Records of the partial epoch, then a checkpoint to resume from.
        if !rec.locals.is_empty() {
            rec.flush_steps(rank, c, sh)?;
        }
        write_checkpoint(
            c,
            sh,
            rank,
            step,
            &params,
            &optimizer,
            rank_sections(&exchange, &mut celgc, &params),
            &rec.totals,
        )?;
    }
    if !synchronous {
        // CELGC's model is the average of the workers' models.
        c.allreduce_sum_f32(&mut params).map_err(&err)?;
        params.iter_mut().for_each(|p| *p /= n as f32);
    }
    c.barrier().map_err(&err)?;
    Ok((rank == 0).then(|| RunSummary {
        run_dir: sh.run_dir.clone(),
        epochs: epoch_records,
        steps: step,
        params_checksum: checksum(&params),
        interrupted,
        final_params: params,
    }))
}

/// Cumulative counters carried across epochs (and checkpoints).
#[derive(Clone, Debug, Default)]
struct Totals {
    bytes_sent: u64,
    bytes_received: u64,
    wall: f64,
    predicted: BTreeMap<String, f64>,
}

fn compare_checksums(
    c: &mut dyn Collective,
    params: &[f32],
    step: u64,
    g: &mut Gathered,
    rank: usize,
) -> Result<(), TrainError> {
    c.allgatherv(&checksum(params).to_le_bytes(), g).map_err(comm(rank))?;
    let sums: Vec<&[u8]> = g.iter().collect();
    if sums.windows(2).any(|w| w[0] != w[1]) {
        let ranks = (0..sums.len()).filter(|&r| sums[r] != sums[0]).collect();
        return Err(TrainError::ReplicaMismatch { step, ranks });
    }
    Ok(())
}

/// What the run records as it goes: per-step measurements of this worker
/// (and, on rank 0, of the run) until they are gathered and written, the
/// cumulative totals, and the record files (rank 0).
struct Records {
    locals: Vec<StepLocal>,
    mains: Vec<StepMain>,
    totals: Totals,
    /// Network models for the configured link speeds, keyed by bit/s.
    models: Vec<(String, NetworkModel)>,
    /// Elements in compressed units (the d of the contraction bounds).
    compressed_elems: usize,
    steps_out: Option<JsonLines>,
    epochs_out: Option<JsonLines>,
}

impl Records {
    /// Gathers the per-worker step measurements since the last call to rank 0
    /// and writes them to `steps.jsonl`; returns those steps' mean loss (rank 0).
    fn flush_steps(
        &mut self,
        rank: usize,
        c: &mut dyn Collective,
        sh: &Shared<'_>,
    ) -> Result<f64, TrainError> {
        let Records { locals, mains, totals, models, compressed_elems, steps_out, .. } = self;
        let compressed_elems = *compressed_elems;
        let n = sh.cfg.workers;
        let mut words = Vec::with_capacity(locals.len() * LOCAL_WORDS);
        for l in locals.iter() {
            l.to_words(&mut words);
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut g = Gathered::default();
        c.allgatherv(&bytes, &mut g).map_err(comm(rank))?;
        c.meter_mut().take_step();
        let per_worker: Vec<Vec<StepLocal>> = g
            .iter()
            .map(|b| {
                let w: Vec<f64> =
                    b.chunks_exact(8).map(|x| f64::from_le_bytes(x.try_into().expect("8 bytes"))).collect();
                w.chunks_exact(LOCAL_WORDS).map(StepLocal::from_words).collect()
            })
            .collect();
        let mut loss_sum = 0.0;
        let mut loss_n = 0usize;
        if rank == 0 {
            let out = steps_out.as_mut().expect("rank 0 writes records");
            for (s, main) in mains.iter().enumerate() {
                let ws: Vec<StepLocal> = per_worker.iter().map(|w| w[s]).collect();
                let mut r = StepRecord {
                    step: main.step,
                    epoch: main.epoch,
                    lr: main.lr,
                    loss: ws.iter().map(|w| w.loss).sum::<f64>() / n as f64,
                    density: main.density,
                    sent_fraction: ws.iter().map(|w| w.selected / w.elements.max(1.0)).sum::<f64>()
                        / n as f64,
                    wire_bytes: ws.iter().map(|w| w.wire_bytes as u64).sum(),
                    compute_s: ws.iter().map(|w| w.compute).collect(),
                    compress_s: ws.iter().map(|w| w.compress).collect(),
                    communicate_s: ws.iter().map(|w| w.communicate).collect(),
                    decode_s: ws.iter().map(|w| w.decode).collect(),
                    optimizer_s: ws.iter().map(|w| w.optimizer).collect(),
                    wall_s: main.wall,
                    residual_norm: main.residual_norm,
                    contraction: main.contraction,
                    bound_ratio: main.bound_ratio.clone(),
                    histogram: main.histogram.clone(),
                    extra: main.extra.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                    skipped: main.skipped,
                    ..Default::default()
                };
                if let (Some(_), Some(rho)) = (main.contraction, main.density) {
                    let b = ContractionBounds::new(k_for(rho, compressed_elems), compressed_elems);
                    r.bound_classic = Some(b.classic);
                    r.bound_tight = Some(b.tight);
                }
                for op in OpKind::ALL {
                    let up: f64 = ws.iter().map(|w| w.sent[op as usize]).sum();
                    let down: f64 = ws.iter().map(|w| w.received[op as usize]).sum();
                    if up > 0.0 || down > 0.0 {
                        r.bytes_up.insert(op.name().to_string(), up as u64);
                        r.bytes_down.insert(op.name().to_string(), down as u64);
                    }
                }
                let local_time =
                    ws.iter().map(|w| w.compute + w.compress + w.decode + w.optimizer).fold(0.0, f64::max);
                for (key, m) in models.iter() {
                    let t = local_time + predicted_comm(m, main, n, sh.cfg);
                    r.predicted_s.insert(key.clone(), t);
                    *totals.predicted.entry(key.clone()).or_default() += t;
                }
                totals.bytes_sent += r.bytes_up.values().sum::<u64>();
                totals.bytes_received += r.bytes_down.values().sum::<u64>();
                totals.wall += main.wall;
                if !main.skipped {
                    loss_sum += r.loss;
                    loss_n += 1;
                }
                out.write(&r).map_err(io(&sh.run_dir))?;
            }
        }
        locals.clear();
        mains.clear();
        Ok(loss_sum / loss_n.max(1) as f64)
    }

    /// Ends an epoch: flushes the step records, evaluates (shared among the
    /// workers) and, on rank 0, writes and returns the epoch's record.
    #[allow(clippy::too_many_arguments)]
    fn finish_epoch<M: Net>(
        &mut self,
        rank: usize,
        c: &mut dyn Collective,
        sh: &Shared<'_>,
        model: &M,
        device: &Device,
        epoch: u32,
        step: u64,
    ) -> Result<Option<EpochRecord>, TrainError> {
        let train_loss = self.flush_steps(rank, c, sh)?;
        let totals = &self.totals;
        let eval = if sh.cfg.train.eval { Some(evaluate(rank, c, sh, model, device)?) } else { None };
        if rank != 0 {
            return Ok(None);
        }
        let lm = sh.cfg.is_language_model();
        let r = EpochRecord {
            epoch,
            steps: step,
            train_loss,
            test_accuracy: eval.filter(|_| !lm).map(|e| e.accuracy()),
            test_perplexity: eval.filter(|_| lm).map(|e| e.perplexity()),
            test_loss: eval.map(|e| e.mean_loss()),
            bytes_sent: totals.bytes_sent,
            bytes_received: totals.bytes_received,
            wall_seconds: totals.wall,
            predicted_wall_seconds: totals.predicted.clone(),
        };
        self.epochs_out.as_mut().expect("rank 0 writes records").write(&r).map_err(io(&sh.run_dir))?;
        Ok(Some(r))
    }
}

/// Test-set evaluation, shared among the workers (rank r takes every n-th
/// batch), summed by one allreduce.
fn evaluate<M: Net>(
    rank: usize,
    c: &mut dyn Collective,
    sh: &Shared<'_>,
    model: &M,
    device: &Device,
) -> Result<EvalStats, TrainError> {
    let n = sh.cfg.workers;
    let plain = device.clone().inner();
    let model = model.valid();
    let mut stats = EvalStats::default();
    match sh.data {
        TrainData::Images { test, .. } => {
            for (b, batch) in eval_batches(test, 500).enumerate() {
                if b % n == rank {
                    stats.add(&model.evaluate(&batch, &plain));
                }
            }
        }
        TrainData::Tokens { test, .. } => {
            let l = TokenLoader::new(test, 10, sh.cfg.data.bptt);
            for b in (0..l.batches_per_epoch()).filter(|b| b % n == rank) {
                stats.add(&model.evaluate(&l.batch(b), &plain));
            }
        }
    }
    let mut v = [stats.loss_sum as f32, stats.correct as f32, stats.count as f32];
    let mut wide = [stats.loss_sum, stats.correct as f64, stats.count as f64];
    c.allreduce_sum_f32(&mut v).map_err(comm(rank))?;
    c.meter_mut().take_step();
    // f32 sums are exact for counts up to 2^24 and good to ~7 digits for the loss.
    wide[0] = f64::from(v[0]);
    wide[1] = f64::from(v[1]).round();
    wide[2] = f64::from(v[2]).round();
    Ok(EvalStats { loss_sum: wide[0], correct: wide[1] as u64, count: wide[2] as u64 })
}

fn checkpoint_dir_of(run_dir: &Path) -> Result<PathBuf, TrainError> {
    let latest = run_dir.join("checkpoints/latest");
    let name = std::fs::read_to_string(&latest).map_err(io(&latest))?;
    Ok(run_dir.join("checkpoints").join(name.trim()))
}

/// This rank's own checkpoint state: its compressor memories and, for
/// CELGC, its (possibly diverged) parameters and local state.
fn rank_sections(exchange: &GradientExchange, celgc: &mut Option<Celgc>, params: &[f32]) -> Sections {
    let mut s = Sections::default();
    save_memories(&mut s, "mem", exchange);
    if let Some(cg) = celgc {
        s.put("params", Values::F32(params.to_vec()));
        let st = cg.state();
        s.put("celgc.count", Values::U64(vec![st.len() as u64]));
        for (i, b) in st.into_iter().enumerate() {
            s.put(&format!("celgc.{i}"), Values::F32(b));
        }
        if let Some(dx) = cg.delta_exchange() {
            save_memories(&mut s, "delta", dx);
        }
    }
    s
}

/// Restores the memories of `exchange` from sections named `{prefix}.{unit}.{i}`.
fn restore_memories(s: &Sections, prefix: &str, exchange: &mut GradientExchange) -> Result<(), TrainError> {
    for (u, mem) in exchange.memories_mut().iter_mut().enumerate() {
        let count = s.u64(&format!("{prefix}.{u}.count")).map_err(TrainError::Checkpoint)?[0] as usize;
        let bufs: Result<Vec<Vec<f32>>, String> =
            (0..count).map(|i| s.f32(&format!("{prefix}.{u}.{i}")).map(<[f32]>::to_vec)).collect();
        mem.restore(&bufs.map_err(TrainError::Checkpoint)?).map_err(TrainError::Checkpoint)?;
    }
    Ok(())
}

/// Adds the memories of `exchange` as sections `{prefix}.{unit}.{i}`.
fn save_memories(s: &mut Sections, prefix: &str, exchange: &GradientExchange) {
    for (u, mem) in exchange.memories().iter().enumerate() {
        let bufs = mem.state();
        s.put(&format!("{prefix}.{u}.count"), Values::U64(vec![bufs.len() as u64]));
        for (i, b) in bufs.iter().enumerate() {
            s.put(&format!("{prefix}.{u}.{i}"), Values::F32(b.to_vec()));
        }
    }
}

/// Every rank writes its memories, rank 0 the shared state; once all files
/// are in place rank 0 points `checkpoints/latest` at them.
#[allow(clippy::too_many_arguments)]
fn write_checkpoint(
    c: &mut dyn Collective,
    sh: &Shared<'_>,
    rank: usize,
    step: u64,
    params: &[f32],
    optimizer: &Optimizer,
    mine: Sections,
    totals: &Totals,
) -> Result<(), TrainError> {
    let name = format!("step-{step:09}");
    let dir = sh.run_dir.join("checkpoints").join(&name);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    mine.write(&dir.join(format!("rank-{rank}.bin")))?;
    if rank == 0 {
        let mut s = Sections::default();
        s.put("params", Values::F32(params.to_vec()));
        let [m, v] = optimizer.state();
        s.put("opt_m", Values::F32(m.to_vec()));
        s.put("opt_v", Values::F32(v.to_vec()));
        s.put(
            "counters",
            Values::U64(vec![
                step,
                totals.bytes_sent,
                totals.bytes_received,
                optimizer.steps,
                sh.cfg.workers as u64,
            ]),
        );
        let mut wall = vec![totals.wall];
        wall.extend(link_models(sh.cfg).iter().map(|(k, _)| totals.predicted.get(k).copied().unwrap_or(0.0)));
        s.put("wall", Values::F64(wall));
        s.write(&dir.join("state.bin"))?;
    }
    c.barrier().map_err(comm(rank))?;
    c.meter_mut().take_step();
    if rank == 0 {
        let latest = sh.run_dir.join("checkpoints/latest");
        write_atomic(&latest, name.as_bytes()).map_err(io(&latest))?;
    }
    Ok(())
}

/// `manifest.json`: what ran, where, with which options.
fn write_manifest(
    cfg: &TrainConfig,
    dir: &Path,
    layout: &GradientLayout,
    exchange: &GradientExchange,
) -> Result<(), TrainError> {
    let git = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
    });
    let units: Vec<serde_json::Value> = exchange
        .units()
        .iter()
        .map(|u| serde_json::json!({"id": u.id, "name": u.name, "len": u.len, "dense": u.dense}))
        .collect();
    let m = serde_json::json!({
        "gradcomp_version": env!("CARGO_PKG_VERSION"),
        "burn_version": "0.22.1",
        "git_revision": git,
        "seed": cfg.seed,
        "workers": cfg.workers,
        "backend": cfg.backend,
        "topology": cfg.comm.topology,
        "compressor": cfg.compressor,
        "granularity": cfg.compression.granularity,
        "exclude": cfg.compression.exclude,
        "combine": format!("{:?}", cfg.compressor.build().combine()),
        "parameters": layout.total(),
        "layout_fingerprint": format!("{:016x}", layout.fingerprint()),
        "units": units,
        "hardware": {"cpu": cpu, "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)},
    });
    let _ = Combine::Gather;
    let path = dir.join("manifest.json");
    write_atomic(&path, serde_json::to_string_pretty(&m).expect("manifest serializes").as_bytes())
        .map_err(io(&path))
}

/// Evaluates the parameters of a run directory's latest checkpoint on the
/// test split (one process, no workers).
pub fn evaluate_run(run_dir: &Path, data_dir: Option<&Path>) -> Result<(TrainConfig, EvalStats), TrainError> {
    let cfg_path = run_dir.join("config.toml");
    let mut cfg = TrainConfig::load(&cfg_path, &[])?;
    if let Some(d) = data_dir {
        cfg.data.dir = Some(d.to_path_buf());
    }
    let state = load_latest(run_dir, cfg.workers)?;
    let params = state.f32("params").map_err(TrainError::Checkpoint)?.to_vec();
    let data = TrainData::load(&cfg)?;
    let stats = with_model!(cfg, &data, |make| {
        let device = crate::default_device();
        let (model, _) = build_model(&make, &device, None);
        if params::layout(&model).total() != params.len() {
            return Err(TrainError::Checkpoint(
                "the checkpoint's parameters do not fit the configured model".into(),
            ));
        }
        let model = params::write_params(model, &params, &device).valid();
        let plain = device.clone().inner();
        let mut stats = EvalStats::default();
        match &data {
            TrainData::Images { test, .. } => {
                for batch in eval_batches(test, 500) {
                    stats.add(&model.evaluate(&batch, &plain));
                }
            }
            TrainData::Tokens { test, .. } => {
                let l = TokenLoader::new(test, 10, cfg.data.bptt);
                for b in 0..l.batches_per_epoch() {
                    stats.add(&model.evaluate(&l.batch(b), &plain));
                }
            }
        }
        stats
    });
    Ok((cfg, stats))
}
