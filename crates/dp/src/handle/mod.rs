//! [`DataParallel`]: one worker's handle on compressed data-parallel training.

use std::collections::BTreeMap;
use std::time::Instant;

use burn::module::Module;
use burn::optim::GradientsParams;
use gradcomp_comm::{Collective, Gathered, StepBytes};
use gradcomp_compress::stats::Histogram;
use serde::{Deserialize, Serialize};

use super::stages::BurnStages;
use super::{DataParallelConfig, SyncError};
use crate::config::OnNonFinite;
use crate::layout::GradientLayout;
use crate::params::{self, GradSource};
use crate::strategy::{ExchangeStats, StepInput, Strategy, Unit};

/// What one [`DataParallel::sync`] produced.
#[derive(Debug)]
pub struct Synced {
    /// The combined gradient of every trainable parameter, on the model's
    /// device, ready for any burn optimizer. Empty when the step was skipped
    /// (stepping an optimizer with it leaves the model unchanged).
    pub grads: GradientsParams,
    /// The learning rate to apply: the one passed in, or CELGC's clipped step.
    pub lr: f64,
    /// A worker had a non-finite gradient or loss and the configuration
    /// skips such steps: every worker skipped it.
    pub skipped: bool,
    /// Some worker asked to stop ([`DataParallel::request_stop`]): every
    /// worker learns it at the same step, applies it, and can checkpoint.
    pub stop_requested: bool,
}

/// What the last synchronized step did on this worker, for records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepStats {
    /// The step's number (from 0).
    pub step: u64,
    /// This worker's loss, if reported; the mean over the workers that reported one.
    pub loss: Option<f64>,
    pub mean_loss: Option<f64>,
    /// The learning rate applied (CELGC's clipped step) and the target density.
    pub lr: f64,
    pub density: Option<f64>,
    pub skipped: bool,
    /// Bytes this worker moved for the strategy (model averaging included;
    /// control, checksum and evaluation rounds excluded), by collective.
    pub bytes: StepBytes,
    /// Seconds to read the gradient out of burn, and to hand the result back.
    pub read_seconds: f64,
    /// Seconds of a staged backward pass run inside
    /// [`DataParallel::sync_stages`] (its later stages, while earlier
    /// buckets were on the wire); 0 for [`DataParallel::sync`].
    pub backward_seconds: f64,
    pub write_seconds: f64,
    /// Seconds in the non-finite check and the agreement round (non-finite values, loss, stop).
    pub control_seconds: f64,
    /// Compression statistics and times of the exchange; `communicate_seconds`
    /// includes a model-averaging round before the step.
    pub exchange: ExchangeStats,
    /// Histogram of this worker's gradient, on measured steps (41 bins).
    pub histogram: Option<Histogram>,
    /// Strategy figures (CELGC's effective step, norm, clipping, round).
    pub extra: Vec<(&'static str, f64)>,
}

/// A handle's state, for checkpoints: the step counter, the byte totals and
/// the strategy's buffers (memories, CELGC's anchor). Serializable, so it can
/// go into any checkpoint format.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataParallelState {
    pub step: u64,
    /// This worker's strategy bytes so far.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// All workers' (see [`DataParallel::group_bytes_sent`]).
    pub group_bytes_sent: u64,
    pub buffers: BTreeMap<String, Vec<f32>>,
    /// The step whose model-averaging round is already done (an epoch-end
    /// round comes before that epoch's checkpoint).
    #[serde(default)]
    pub averaged_at: Option<u64>,
}

/// One worker's handle: owns the collective, the strategy with its memories,
/// the byte meter and the record of the last step.
///
/// Per step, every worker calls [`sync`](Self::sync) with its model and the
/// gradients of `loss.backward()`, and applies the returned
/// [`GradientsParams`] with any burn optimizer at [`Synced::lr`]. Under CELGC,
/// [`average_model`](Self::average_model) before the step averages the
/// models when the step begins a round.
pub struct DataParallel {
    cfg: DataParallelConfig,
    c: Box<dyn Collective>,
    strategy: Box<dyn Strategy>,
    layout: GradientLayout,
    step: u64,
    /// The step whose model-averaging round has been done.
    averaged_at: Option<u64>,
    loss: Option<f64>,
    stop: bool,
    density: Option<f64>,
    grad: Vec<f32>,
    out: Vec<f32>,
    params: Vec<f32>,
    gathered: Gathered,
    /// Strategy bytes and seconds since the last step (a model-averaging round).
    pending: StepBytes,
    pending_seconds: f64,
    totals: StepBytes,
    /// Byte totals of the run before a restore.
    earlier: (u64, u64),
    /// All workers' strategy bytes through the previous step (agreement round).
    group_sent: u64,
    last: StepStats,
    /// Where the exchange compresses: decided at the first step, from where
    /// burn left the gradient and whether the strategy has a device form.
    site: Site,
}

/// Where this worker compresses.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Site {
    /// Not decided yet (no step has run).
    #[default]
    Undecided,
    /// On the model's GPU: the gradient stays in device memory and only
    /// messages cross to the host.
    Device,
    /// On the host, and why (a CPU model, `compression.on_device = false`,
    /// a method or strategy without a device form, or a build without the
    /// `cuda`/`wgpu` features).
    Host(String),
}

/// This step's gradient: read into `DataParallel::grad`, or left on the device.
enum StepGrad {
    Host,
    #[cfg(feature = "device-kernels")]
    Device(crate::device_grad::DeviceGrad),
}

impl DataParallelConfig {
    /// Joins this worker to the group: checks that every worker has the same
    /// model layout and configuration, and replaces `model`'s trainable
    /// parameters by rank 0's so the replicas start identical. Every worker
    /// calls it with its own collective handle.
    pub fn init<M: Module>(
        self,
        collective: impl Collective + 'static,
        model: M,
    ) -> Result<(DataParallel, M), SyncError> {
        self.validate()?;
        let mut c: Box<dyn Collective> = Box::new(collective);
        let rank = c.rank();
        let comm = |source| SyncError::Comm { rank, source };
        let layout = params::layout(&model);
        // Same model and configuration everywhere, or a clear error on every worker.
        let mut mine = layout.fingerprint().to_le_bytes().to_vec();
        mine.extend_from_slice(&self.fingerprint().to_le_bytes());
        let mut all = Gathered::default();
        c.allgatherv(&mine, &mut all).map_err(comm)?;
        if let Some(r) = all.iter().position(|m| m[..8] != mine[..8]) {
            return Err(SyncError::Mismatch(format!(
                "worker {r}'s model has other parameters (names or shapes) than worker {rank}'s"
            )));
        }
        if let Some(r) = all.iter().position(|m| m[8..] != mine[8..]) {
            return Err(SyncError::Mismatch(format!(
                "worker {r}'s DataParallelConfig differs from worker {rank}'s"
            )));
        }
        let mut values = Vec::new();
        params::read_params(&model, &mut values);
        let mut bytes: Vec<u8> = values.iter().flat_map(|p| p.to_le_bytes()).collect();
        c.broadcast(&mut bytes, 0).map_err(comm)?;
        if bytes.len() != values.len() * 4 {
            return Err(SyncError::Mismatch("rank 0 broadcast parameters of another size".into()));
        }
        let values: Vec<f32> =
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let model = params::write_params(model, &values);
        c.meter_mut().take_step();
        let strategy = self.build_strategy(&layout);
        let density = self.compressor.density();
        let n = layout.total();
        let dp = DataParallel {
            cfg: self,
            c,
            strategy,
            layout,
            step: 0,
            averaged_at: None,
            loss: None,
            stop: false,
            density,
            grad: Vec::with_capacity(n),
            out: vec![0.0; n],
            params: values,
            gathered: Gathered::default(),
            pending: StepBytes::default(),
            pending_seconds: 0.0,
            totals: StepBytes::default(),
            earlier: (0, 0),
            group_sent: 0,
            last: StepStats::default(),
            site: Site::Undecided,
        };
        Ok((dp, model))
    }
}

impl DataParallel {
    pub fn rank(&self) -> usize {
        self.c.rank()
    }

    pub fn world_size(&self) -> usize {
        self.c.world_size()
    }

    /// Steps synchronized so far (the number of the next step).
    pub fn step(&self) -> u64 {
        self.step
    }

    pub fn config(&self) -> &DataParallelConfig {
        &self.cfg
    }

    /// The flat gradient layout: every trainable parameter's name, offset and shape.
    pub fn layout(&self) -> &GradientLayout {
        &self.layout
    }

    /// The compression units (empty for CELGC without compressed deltas).
    pub fn units(&self) -> &[Unit] {
        self.strategy.units()
    }

    /// Where this worker compresses (decided at the first [`sync`](Self::sync)).
    pub fn site(&self) -> &Site {
        &self.site
    }

    /// What the last [`sync`](Self::sync) did on this worker.
    pub fn last_step(&self) -> &StepStats {
        &self.last
    }

    /// Bytes this worker sent and received for the strategy so far.
    pub fn bytes_sent(&self) -> u64 {
        self.earlier.0 + self.totals.sent()
    }

    pub fn bytes_received(&self) -> u64 {
        self.earlier.1 + self.totals.received()
    }

    /// Whether every worker's model is identical after every step (false
    /// for CELGC between rounds: use [`consensus_model`](Self::consensus_model)).
    pub fn identical_replicas(&self) -> bool {
        self.strategy.identical_replicas()
    }

    /// Bytes all workers together sent through the strategy up to the last
    /// step, learned in the agreement round of each step (f32 sums: exact to
    /// about 7 digits), for progress displays. Exact per-worker counts are
    /// [`StepStats::bytes`].
    pub fn group_bytes_sent(&self) -> u64 {
        self.group_sent
    }

    /// The collective, for the caller's own operations (evaluation sums,
    /// records). Its bytes are not counted as the strategy's.
    pub fn collective_mut(&mut self) -> &mut dyn Collective {
        &mut *self.c
    }

    /// Records this worker's training loss for the next [`sync`](Self::sync):
    /// eSGD's selection needs it, and the step record averages it. A
    /// non-finite loss counts as a non-finite value.
    pub fn report_loss(&mut self, loss: f64) -> &mut Self {
        self.loss = Some(loss);
        self
    }

    /// Asks every worker to stop: the next [`sync`](Self::sync) returns
    /// `stop_requested` on every worker.
    pub fn request_stop(&mut self) {
        self.stop = true;
    }

    /// Sets the sparsifiers' density for the coming epoch from the configured
    /// warm-up schedule (`compression.warmup`).
    pub fn set_epoch(&mut self, epoch: u32) {
        if let Some(rho) = self.cfg.compressor.density() {
            let d = self.cfg.compression.warmup.density(epoch, rho);
            self.strategy.set_density(d);
            self.density = Some(d);
        }
    }

    /// Whether the next step begins by averaging the workers' models (CELGC).
    pub fn averages_now(&self) -> bool {
        self.strategy.averages_models(self.step) && self.averaged_at != Some(self.step)
    }

    /// Averages the workers' models if the next step begins a round (CELGC);
    /// returns `model` unchanged otherwise. Call it before the step's
    /// forward pass.
    pub fn average_model<M: Module>(&mut self, model: M) -> Result<M, SyncError> {
        if !self.averages_now() {
            return Ok(model);
        }
        self.average_round(model)
    }

    /// Averages the workers' models now, whatever the period: CELGC's
    /// epoch-end round (`strategy.average_at_epoch_end`). A no-op where the
    /// replicas are identical anyway, and when this step's round is done.
    pub fn average_model_now<M: Module>(&mut self, model: M) -> Result<M, SyncError> {
        if self.strategy.identical_replicas() || self.averaged_at == Some(self.step) {
            return Ok(model);
        }
        self.average_round(model)
    }

    fn average_round<M: Module>(&mut self, model: M) -> Result<M, SyncError> {
        self.discard_foreign_bytes();
        let t = Instant::now();
        params::read_params(&model, &mut self.params);
        let (step, rank) = (self.step, self.rank());
        self.strategy
            .average_models(step, &mut self.params, &mut *self.c)
            .map_err(|e| SyncError::from_strategy(rank, e))?;
        self.pending.add(&self.c.meter_mut().take_step());
        self.pending_seconds += t.elapsed().as_secs_f64();
        self.averaged_at = Some(step);
        let model = params::write_params(model, &self.params);
        // Replicas agree right after a round, before local steps move them apart.
        let round = step / self.cfg.strategy.period;
        if self.cfg.checksum_every > 0 && round.is_multiple_of(self.cfg.checksum_every) {
            self.compare_checksums(step)?;
        }
        Ok(model)
    }

    /// Combines this worker's gradients with every other worker's; see
    /// [`Synced`]. `grads` are what `loss.backward()` returned (or burn's
    /// [`GradientsParams`]); `lr` is the learning rate the caller's optimizer
    /// will apply this step.
    pub fn sync<M: Module, G: GradSource>(
        &mut self,
        model: &M,
        grads: G,
        lr: f64,
    ) -> Result<Synced, SyncError> {
        self.begin_sync(model, lr)?;
        let step = self.step;
        let t = Instant::now();
        let grad = self.take_grad(model, &grads)?;
        drop(grads);
        let read_seconds = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let bad = self.find_nonfinite(&grad)?;
        let check_seconds = t.elapsed().as_secs_f64();
        let agreed = self.agree(step, bad)?;
        let mut stats = StepStats {
            step,
            loss: self.loss.take(),
            mean_loss: agreed.mean_loss,
            lr,
            density: self.density,
            read_seconds,
            control_seconds: check_seconds + agreed.seconds,
            ..Default::default()
        };
        if agreed.skip {
            return Ok(self.skip_step(stats, lr, agreed.stop));
        }
        let measure = self.measures(step);
        if measure && self.rank() == 0 {
            self.grad_on_host(&grad)?;
            stats.histogram = Some(Histogram::symmetric(&self.grad, 41));
        }
        let input = StepInput { step, lr, loss: stats.loss, measure };
        let rank = self.rank();
        let combined = match &grad {
            StepGrad::Host => self.strategy.combine(&input, &mut self.grad, &mut self.out, &mut *self.c),
            #[cfg(feature = "device-kernels")]
            StepGrad::Device(g) => self.strategy.combine_device(&input, g, &mut self.out, &mut *self.c),
        }
        .map_err(|e| SyncError::from_strategy(rank, e))?;
        let t = Instant::now();
        let grads = params::grads_params(model, &self.out);
        stats.write_seconds = t.elapsed().as_secs_f64();
        stats.lr = combined.lr;
        stats.exchange = combined.stats;
        stats.extra = combined.extra;
        self.finish(stats);
        Ok(Synced { grads, lr: combined.lr, skipped: false, stop_requested: agreed.stop })
    }

    /// [`sync`](Self::sync) for a backward pass in stages (see
    /// [`Cuts`](super::Cuts)): `stages` yields each stage's gradients,
    /// computing them when asked, output layers first. Where the strategy
    /// streams (synchronous, on the host, from the second step on), each
    /// bucket goes on the wire as soon as its stage is done, while the next
    /// stage's backward pass runs; elsewhere the stages are gathered and
    /// synced as one. The result is bitwise what `sync` gives for the whole
    /// backward pass.
    ///
    /// Non-finite values are agreed on after the exchange rather than
    /// before it: a worker's non-finite stage travels as zeros, and the
    /// agreement then skips the step everywhere (the memories are restored
    /// to their state before it) or stops the run, as `train.on_nonfinite` says.
    pub fn sync_stages<M: Module, G: GradSource, I: IntoIterator<Item = G>>(
        &mut self,
        model: &M,
        stages: I,
        lr: f64,
    ) -> Result<Synced, SyncError> {
        if !(matches!(self.site, Site::Host(_)) && self.strategy.streams()) {
            let merged = params::merge_stages(model, stages).map_err(SyncError::Usage)?;
            return self.sync(model, merged, lr);
        }
        self.begin_sync(model, lr)?;
        let step = self.step;
        let rank = self.rank();
        let measure = self.measures(step);
        let input = StepInput { step, lr, loss: self.loss, measure };
        // Skipping must undo the memories' update, which has happened by the agreement.
        let before = (self.cfg.on_nonfinite == OnNonFinite::Skip).then(|| self.strategy.state());
        let mut source = BurnStages::new(model, stages.into_iter(), &self.layout, &mut self.grad);
        let combined = self.strategy.combine_staged(&input, &mut source, &mut self.out, &mut *self.c);
        let (nonfinite, backward_seconds, read_seconds) =
            (source.nonfinite.take(), source.backward_seconds, source.read_seconds);
        let combined = combined.map_err(|e| SyncError::from_strategy(rank, e))?;
        let t = Instant::now();
        let bad = if self.loss.is_some_and(|l| !l.is_finite()) {
            Some(("loss", "(loss)".to_string()))
        } else {
            nonfinite.map(|tensor| ("gradient", tensor))
        };
        let agreed = self.agree(step, bad)?;
        let mut stats = StepStats {
            step,
            loss: self.loss.take(),
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
                self.strategy.restore(state).map_err(SyncError::Usage)?;
            }
            return Ok(self.skip_step(stats, lr, agreed.stop));
        }
        if measure && rank == 0 {
            stats.histogram = Some(Histogram::symmetric(&self.grad, 41));
        }
        let t = Instant::now();
        let grads = params::grads_params(model, &self.out);
        stats.write_seconds = t.elapsed().as_secs_f64();
        let lr = stats.lr;
        self.finish(stats);
        Ok(Synced { grads, lr, skipped: false, stop_requested: agreed.stop })
    }

    /// Whether step `step` measures its statistics (`stats_every`).
    fn measures(&self, step: u64) -> bool {
        self.cfg.stats_every > 0 && step.is_multiple_of(self.cfg.stats_every)
    }

    /// Ends a step that every worker skipped: nothing to apply.
    fn skip_step(&mut self, mut stats: StepStats, lr: f64, stop: bool) -> Synced {
        stats.skipped = true;
        stats.exchange = ExchangeStats::default();
        self.finish(stats);
        Synced { grads: GradientsParams::new(), lr, skipped: true, stop_requested: stop }
    }

    /// The checks and the replica comparison every sync begins with.
    fn begin_sync<M: Module>(&mut self, model: &M, lr: f64) -> Result<(), SyncError> {
        if !(lr > 0.0 && lr.is_finite()) {
            return Err(SyncError::Usage(format!("the learning rate must be positive and finite, got {lr}")));
        }
        if self.averages_now() {
            return Err(SyncError::Usage(format!(
                "step {} begins with model averaging (CELGC): call average_model before sync",
                self.step
            )));
        }
        if matches!(self.cfg.compressor, gradcomp_compress::CompressorConfig::Esgd(_)) && self.loss.is_none()
        {
            return Err(SyncError::Usage("eSGD selects by the loss: call report_loss before sync".into()));
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

    /// A model every worker agrees on: the replica itself when replicas are
    /// identical, else (CELGC between rounds) the average of the workers'
    /// models, leaving each worker's own model as it is. For evaluation and
    /// the final result.
    pub fn consensus_model<M: Module>(&mut self, model: &M) -> Result<M, SyncError> {
        if self.strategy.identical_replicas() {
            return Ok(model.clone());
        }
        self.discard_foreign_bytes();
        params::read_params(model, &mut self.params);
        let rank = self.rank();
        self.c.allreduce_sum_f32(&mut self.params).map_err(|source| SyncError::Comm { rank, source })?;
        self.c.meter_mut().take_step();
        let n = self.world_size() as f32;
        self.params.iter_mut().for_each(|p| *p /= n);
        Ok(params::write_params(model.clone(), &self.params))
    }

    /// Compares a checksum of `model`'s parameters across workers now; a
    /// difference is [`SyncError::ReplicaMismatch`] on every worker.
    pub fn check_replicas<M: Module>(&mut self, model: &M) -> Result<(), SyncError> {
        params::read_params(model, &mut self.params);
        self.compare_checksums(self.step)
    }

    /// The state an exact resume needs.
    pub fn state(&self) -> DataParallelState {
        DataParallelState {
            step: self.step,
            bytes_sent: self.bytes_sent(),
            bytes_received: self.bytes_received(),
            group_bytes_sent: self.group_sent,
            buffers: self.strategy.state(),
            averaged_at: self.averaged_at,
        }
    }

    /// Restores [`DataParallel::state`] (made by the same model and
    /// configuration); a missing or misshapen buffer is an error naming it.
    pub fn restore(&mut self, state: &DataParallelState) -> Result<(), SyncError> {
        self.strategy.restore(&state.buffers).map_err(SyncError::State)?;
        self.step = state.step;
        self.averaged_at = state.averaged_at;
        self.earlier = (state.bytes_sent, state.bytes_received);
        self.group_sent = state.group_bytes_sent;
        self.totals = StepBytes::default();
        Ok(())
    }

    /// This step's gradient where the exchange compresses it: on the device
    /// (left where burn put it), or read into `self.grad`. The first step
    /// decides the [`Site`].
    fn take_grad<M: Module, G: GradSource>(&mut self, model: &M, grads: &G) -> Result<StepGrad, SyncError> {
        #[cfg(feature = "device-kernels")]
        if matches!(self.site, Site::Undecided | Site::Device) {
            if let Some(g) = self.device_grad(model, grads)? {
                return Ok(StepGrad::Device(g));
            }
        }
        if self.site == Site::Undecided {
            self.site = Site::Host(if cfg!(feature = "device-kernels") {
                "compression.on_device = false".into()
            } else {
                "this build has no device kernels (cargo features cuda, wgpu)".into()
            });
        }
        params::read_grads(model, grads, &mut self.grad);
        Ok(StepGrad::Host)
    }

    /// The gradient as device buffers, one per unit, when the exchange runs
    /// on the device; at the first step, moves the strategy there if it can
    /// and records why not otherwise.
    #[cfg(feature = "device-kernels")]
    fn device_grad<M: Module, G: GradSource>(
        &mut self,
        model: &M,
        grads: &G,
    ) -> Result<Option<crate::device_grad::DeviceGrad>, SyncError> {
        use crate::device_grad::DeviceGrad;
        if !self.cfg.compression.on_device {
            return Ok(None);
        }
        if self.site == Site::Device {
            // The memories live on the device now: a gradient that left it
            // (a model moved to the CPU mid-run) cannot go back to the host path.
            return DeviceGrad::from_burn(model, grads, self.strategy.units())
                .ok_or_else(|| SyncError::Device {
                    rank: self.rank(),
                    message: "the gradients left the GPU after the exchange moved its memories there".into(),
                })
                .map(Some);
        }
        if self.strategy.units().is_empty() {
            self.site = Site::Host(format!("strategy `{}` compresses on the host", self.strategy.name()));
            return Ok(None);
        }
        let Some(g) = DeviceGrad::from_burn(model, grads, self.strategy.units()) else {
            self.site = Site::Host("the gradients are not f32 tensors on a GPU (cuda, wgpu) device".into());
            return Ok(None);
        };
        match self.strategy.to_device(&g.client) {
            Ok(()) => {
                self.site = Site::Device;
                Ok(Some(g))
            }
            Err(why) => {
                self.site = Site::Host(why);
                Ok(None)
            }
        }
    }

    /// Copies a device gradient into `self.grad` (measured steps, error reports).
    fn grad_on_host(&mut self, grad: &StepGrad) -> Result<(), SyncError> {
        match grad {
            StepGrad::Host => Ok(()),
            #[cfg(feature = "device-kernels")]
            StepGrad::Device(g) => g
                .read(&mut self.grad)
                .map_err(|e| SyncError::Device { rank: self.rank(), message: e.to_string() }),
        }
    }

    /// This worker's first non-finite value: the loss, or the tensor holding it.
    fn find_nonfinite(&mut self, grad: &StepGrad) -> Result<Option<(&'static str, String)>, SyncError> {
        if self.loss.is_some_and(|l| !l.is_finite()) {
            return Ok(Some(("loss", "(loss)".to_string())));
        }
        match grad {
            StepGrad::Host => {}
            #[cfg(feature = "device-kernels")]
            StepGrad::Device(g) => {
                let device = |e: gradcomp_kernels::KernelError| SyncError::Device {
                    rank: self.rank(),
                    message: e.to_string(),
                };
                if g.all_finite().map_err(device)? {
                    return Ok(None);
                }
                self.grad_on_host(grad)?;
            }
        }
        if gradcomp_compress::reduce::all_finite(&self.grad) {
            return Ok(None);
        }
        let Some(j) = self.grad.iter().position(|g| !g.is_finite()) else {
            return Ok(None);
        };
        Ok(Some(("gradient", self.layout.slot_of(j).map_or_else(|| "?".into(), |s| s.name.clone()))))
    }

    /// The agreement round: non-finite values (`bad`, this worker's first),
    /// losses and stop requests, one small allreduce.
    fn agree(&mut self, step: u64, bad: Option<(&'static str, String)>) -> Result<Agreed, SyncError> {
        let t = Instant::now();
        let (rank, n) = (self.rank(), self.world_size());
        // [stop, loss sum, losses, previous step's bytes, one non-finite flag per rank]
        const FLAGS: usize = 4;
        let mut control = vec![0.0f32; FLAGS + n];
        control[0] = f32::from(u8::from(self.stop));
        if let Some(l) = self.loss.filter(|l| l.is_finite()) {
            control[1] = l as f32;
            control[2] = 1.0;
        }
        control[3] = self.last.bytes.sent() as f32;
        control[FLAGS + rank] = f32::from(u8::from(bad.is_some()));
        self.c.allreduce_sum_f32(&mut control).map_err(|source| SyncError::Comm { rank, source })?;
        self.c.meter_mut().take_step();
        self.stop = false;
        self.group_sent += control[3] as u64;
        let bad_ranks: Vec<usize> = (0..n).filter(|&r| control[FLAGS + r] > 0.0).collect();
        if !bad_ranks.is_empty() && self.cfg.on_nonfinite == OnNonFinite::Stop {
            return Err(match bad {
                Some((what, tensor)) => SyncError::NonFinite { step, rank, what, tensor },
                None => SyncError::PeerNonFinite { step, ranks: bad_ranks },
            });
        }
        Ok(Agreed {
            stop: control[0] > 0.0,
            skip: !bad_ranks.is_empty(),
            mean_loss: (control[2] > 0.0).then(|| f64::from(control[1]) / f64::from(control[2])),
            seconds: t.elapsed().as_secs_f64(),
        })
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

    /// Drops meter counts that are not the strategy's (the caller's own
    /// collectives since the last call).
    fn discard_foreign_bytes(&mut self) {
        self.c.meter_mut().take_step();
    }

    /// Compares the checksum of `self.params` across workers.
    fn compare_checksums(&mut self, step: u64) -> Result<(), SyncError> {
        let rank = self.rank();
        let sum = params::checksum(&self.params).to_le_bytes();
        self.c.allgatherv(&sum, &mut self.gathered).map_err(|source| SyncError::Comm { rank, source })?;
        self.c.meter_mut().take_step();
        let first = self.gathered.get(0).to_vec();
        let ranks: Vec<usize> = (0..self.gathered.len()).filter(|&r| self.gathered.get(r) != first).collect();
        if ranks.is_empty() {
            Ok(())
        } else {
            Err(SyncError::ReplicaMismatch { step, ranks })
        }
    }
}

/// What the agreement round decided.
struct Agreed {
    stop: bool,
    skip: bool,
    mean_loss: Option<f64>,
    seconds: f64,
}
