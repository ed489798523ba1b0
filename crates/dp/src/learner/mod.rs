//! burn-train integration (feature `learner`): gradcomp's compressed data
//! parallelism as a burn-train `SupervisedLearningStrategy`, so a `Learner`
//! user keeps burn-train's dashboard, metrics and checkpoints and switches
//! compression on in one line:
//!
//! ```ignore
//! SupervisedTraining::new(dir, train, valid)
//!     .with_training_strategy(GradcompStrategy::new(4, DataParallelConfig::new(CompressorConfig::terngrad())).into())
//!     .launch(learner);
//! ```
//!
//! Like burn's own DDP strategy it splits the training loader among N
//! in-process workers, each with a replica of the learner (model, optimizer,
//! learning-rate schedule); every step goes through a [`DataParallel`]
//! handle instead of an uncompressed all-reduce. The first worker processes
//! burn-train's events, validates and checkpoints. Workers step in lockstep:
//! an epoch ends for all when any worker's share runs out (the few batches a
//! longer share has left are dropped, as with a distributed sampler).
//!
//! Every strategy is offered: synchronous exchange with any compressor and
//! topology (lr-scaled error feedback included: the handle takes the
//! learner's learning rate and returns gradients in gradient units), and
//! CELGC, whose per-worker clipped step size reaches the learner's optimizer
//! through [`GradcompOptimizer`] (the learner's optimizer must be wrapped in
//! it; a clear error says so otherwise). Under CELGC, validation and the
//! returned model are the workers' average.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use burn::data::dataloader::split::split_dataloader;
use burn::data::dataloader::Progress;
use burn::tensor::Device;
use burn::train::{
    EventProcessorTraining, InferenceStep, Learner, LearnerEvent, LearnerModel, SupervisedLearningStrategy,
    SupervisedTrainingEventProcessor, TrainLoader, TrainingComponents, TrainingError, TrainingItem,
    TrainingStrategy, ValidLoader,
};
use gradcomp_comm::{InProcessCollective, InProcessGroup};

mod step_size;

pub use step_size::GradcompOptimizer;

use crate::{DataParallel, DataParallelConfig, InitDataParallel};

/// N in-process workers joined by gradcomp's compressed exchange.
#[derive(Clone, Debug)]
pub struct GradcompStrategy {
    workers: usize,
    config: DataParallelConfig,
    device: Device,
    /// Bytes all workers sent through the strategy (shared by clones).
    sent: Arc<AtomicU64>,
}

impl GradcompStrategy {
    /// `workers` replicas on gradcomp's default device (burn's `flex` CPU backend with autodiff).
    pub fn new(workers: usize, config: DataParallelConfig) -> Self {
        Self { workers, config, device: crate::default_device(), sent: Arc::default() }
    }

    /// Bytes all workers sent through the compressed exchange so far (keep a
    /// clone of the strategy to read it after `launch`).
    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Trains on `device` (an autodiff device) instead.
    pub fn with_device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    fn check(&self) -> Result<(), String> {
        self.config.validate().map_err(|e| e.to_string())?;
        if self.workers == 0 {
            return Err("GradcompStrategy needs at least one worker".into());
        }
        Ok(())
    }
}

impl<M: LearnerModel> From<GradcompStrategy> for TrainingStrategy<M> {
    fn from(s: GradcompStrategy) -> Self {
        TrainingStrategy::Custom(Arc::new(s))
    }
}

/// What only the first worker holds: burn-train's events, validation,
/// checkpoints and early stopping.
struct Main<M: LearnerModel> {
    components: TrainingComponents<M>,
    valid: ValidLoader<M>,
    train_items: usize,
}

/// A worker's model, and the first worker's burn-train parts back; or why it failed.
type WorkerResult<M> = Result<(M, Option<Main<M>>), String>;

/// What every worker needs to run its epochs.
struct Plan<'a> {
    strategy: &'a GradcompStrategy,
    first_epoch: usize,
    interrupter: burn::train::Interrupter,
}

impl<M: LearnerModel> SupervisedLearningStrategy<M> for GradcompStrategy {
    fn fit(
        &self,
        components: TrainingComponents<M>,
        learner: Learner<M>,
        train: TrainLoader<M>,
        valid: ValidLoader<M>,
        first_epoch: usize,
    ) -> (M, SupervisedTrainingEventProcessor<M>) {
        let fallback = learner.model();
        let interrupter = components.interrupter.clone();
        let failed = |components: TrainingComponents<M>, failures: Vec<burn::train::train::WorkerFailure>| {
            components.interrupter.fail(TrainingError::Workers(failures));
            (fallback.clone(), components.event_processor)
        };
        if let Err(message) = self.check() {
            return failed(components, vec![burn::train::train::WorkerFailure { device_id: 0, message }]);
        }
        let train_items = train.num_items();
        let shares = split_dataloader(train, &vec![self.device.clone(); self.workers]);
        let valid = valid.to_device(&self.device.clone().inner());
        let plan = Plan { strategy: self, first_epoch, interrupter };
        // Each worker takes its own learner, share and (the first) burn-train's parts.
        let mut main = Some(Main { components, valid, train_items });
        let parts: Vec<Mutex<Option<_>>> =
            shares.into_iter().map(|share| Mutex::new(Some((learner.clone(), share, main.take())))).collect();
        let ran = InProcessGroup::new(self.workers).run(|c| {
            let rank = gradcomp_comm::Collective::rank(&c);
            let taken = parts[rank].lock().unwrap_or_else(|e| e.into_inner()).take();
            let (learner, share, main) = taken.ok_or("a worker's share was taken twice")?;
            run_worker(c, learner, share, main, &plan)
        });
        let results: Vec<WorkerResult<M>> = match ran {
            Ok(results) => results.into_iter().map(|r| r.unwrap_or_else(|p| Err(p.to_string()))).collect(),
            Err(e) => vec![Err(e.to_string())],
        };
        let mut failures = Vec::new();
        let mut out = None;
        for (rank, r) in results.into_iter().enumerate() {
            match r {
                Ok((model, Some(main))) => out = Some((model, main.components)),
                Ok(_) => {}
                Err(message) => failures.push(burn::train::train::WorkerFailure { device_id: rank, message }),
            }
        }
        match out {
            Some((model, components)) if failures.is_empty() => (model, components.event_processor),
            Some((_, components)) => failed(components, failures),
            None => panic!(
                "gradcomp's first worker failed: {}",
                failures.first().map_or("", |f| f.message.as_str())
            ),
        }
    }
}

/// One worker's epochs; the first worker also runs burn-train's events.
fn run_worker<M: LearnerModel>(
    c: InProcessCollective,
    mut learner: Learner<M>,
    share: TrainLoader<M>,
    mut main: Option<Main<M>>,
    plan: &Plan<'_>,
) -> WorkerResult<M> {
    learner.fork(&plan.strategy.device);
    let (mut dp, model) = plan.strategy.config.clone().init(c, learner.model()).map_err(|e| e.to_string())?;
    learner.load_model(model.into_record());
    let last_epoch = main.as_ref().map_or(0, |m| m.components.num_epochs);
    let last_epoch = agree_max(&mut dp, last_epoch as f32)? as usize;
    for epoch in plan.first_epoch..=last_epoch {
        if let Some(m) = &mut main {
            let total_items = m.train_items;
            event(
                &plan.interrupter,
                m.components
                    .event_processor
                    .process_train(LearnerEvent::StartSplit { epoch_number: epoch, total_items }),
            );
        }
        let stop = train_epoch(&mut dp, &mut learner, &share, main.as_mut(), plan, epoch)?;
        let mut stop = f32::from(u8::from(stop));
        if epoch < last_epoch && dp.config().strategy.average_at_epoch_end {
            let model = dp.end_epoch(learner.model()).map_err(|e| e.to_string())?;
            learner.load_model(model.into_record());
        }
        // CELGC's replicas differ between rounds: validate their average.
        let consensus = dp.consensus_model(&learner.model()).map_err(|e| e.to_string())?;
        if let Some(m) = &mut main {
            let p = &mut m.components.event_processor;
            event(&plan.interrupter, p.process_train(LearnerEvent::EndSplit(epoch)));
            if stop == 0.0 {
                validate(&consensus, m, epoch, plan);
                let c = &mut m.components;
                event(&plan.interrupter, c.event_processor.process_train(LearnerEvent::EndEpoch(epoch)));
                if c.checkpointer.is_some() || c.early_stopping.is_some() {
                    event(&plan.interrupter, c.event_processor.flush());
                }
                if let Some(checkpointer) = &mut c.checkpointer {
                    checkpointer.checkpoint(&learner, epoch, &c.event_store);
                }
                let early = c.early_stopping.as_mut().is_some_and(|e| e.should_stop(epoch, &c.event_store));
                stop = f32::from(u8::from(early || plan.interrupter.should_stop()));
            }
        }
        // The first worker's decision to stop is everyone's.
        if agree_max(&mut dp, stop)? > 0.0 {
            break;
        }
    }
    plan.strategy.sent.fetch_add(dp.bytes_sent(), Ordering::Relaxed);
    let model = dp.consensus_model(&learner.model()).map_err(|e| e.to_string())?;
    Ok((model, main))
}

/// One epoch of steps in lockstep; returns whether a stop was agreed.
fn train_epoch<M: LearnerModel>(
    dp: &mut DataParallel,
    learner: &mut Learner<M>,
    share: &TrainLoader<M>,
    mut main: Option<&mut Main<M>>,
    plan: &Plan<'_>,
    epoch: usize,
) -> Result<bool, String> {
    let workers = plan.strategy.workers;
    let mut iterator = share.iter();
    let mut iteration = 0;
    loop {
        let item = iterator.next();
        // Every worker steps only while every worker has a batch.
        let missing = f32::from(u8::from(!matches!(item, Some(Ok(_)))));
        if agree_max(dp, missing)? > 0.0 {
            if let Some(Err(e)) = item {
                plan.interrupter.fail(TrainingError::Dataset(e));
            }
            return Ok(false);
        }
        let Some(Ok(item)) = item else { unreachable!("checked above") };
        let mut progress: Progress = iterator.progress();
        progress.items_processed *= workers;
        progress.items_total *= workers;
        // burn-train counts epochs from 1.
        let averages = dp.averages_now();
        let model = dp.begin_step(learner.model(), epoch as u32 - 1).map_err(|e| e.to_string())?;
        if averages {
            learner.load_model(model.into_record());
        }
        learner.lr_step();
        let lr = learner.lr_current();
        let output = learner.train_step(item);
        if main.is_some() && plan.interrupter.should_stop() {
            dp.request_stop();
        }
        let update =
            dp.gradient_update(&learner.model(), output.grads, lr.base()).map_err(|e| e.to_string())?;
        if !update.skipped {
            step_size::with_step_scale(update.lr / lr.base(), || learner.optimizer_step(update.grads))?;
        }
        iteration += workers;
        if let Some(m) = main.as_deref_mut() {
            let item = TrainingItem::new(output.item, progress, Some(iteration), Some(lr));
            event(
                &plan.interrupter,
                m.components.event_processor.process_train(LearnerEvent::ProcessedItem(item)),
            );
        }
        if dp.stop_requested() {
            return Ok(true);
        }
    }
}

/// The validation split on the first worker (replicas are identical).
fn validate<M: LearnerModel>(model: &M, m: &mut Main<M>, epoch: usize, plan: &Plan<'_>) {
    let p = &mut m.components.event_processor;
    let total_items = m.valid.num_items();
    event(&plan.interrupter, p.process_valid(LearnerEvent::StartSplit { epoch_number: epoch, total_items }));
    let model = model.valid();
    let mut iterator = m.valid.iter();
    let mut iteration = 0;
    while let Some(item) = iterator.next() {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                plan.interrupter.fail(TrainingError::Dataset(e));
                break;
            }
        };
        iteration += 1;
        let output = InferenceStep::step(&model, item);
        let item = TrainingItem::new(output, iterator.progress(), Some(iteration), None);
        event(&plan.interrupter, p.process_valid(LearnerEvent::ProcessedItem(item)));
        if plan.interrupter.should_stop() {
            break;
        }
    }
    event(&plan.interrupter, p.process_valid(LearnerEvent::EndSplit(epoch)));
}

/// An event processor's error stops the training, as burn-train's own strategies do.
fn event<E: Into<TrainingError>>(interrupter: &burn::train::Interrupter, result: Result<(), E>) {
    interrupter.fail_on_error(result);
}

/// The largest of every worker's `value` (stop flags, the epoch count only the first worker knows).
fn agree_max(dp: &mut DataParallel, value: f32) -> Result<f32, String> {
    let mut v = [value];
    dp.collective_mut().allreduce_max_f32(&mut v).map_err(|e| e.to_string())?;
    Ok(v[0])
}
