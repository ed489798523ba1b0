//! A step: [`DataParallel::begin_step`] before the forward pass, and
//! [`DataParallel::step`] after it (the exchange, and the optimizer at the
//! step size the strategy decides).

use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use gradcomp_compress::stats::Histogram;

use super::location::Arrival;
use super::{DataParallel, NonFinite, StepStats};
use crate::backward::read::BurnStages;
use crate::backward::Backward;
use crate::config::OnNonFinite;
use crate::exchange::{ExchangeStats, Gradient, StateBuffers, StepInput};
use crate::grad_stages::CompleteGrad;
use crate::params;
use crate::strategy::Update;
use crate::DataParallelError;

/// Whether a gradient was checked for non-finite values on its way into the
/// exchange (streamed stage by stage), and what the check found.
enum Streamed {
    /// Read whole, and agreed on before the exchange.
    No,
    /// Streamed: this worker's first non-finite value, if any.
    Checked(Option<NonFinite>),
}

/// What the exchange made of a step: the combined gradient and the step
/// size to apply it at.
pub(crate) struct GradientUpdate {
    /// The combined gradient of every trainable parameter, on the model's
    /// device; empty when the step was skipped.
    pub grads: GradientsParams,
    /// The learning rate to apply: the one passed in, or CELGC's clipped step.
    pub lr: f64,
    pub skipped: bool,
}

impl DataParallel {
    /// What the strategy needs before a step's forward pass, in `epoch`
    /// (from 0): the sparsifiers' density for the epoch (density warm-up),
    /// and, when the step begins a CELGC round, the averaging of the
    /// workers' models (returned). Call it at the top of every step. The
    /// epoch only drives a per-epoch warm-up: a loop counted in steps, with
    /// no warm-up, passes 0.
    pub fn begin_step<M: Module>(&mut self, model: M, epoch: u32) -> Result<M, DataParallelError> {
        if self.epoch != Some(epoch) {
            self.set_epoch(epoch);
        }
        self.time_step();
        let model = if self.averages_now() {
            let model = self.average_round(model)?;
            self.decide_again()?;
            model
        } else {
            model
        };
        self.restart_step_timer();
        Ok(model)
    }

    /// Combines this worker's gradients with every other worker's and
    /// applies the result to `model` with `optim` (any burn optimizer) at
    /// `lr`, or at the step size the strategy decides (CELGC's clipping);
    /// returns the updated model. `backward` is the loss tensor, its
    /// gradients, or a staged backward pass ([`Backward`]). A step that every
    /// worker skips (a non-finite value under `on_nonfinite = skip`)
    /// returns `model` unchanged.
    #[doc(alias = "sync")]
    pub fn step<M: Module, B: Backward>(
        &mut self,
        model: M,
        backward: B,
        optim: &mut ModuleOptimizer,
        lr: f64,
    ) -> Result<M, DataParallelError> {
        let update = self.gradient_update(&model, backward, lr)?;
        if update.skipped {
            return Ok(model);
        }
        let t = Instant::now();
        let model = optim.step(update.lr, model, update.grads);
        self.last.optimizer_seconds = t.elapsed().as_secs_f64();
        Ok(model)
    }

    /// At an epoch's end: CELGC's extra averaging round when
    /// `strategy.average_at_epoch_end` asks for one (a no-op otherwise,
    /// where replicas are identical anyway, and when this step's round is
    /// done).
    pub fn end_epoch<M: Module>(&mut self, model: M) -> Result<M, DataParallelError> {
        if !self.cfg.strategy.average_at_epoch_end
            || self.strategy.identical_replicas()
            || self.averaged_at == Some(self.step)
        {
            return Ok(model);
        }
        self.average_round(model)
    }

    /// The combined gradient of a step, and the step size to apply it at:
    /// [`step`](Self::step) without the optimizer, for callers that apply
    /// it themselves (burn-train's `Learner`).
    ///
    /// Every step takes this one path: the gradient arrives (read whole, or
    /// streamed stage by stage into the exchange), the workers agree on
    /// non-finite values, the strategy takes its step, and the result is written
    /// back. Only the agreement's place depends on how the gradient arrives:
    /// a whole gradient is agreed on before the exchange; a streamed one
    /// after it (a worker's non-finite stage travels as zeros, and a
    /// skipped step restores the memories to their state before it).
    pub(crate) fn gradient_update<M: Module, B: Backward>(
        &mut self,
        model: &M,
        backward: B,
        lr: f64,
    ) -> Result<GradientUpdate, DataParallelError> {
        let pass = backward.into_pass();
        let loss = pass.loss;
        self.begin_update(model, lr, loss)?;
        let step = self.step;
        let input = StepInput { step, lr, loss, measure: self.measures(step) };
        let mut stats = StepStats { step, loss, lr, density: self.density, ..Default::default() };
        let t = Instant::now();
        let arrival = self.arrival(model, pass.grads)?;
        stats.read_seconds = t.elapsed().as_secs_f64();
        if !matches!(arrival, Arrival::Streamed(_)) {
            let t = Instant::now();
            let bad = self.find_nonfinite(&arrival, loss)?;
            stats.control_seconds = t.elapsed().as_secs_f64();
            if self.agree_on(&mut stats, bad)? {
                return Ok(self.skip_step(stats, lr));
            }
            if input.measure && self.rank() == 0 {
                self.grad_on_host(&arrival)?;
            }
        }
        let before = self.state_to_restore(&arrival)?;
        let (combined, streamed) = self.strategy_update(model, arrival, &input, &mut stats)?;
        stats.lr = combined.lr;
        stats.exchange = combined.stats;
        stats.extra = combined.extra;
        if let Streamed::Checked(bad) = streamed {
            if self.agree_on(&mut stats, bad)? {
                if let Some(state) = &before {
                    self.strategy.restore(state)?;
                }
                return Ok(self.skip_step(stats, lr));
            }
        }
        if input.measure && self.rank() == 0 {
            stats.histogram = Some(Histogram::symmetric(&self.grad, 41));
        }
        let t = Instant::now();
        let grads = params::grads_params(model, &self.out);
        stats.write_seconds = t.elapsed().as_secs_f64();
        let lr = stats.lr;
        self.finish(stats);
        Ok(GradientUpdate { grads, lr, skipped: false })
    }

    /// The step's agreement on this worker's first non-finite value `bad`,
    /// into `stats`; true when every worker skips the step.
    fn agree_on(&mut self, stats: &mut StepStats, bad: Option<NonFinite>) -> Result<bool, DataParallelError> {
        let agreed = self.agree(stats.step, bad, stats.loss)?;
        stats.mean_loss = agreed.mean_loss;
        stats.control_seconds += agreed.seconds;
        Ok(agreed.skip)
    }

    /// The strategy's state before a streamed step that may be skipped:
    /// its memories are updated by the time the workers agree.
    fn state_to_restore(&self, arrival: &Arrival) -> Result<Option<StateBuffers>, DataParallelError> {
        if !matches!(arrival, Arrival::Streamed(_)) || self.cfg.on_nonfinite == OnNonFinite::Stop {
            return Ok(None);
        }
        let rank = self.rank();
        self.strategy.state().map(Some).map_err(|e| DataParallelError::from_exchange(rank, e))
    }

    /// The strategy's update from the gradient, into `self.out`; for a
    /// streamed gradient also this worker's first non-finite value, found
    /// on the way ([`Streamed::Checked`]; a whole gradient was agreed on
    /// before: [`Streamed::No`]).
    fn strategy_update<M: Module>(
        &mut self,
        model: &M,
        arrival: Arrival,
        input: &StepInput,
        stats: &mut StepStats,
    ) -> Result<(Update, Streamed), DataParallelError> {
        let rank = self.rank();
        let exchange_error = |e| DataParallelError::from_exchange(rank, e);
        let (strategy, out, c) = (&mut self.strategy, &mut self.out, &mut self.c);
        match arrival {
            Arrival::Host => {
                let g = Gradient::Host(&mut CompleteGrad(&self.grad));
                Ok((strategy.update(input, g, out, c).map_err(exchange_error)?, Streamed::No))
            }
            #[cfg(feature = "device-kernels")]
            Arrival::Device(g) => Ok((
                strategy.update(input, Gradient::Device(&g), out, c).map_err(exchange_error)?,
                Streamed::No,
            )),
            Arrival::Streamed(stages) => {
                let mut source = BurnStages::new(model, *stages, &self.layout, &mut self.grad);
                let combined = strategy.update(input, Gradient::Host(&mut source), out, c);
                stats.backward_seconds = source.backward_seconds;
                stats.read_seconds = source.read_seconds;
                let bad = if input.loss.is_some_and(|l| !l.is_finite()) {
                    Some(("loss", "(loss)".to_string()))
                } else {
                    source.nonfinite.take().map(|tensor| ("gradient", tensor))
                };
                Ok((combined.map_err(exchange_error)?, Streamed::Checked(bad)))
            }
        }
    }

    /// The checks and the replica comparison every step begins with.
    fn begin_update<M: Module>(
        &mut self,
        model: &M,
        lr: f64,
        loss: Option<f64>,
    ) -> Result<(), DataParallelError> {
        if !(lr > 0.0 && lr.is_finite()) {
            return Err(DataParallelError::Usage(format!(
                "the learning rate must be positive and finite, got {lr}"
            )));
        }
        if self.averages_now() {
            return Err(DataParallelError::Usage(format!(
                "step {} begins with model averaging (CELGC): call begin_step before the step's forward pass",
                self.step
            )));
        }
        if self.cfg.compressor.declares(|m| m.needs_loss()) && loss.is_none() {
            return Err(DataParallelError::Usage(format!(
                "{} selects by the loss: pass the loss tensor (or (gradients, loss)) to step",
                self.cfg.compressor_name()
            )));
        }
        let step = self.step;
        let due = self.cfg.checksum_every > 0 && step > 0 && step.is_multiple_of(self.cfg.checksum_every);
        if due && self.strategy.identical_replicas() {
            params::read_params(model, &mut self.params);
            self.compare_checksums(step)?;
        }
        Ok(())
    }

    /// Sets the sparsifiers' density for `epoch` from the configured
    /// warm-up schedule (`compression.warmup`).
    fn set_epoch(&mut self, epoch: u32) {
        self.epoch = Some(epoch);
        if let Some(rho) = self.cfg.compressor.density() {
            let d = self.cfg.compression.warmup.density(epoch, rho);
            self.strategy.set_density(d);
            self.density = Some(d);
        }
    }

    /// Whether step `step` measures its statistics (`stats_every`).
    fn measures(&self, step: u64) -> bool {
        self.cfg.stats_every > 0 && step.is_multiple_of(self.cfg.stats_every)
    }

    /// Ends a step that every worker skipped: nothing to apply.
    fn skip_step(&mut self, mut stats: StepStats, lr: f64) -> GradientUpdate {
        stats.skipped = true;
        stats.exchange = ExchangeStats::default();
        self.finish(stats);
        GradientUpdate { grads: GradientsParams::new(), lr, skipped: true }
    }

    /// Ends a step: its bytes (and a preceding round's) become the step's.
    fn finish(&mut self, mut stats: StepStats) {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.add(&self.c.meter_mut().take_step());
        stats.exchange.communicate_seconds += std::mem::take(&mut self.pending_seconds);
        self.totals.add(&bytes);
        stats.bytes = bytes;
        self.last = stats;
        self.step += 1;
    }
}
