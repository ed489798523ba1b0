//! One worker's training: the step loop on the library's
//! [`DataParallel`] handle and a burn optimizer, epochs with their records,
//! evaluation and checkpoints, and resuming.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use gradcomp_comm::Collective;

use super::checkpoint::{self, Checkpoint};
use super::eval;
use super::recorder::{LoopTimes, Recorder, WorkerStep};
use super::run::{build_model, io, Progress, RunSummary, Shared, TrainError};
use crate::config::Backend;
use crate::data::Loader;
use crate::models::Net;
use crate::records::{git_revision, write_atomic, EpochRecord, Hardware, Manifest, UnitRecord};
use crate::schedule::LrSchedule;
use gradcomp_dp::{Cuts, DataParallel, DataParallelError, InitDataParallel};

/// Runs worker `rank` to the end; rank 0 returns the run's summary.
pub(super) fn run<M: Net>(
    rank: usize,
    mut c: impl Collective + 'static,
    sh: &Shared<'_>,
    make: impl Fn(&Device) -> M,
) -> Result<Option<RunSummary>, TrainError> {
    let resume = if sh.opts.resume {
        match Checkpoint::load_latest(&sh.run_dir, sh.cfg, sh.opts.allow_changes) {
            Ok(saved) => Some(saved),
            Err(e) => return Err(give_up(sh, rank, &mut c, e)),
        }
    } else {
        None
    };
    let device = sh.cfg.device.device(rank);
    // Rank 0's seeded model becomes everyone's in `init`.
    let model = build_model(&make, &device, (rank == 0).then_some(sh.cfg.seed));
    let (mut dp, model) = sh.cfg.data_parallel().init(c, model)?;
    if let Some(inputs) = &sh.opts.replan {
        dp.decide_again_from(inputs.clone());
    }
    let result =
        Worker::start(sh, &mut dp, &model, device, resume.as_ref()).and_then(|(w, model)| w.train(model));
    result.map_err(|e| give_up(sh, rank, dp.collective_mut(), e))
}

/// Under MPI a failing rank ends the job: MPI cannot cancel the collectives
/// its peers wait in. In-process peers learn of it when its collective drops.
fn give_up(sh: &Shared<'_>, rank: usize, c: &mut dyn Collective, e: TrainError) -> TrainError {
    if sh.cfg.backend == Backend::Mpi {
        eprintln!("error: MPI rank {rank}: {e}");
        c.abandon(1);
    }
    e
}

mod resize;

/// A worker's loop state.
struct Worker<'a, 's, M> {
    sh: &'a Shared<'s>,
    dp: &'a mut DataParallel,
    device: Device,
    optim: ModuleOptimizer,
    loader: Loader,
    schedule: LrSchedule,
    steps_per_epoch: u64,
    total_steps: u64,
    /// (step, position): the run's step `base.0` is `base.1` steps into the
    /// epochs of this run's shards. (0, 0) unless a resume changed the
    /// number of workers, and with it the steps per epoch ([`Worker::resize`]).
    base: (u64, u64),
    /// The learning rate's factor after a change of workers (`elastic.lr`).
    lr_factor: f64,
    epochs: u32,
    recorder: Recorder,
    last_eval: (Option<f64>, Option<f64>),
    /// The step at which `train.target_accuracy` was reached.
    reached_target: Option<u64>,
    epoch_records: Vec<EpochRecord>,
    /// The step of the last checkpoint written.
    saved_at: Option<u64>,
    /// A checkpoint being written in the background (`checkpoint_every_steps`).
    background: Option<checkpoint::Background>,
    _model: PhantomData<M>,
}

impl<'a, 's, M: Net> Worker<'a, 's, M> {
    /// Sets up the loop (and resumes from `resume`); returns it with the model.
    fn start(
        sh: &'a Shared<'s>,
        dp: &'a mut DataParallel,
        model: &M,
        device: Device,
        resume: Option<&Checkpoint>,
    ) -> Result<(Self, M), TrainError> {
        let (cfg, rank) = (sh.cfg, dp.rank());
        let mut loader = Loader::new(sh.data, cfg, rank);
        let steps_per_epoch = loader.batches_per_epoch() as u64;
        if steps_per_epoch == 0 {
            return Err(TrainError::Config(crate::config::ConfigError {
                key: "data.batch_size".into(),
                problem: sh.data.too_small_for_a_batch(cfg),
            }));
        }
        let planned = steps_per_epoch * u64::from(cfg.train.epochs.max(1));
        let total_steps = if cfg.train.max_steps > 0 { cfg.train.max_steps.min(planned) } else { planned };
        if rank == 0 {
            std::fs::create_dir_all(&sh.run_dir).map_err(io(&sh.run_dir))?;
            write_atomic(&sh.run_dir.join("config.toml"), cfg.to_toml().as_bytes())
                .map_err(io(&sh.run_dir))?;
            write_manifest(sh, dp)?;
        }
        let mut w = Worker {
            sh,
            optim: crate::optim::optimizer(&cfg.optimizer, model),
            recorder: Recorder::new(sh, rank, dp, resume.map(|c| c.counters.step))?,
            dp,
            device,
            loader,
            schedule: LrSchedule::new(cfg.optimizer.lr, &cfg.schedule, steps_per_epoch, total_steps),
            steps_per_epoch,
            total_steps,
            base: (0, 0),
            lr_factor: 1.0,
            epochs: total_steps.div_ceil(steps_per_epoch) as u32,
            last_eval: (None, None),
            reached_target: None,
            epoch_records: Vec::new(),
            saved_at: None,
            background: None,
            _model: PhantomData,
        };
        let model = match resume {
            Some(saved) => w.resume(model.clone(), saved)?,
            None => model.clone(),
        };
        Ok((w, model))
    }

    /// Continues from a checkpoint: model, optimizer, the handle's state, the
    /// totals and the step's place in the epochs. With another number of
    /// workers than it was made with (issue #27), each worker's state comes
    /// from [`Worker::resized_state`] (local updates:
    /// [`Worker::outer_restart`]) and the run is placed anew by
    /// [`Worker::resize`].
    fn resume(&mut self, model: M, saved: &Checkpoint) -> Result<M, TrainError> {
        let rank = self.dp.rank();
        let (from, to) = (saved.counters.workers, self.dp.world_size());
        let resized = from != to && from > 0;
        let (model, state, restart) = if resized && self.sh.cfg.restarts_from_outer_model() {
            let (model, state, restart) = self.outer_restart(model, saved, from)?;
            (model, state, Some(restart))
        } else {
            // A resized synchronous run's replicas are identical (CELGC, whose are not, is refused before).
            let (state, own) = if resized {
                (self.resized_state(saved, from, to)?, None)
            } else {
                saved.rank_state(rank)?
            };
            let replica = own.as_ref().unwrap_or(&saved.replica);
            let (model, optim) = replica.apply(model, self.optim.clone())?;
            self.optim = optim;
            (model, state, None)
        };
        if state.step != saved.counters.step {
            return Err(TrainError::Checkpoint(format!(
                "rank {rank}'s file is at step {}, the run's state at step {}",
                state.step, saved.counters.step
            )));
        }
        self.dp.restore(&state)?;
        self.recorder.totals = saved.counters.clone();
        self.saved_at = Some(saved.counters.step);
        self.lr_factor = saved.counters.lr_factor.unwrap_or(1.0);
        if resized {
            self.resize(saved, from, to, restart)?;
        } else if saved.counters.position() != saved.counters.step {
            // A run resized before: its steps keep their place in the epochs.
            self.set_position(saved.counters.step, saved.counters.position());
        }
        Ok(model)
    }

    /// Places `step` `position` steps into this run's epochs (a resize, or
    /// a resume of a run resized before), and the run's end, epochs and
    /// schedule with it.
    fn set_position(&mut self, step: u64, position: u64) {
        let cfg = self.sh.cfg;
        self.base = (step, position);
        let planned = self.steps_per_epoch * u64::from(cfg.train.epochs.max(1));
        let end = step + planned.saturating_sub(position);
        self.total_steps = if cfg.train.max_steps > 0 { cfg.train.max_steps.min(end) } else { end };
        self.epochs = self.epoch_of(self.total_steps.saturating_sub(1)) + 1;
        self.schedule = LrSchedule::new(cfg.optimizer.lr, &cfg.schedule, self.steps_per_epoch, planned);
    }

    fn epoch_of(&self, step: u64) -> u32 {
        (self.position(step) / self.steps_per_epoch) as u32
    }

    /// How many steps of this run's shards precede `step`: the step itself
    /// unless a resume changed the number of workers.
    fn position(&self, step: u64) -> u64 {
        step.saturating_sub(self.base.0) + self.base.1
    }

    /// Steps to the end (or to an agreed stop), then the summary.
    fn train(mut self, mut model: M) -> Result<Option<RunSummary>, TrainError> {
        let mut interrupted = false;
        let mut stop_at = None;
        while self.dp.steps() < self.total_steps {
            let (m, stop) = self.step(model)?;
            model = m;
            let step = self.dp.steps();
            let every = self.sh.cfg.train.eval_every;
            if self.position(step).is_multiple_of(self.steps_per_epoch) || step == self.total_steps {
                // Not after the last step: evaluation and the summary already
                // use the workers' average, and a round there would send
                // bytes no step record could carry.
                if step < self.total_steps {
                    model = self.dp.end_epoch(model)?;
                }
                model = self.end_epoch(model)?;
            } else if every > 0 && step.is_multiple_of(every) && self.sh.cfg.train.eval {
                self.evaluate_now(&model)?;
            }
            let every_steps = self.sh.cfg.train.checkpoint_every_steps;
            if every_steps > 0 && step.is_multiple_of(every_steps) && self.saved_at != Some(step) {
                model = self.checkpoint_in_background(model)?;
            }
            if self.reached_target.is_some() {
                break;
            }
            if stop && stop_at.is_none() {
                stop_at = Some(self.stop_step(step));
            }
            if stop_at.is_some_and(|s| step >= s) && step < self.total_steps {
                interrupted = true;
                break;
            }
        }
        if interrupted && self.saved_at != Some(self.dp.steps()) {
            // The partial epoch's records, then a checkpoint to resume from.
            self.recorder.flush(self.dp, self.sh)?;
            model = self.checkpoint(model)?;
        }
        self.finish(&model, interrupted)
    }

    /// The step an agreed stop at `step` ends at: `step` itself, or in a
    /// local-update run the next step at which an outer round starts (at
    /// most H/P steps on), so that the checkpoint it leaves takes up every
    /// worker's local progress in a round: a resume with another number of
    /// workers, which restarts them from θ_outer, then discards none (one
    /// fragment; with several, the other fragments' progress since their
    /// own rounds). Every worker computes the same step.
    fn stop_step(&self, step: u64) -> u64 {
        if !self.sh.cfg.restarts_from_outer_model() {
            return step;
        }
        gradcomp_dp::strategy::OuterSchedule::new(&self.sh.cfg.strategy).next_start(step)
    }

    /// Before a checkpoint of a local-update run (`kind = "local"`), the
    /// outer round due at this step, which the next step would begin with:
    /// the checkpoint then holds the round's result (after a whole merge,
    /// every worker's model is θ_outer), which a resume with another number
    /// of workers restarts from. The same round at the same step as without
    /// the checkpoint; not after the last step (no next step begins there).
    fn round_before_checkpoint(&mut self, model: M) -> Result<M, TrainError> {
        let step = self.dp.steps();
        if !self.sh.cfg.restarts_from_outer_model() || step >= self.total_steps {
            return Ok(model);
        }
        let epoch = self.epoch_of(step);
        Ok(self.dp.begin_step(model, epoch)?)
    }

    /// One step: a CELGC round if due, forward/backward, the exchange, the optimizer.
    fn step(&mut self, model: M) -> Result<(M, bool), TrainError> {
        let wall = Instant::now();
        let step = self.dp.steps();
        let epoch = self.epoch_of(step);
        let lr = self.schedule.lr(self.position(step)) * self.lr_factor;
        let model = self.dp.begin_step(model, epoch)?;
        for line in self.dp.take_plan_lines() {
            eprintln!("plan = \"auto\": {line}");
        }
        if self.dp.rank() == 0 && self.sh.opts.stop.load(Ordering::Relaxed) {
            self.dp.request_stop();
        }
        let t = Instant::now();
        let batch = self.loader.batch(epoch, (self.position(step) % self.steps_per_epoch) as usize);
        let lr = lr * self.loader.lr_scale(&batch);
        // A model with cuts backpropagates in stages when the exchange is
        // pipelined: each bucket leaves as soon as its stage is done.
        let (loss, cuts) = if self.sh.cfg.compression.pipeline {
            model.staged_loss(&batch, &self.device)
        } else {
            (model.loss(&batch, &self.device), Cuts::none())
        };
        let (model, forward_backward_seconds) = if !cuts.is_empty() {
            // The staged backward pass runs inside the step, stage by stage.
            let staged = cuts.backward(loss);
            let forward = t.elapsed().as_secs_f64();
            (self.dp.step(model, staged, &mut self.optim, lr)?, forward)
        } else {
            let grads = loss.backward();
            let value = f64::from(loss.into_scalar::<f32>());
            let seconds = t.elapsed().as_secs_f64();
            (self.dp.step(model, (grads, value), &mut self.optim, lr)?, seconds)
        };
        let times = LoopTimes {
            forward_backward_seconds,
            optimizer_seconds: self.dp.last_step().optimizer_seconds,
            wall_seconds: wall.elapsed().as_secs_f64(),
        };
        let stats = self.dp.last_step();
        self.recorder.push(WorkerStep::new(self.dp.rank(), epoch, stats, &times));
        let (rank, done) = (self.dp.rank(), step + 1);
        if let Some(super::run::Fault::LoseWorker { rank: r, after_step }) = self.sh.opts.fault {
            if (r, after_step) == (rank, done) {
                panic!("injected fault: worker {rank} lost after step {done}");
            }
        }
        if rank == 0 {
            self.sh.steps_done.store(done, Ordering::Relaxed);
        }
        if self.dp.rank() == 0 {
            let progress = Progress {
                step: done,
                epoch,
                epochs: self.epochs,
                step_in_epoch: self.position(step) + 1 - u64::from(epoch) * self.steps_per_epoch,
                steps_per_epoch: self.steps_per_epoch,
                loss: stats.mean_loss.unwrap_or(f64::NAN),
                bytes_sent: self.dp.group_bytes_sent(),
                last_accuracy: self.last_eval.0,
                last_perplexity: self.last_eval.1,
                location: self.dp.compression_location().clone(),
            };
            self.sh.observer.lock().unwrap_or_else(|e| e.into_inner()).step(&progress);
        }
        Ok((model, self.dp.stop_requested()))
    }

    /// An evaluation within an epoch (`train.eval_every`): the steps so far
    /// go to the records first, so its line in `evals.jsonl` carries the
    /// wall-clock up to this step.
    fn evaluate_now(&mut self, model: &M) -> Result<(), TrainError> {
        let step = self.dp.steps();
        self.recorder.flush(self.dp, self.sh)?;
        let consensus = self.dp.consensus_model(model)?;
        let eval = eval::evaluate(self.dp, &consensus, self.sh)?;
        if self.dp.rank() == 0 {
            let r = self.recorder.eval_record(self.sh, self.epoch_of(step - 1), step, Some(&eval))?;
            self.last_eval = (r.test_accuracy, r.test_perplexity);
        }
        self.check_target(step, &eval);
        Ok(())
    }

    /// Notes the step at which the test accuracy first reached
    /// `train.target_accuracy` (or the perplexity came down to
    /// `train.target_perplexity`). Every worker holds the same (allreduced)
    /// evaluation, so all of them stop together.
    fn check_target(&mut self, step: u64, eval: &eval::Evaluation) {
        let t = &self.sh.cfg.train;
        let reached = t.target_accuracy.is_some_and(|a| eval.test.accuracy() >= a)
            || t.target_perplexity.is_some_and(|p| eval.test.perplexity() <= p);
        if self.reached_target.is_none() && reached {
            self.reached_target = Some(step);
        }
    }

    /// Ends an epoch: records, evaluation (on the model every worker agrees
    /// on), the density of the next epoch, and a checkpoint when due.
    fn end_epoch(&mut self, model: M) -> Result<M, TrainError> {
        let step = self.dp.steps();
        let epoch = self.epoch_of(step - 1);
        self.recorder.flush(self.dp, self.sh)?;
        let eval = if self.sh.cfg.train.eval {
            let consensus = self.dp.consensus_model(&model)?;
            Some(eval::evaluate(self.dp, &consensus, self.sh)?)
        } else {
            None
        };
        if self.dp.rank() == 0 {
            let r = self.recorder.epoch_record(self.sh, epoch, step, eval.as_ref())?;
            self.last_eval = (r.test_accuracy, r.test_perplexity);
            self.sh.observer.lock().unwrap_or_else(|e| e.into_inner()).epoch(&r);
            self.epoch_records.push(r);
        }
        if let Some(eval) = &eval {
            self.check_target(step, eval);
        }
        let every = self.sh.cfg.train.checkpoint_every_epochs;
        if (every > 0 && (epoch + 1).is_multiple_of(every)) || step == self.total_steps {
            return self.checkpoint(model);
        }
        Ok(model)
    }

    fn checkpoint(&mut self, model: M) -> Result<M, TrainError> {
        self.wait_for_background()?;
        let model = self.round_before_checkpoint(model)?;
        let step = self.dp.steps();
        let counters = self.recorder.totals.at(step, self.position(step));
        checkpoint::write(self.sh, self.dp, &model, &self.optim, &counters)?;
        self.saved_at = Some(self.dp.steps());
        Ok(model)
    }

    /// A checkpoint of this step written while training goes on: the
    /// records so far go out (the counters must match them), the state is
    /// copied here, and a thread writes it. The previous one must be done.
    fn checkpoint_in_background(&mut self, model: M) -> Result<M, TrainError> {
        self.wait_for_background()?;
        self.recorder.flush(self.dp, self.sh)?;
        let model = self.round_before_checkpoint(model)?;
        let step = self.dp.steps();
        let counters = self.recorder.totals.at(step, self.position(step));
        let snapshot = checkpoint::Snapshot::take(self.sh, self.dp, &model, &self.optim, &counters)?;
        self.background = Some(checkpoint::Background::start(snapshot));
        self.saved_at = Some(self.dp.steps());
        Ok(model)
    }

    fn wait_for_background(&mut self) -> Result<(), TrainError> {
        self.background.take().map_or(Ok(()), checkpoint::Background::wait)
    }

    /// The run's result: the final model every worker agrees on, and (rank 0) the summary.
    fn finish(mut self, model: &M, interrupted: bool) -> Result<Option<RunSummary>, TrainError> {
        self.wait_for_background()?;
        let consensus = self.dp.consensus_model(model)?;
        let mut params = Vec::new();
        gradcomp_dp::params::read_params(&consensus, &mut params);
        let rank = self.dp.rank();
        self.dp.collective_mut().barrier().map_err(|source| DataParallelError::Comm { rank, source })?;
        Ok((rank == 0).then(|| RunSummary {
            run_dir: self.sh.run_dir.clone(),
            epochs: self.epoch_records,
            steps: self.dp.steps(),
            params_checksum: gradcomp_dp::params::checksum(&params),
            interrupted,
            reached_target: self.reached_target,
            final_params: params,
        }))
    }
}

/// `manifest.json`: what ran, where, with which options.
fn write_manifest(sh: &Shared<'_>, dp: &DataParallel) -> Result<(), TrainError> {
    let cfg = sh.cfg;
    let m = Manifest {
        gradcomp_version: env!("CARGO_PKG_VERSION").into(),
        burn_version: "0.22.1".into(),
        git_revision: git_revision(),
        seed: cfg.seed,
        workers: cfg.workers,
        backend: cfg.backend,
        topology: dp.config().topology(),
        compressor: cfg.compressor.clone(),
        granularity: dp.config().granularity(),
        exclude: cfg.compression.exclude.clone(),
        combine: format!("{:?}", cfg.compressor.build().combine()),
        memory: cfg.compressor.resolve_memory(cfg.compression.memory),
        parameters: dp.layout().total(),
        layout_fingerprint: format!("{:016x}", dp.layout().fingerprint()),
        units: dp
            .units()
            .iter()
            .map(|u| UnitRecord {
                id: u.id,
                name: u.name.clone(),
                len: u.len,
                shape: u.shape.clone(),
                dense: u.excluded,
            })
            .collect(),
        data: sh.data.summary(),
        hardware: Hardware::this_machine(),
    };
    let path = sh.run_dir.join("manifest.json");
    write_atomic(&path, serde_json::to_string_pretty(&m).expect("manifest serializes").as_bytes())
        .map_err(io(&path))
}
