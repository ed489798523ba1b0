//! A step: [`DataParallel::begin_step`] before the forward pass, and
//! [`DataParallel::step`] after it (the exchange, and the optimizer at the
//! step size the strategy decides).

use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use gradcomp_compress::stats::Histogram;
use gradcomp_compress::CompressorConfig;

use super::location::StepGrad;
use super::{CompressionLocation, DataParallel, StepStats};
use crate::backward::read::BurnStages;
use crate::backward::{Backward, Pass, StagedBackward};
use crate::config::OnNonFinite;
use crate::exchange::{ExchangeStats, Gradient, StepInput};
use crate::grad_stages::CompleteGrad;
use crate::params::{self, GradSource};
use crate::DataParallelError;

/// What the exchange made of a step: the combined gradient and the step
/// size to apply it at.
pub(crate) struct Synced {
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
        if self.averages_now() {
            return self.average_round(model);
        }
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
        let synced = self.sync(&model, backward, lr)?;
        if synced.skipped {
            return Ok(model);
        }
        let t = Instant::now();
        let model = optim.step(synced.lr, model, synced.grads);
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
    pub(crate) fn sync<M: Module, B: Backward>(
        &mut self,
        model: &M,
        backward: B,
        lr: f64,
    ) -> Result<Synced, DataParallelError> {
        let pass = backward.into_pass();
        self.begin_sync(model, lr, pass.loss)?;
        match pass.grads {
            Pass::Whole(grads) => self.sync_whole(model, grads, pass.loss, lr),
            // Streaming needs to know, before the first stage, that the host compresses.
            Pass::Staged(stages) if matches!(self.location, CompressionLocation::Host(_)) => {
                self.sync_staged(model, *stages, pass.loss, lr)
            }
            Pass::Staged(stages) => {
                let merged = params::merge_stages(model, *stages).map_err(DataParallelError::Usage)?;
                self.sync_whole(model, merged, pass.loss, lr)
            }
        }
    }

    /// A whole gradient: non-finite values are agreed on before the exchange.
    fn sync_whole<M: Module, G: GradSource>(
        &mut self,
        model: &M,
        grads: G,
        loss: Option<f64>,
        lr: f64,
    ) -> Result<Synced, DataParallelError> {
        let step = self.step;
        let t = Instant::now();
        let grad = self.take_grad(model, &grads)?;
        // burn's gradients are read (or their device buffers held): free them before the exchange.
        drop(grads);
        let read_seconds = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let bad = self.find_nonfinite(&grad, loss)?;
        let check_seconds = t.elapsed().as_secs_f64();
        let agreed = self.agree(step, bad, loss)?;
        let mut stats = StepStats {
            step,
            loss,
            mean_loss: agreed.mean_loss,
            lr,
            density: self.density,
            read_seconds,
            control_seconds: check_seconds + agreed.seconds,
            ..Default::default()
        };
        if agreed.skip {
            return Ok(self.skip_step(stats, lr));
        }
        let measure = self.measures(step);
        if measure && self.rank() == 0 {
            self.grad_on_host(&grad)?;
            stats.histogram = Some(Histogram::symmetric(&self.grad, 41));
        }
        let input = StepInput { step, lr, loss, measure };
        let rank = self.rank();
        let combined = match &grad {
            StepGrad::Host => {
                let g = Gradient::Host(&mut CompleteGrad(&self.grad));
                self.strategy.combine(&input, g, &mut self.out, &mut *self.c)
            }
            #[cfg(feature = "device-kernels")]
            StepGrad::Device(g) => {
                self.strategy.combine(&input, Gradient::Device(g), &mut self.out, &mut *self.c)
            }
        }
        .map_err(|e| DataParallelError::from_exchange(rank, e))?;
        let t = Instant::now();
        let grads = params::grads_params(model, &self.out);
        stats.write_seconds = t.elapsed().as_secs_f64();
        stats.lr = combined.lr;
        stats.exchange = combined.stats;
        stats.extra = combined.extra;
        self.finish(stats);
        Ok(Synced { grads, lr: combined.lr, skipped: false })
    }

    /// A backward pass in stages on the host: each bucket goes on the wire
    /// as soon as its stage is done, while the next stage's backward pass
    /// runs (strategies that need the whole gradient complete it first). The
    /// result is bitwise what the whole backward pass gives.
    ///
    /// Non-finite values are agreed on after the exchange rather than
    /// before it: a worker's non-finite stage travels as zeros, and the
    /// agreement then skips the step everywhere (the memories are restored
    /// to their state before it) or stops the run, as `on_nonfinite` says.
    fn sync_staged<M: Module>(
        &mut self,
        model: &M,
        stages: StagedBackward,
        loss: Option<f64>,
        lr: f64,
    ) -> Result<Synced, DataParallelError> {
        let (step, rank) = (self.step, self.rank());
        let measure = self.measures(step);
        let input = StepInput { step, lr, loss, measure };
        // Skipping must undo the memories' update, which has happened by the agreement.
        let before = match self.cfg.on_nonfinite {
            OnNonFinite::Skip => {
                Some(self.strategy.state().map_err(|e| DataParallelError::from_exchange(rank, e))?)
            }
            OnNonFinite::Stop => None,
        };
        let mut source = BurnStages::new(model, stages, &self.layout, &mut self.grad);
        let combined =
            self.strategy.combine(&input, Gradient::Host(&mut source), &mut self.out, &mut *self.c);
        let (nonfinite, backward_seconds, read_seconds) =
            (source.nonfinite.take(), source.backward_seconds, source.read_seconds);
        let combined = combined.map_err(|e| DataParallelError::from_exchange(rank, e))?;
        let t = Instant::now();
        let bad = if loss.is_some_and(|l| !l.is_finite()) {
            Some(("loss", "(loss)".to_string()))
        } else {
            nonfinite.map(|tensor| ("gradient", tensor))
        };
        let agreed = self.agree(step, bad, loss)?;
        let mut stats = StepStats {
            step,
            loss,
            mean_loss: agreed.mean_loss,
            lr: combined.lr,
            density: self.density,
            read_seconds,
            backward_seconds,
            control_seconds: t.elapsed().as_secs_f64(),
            exchange: combined.stats,
            extra: combined.extra,
            ..Default::default()
        };
        if agreed.skip {
            if let Some(state) = &before {
                self.strategy.restore(state).map_err(DataParallelError::Usage)?;
            }
            return Ok(self.skip_step(stats, lr));
        }
        if measure && rank == 0 {
            stats.histogram = Some(Histogram::symmetric(&self.grad, 41));
        }
        let t = Instant::now();
        let grads = params::grads_params(model, &self.out);
        stats.write_seconds = t.elapsed().as_secs_f64();
        let lr = stats.lr;
        self.finish(stats);
        Ok(Synced { grads, lr, skipped: false })
    }

    /// The checks and the replica comparison every step begins with.
    fn begin_sync<M: Module>(
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
        if self.cfg.compressor.is(|c| matches!(c, CompressorConfig::Esgd(_))) && loss.is_none() {
            return Err(DataParallelError::Usage(
                "eSGD selects by the loss: pass the loss tensor (or (gradients, loss)) to step".into(),
            ));
        }
        self.discard_foreign_bytes();
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
    fn skip_step(&mut self, mut stats: StepStats, lr: f64) -> Synced {
        stats.skipped = true;
        stats.exchange = ExchangeStats::default();
        self.finish(stats);
        Synced { grads: GradientsParams::new(), lr, skipped: true }
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
