//! Local updates: every worker steps on its own and the workers' models
//! meet in outer rounds (ALGORITHMS.md §2, §2.1). One strategy, configured
//! as CELGC, DiLoCo or Streaming DiLoCo:
//!
//! - CELGC (Liu et al., NeurIPS 2022; `kind = "celgc"`): every worker steps
//!   on its own gradient with `η_eff = min(η, γ/(‖g‖ + 1e-10))`, the norm
//!   taken over all parameters of its raw local gradient, and the models are
//!   averaged every `I` steps, before that step's gradient. γ decays with η:
//!   at learning rate η it is `γ·η/η₀`. With `average = "gradients"` and
//!   I = 1 the same code is the paper's baseline, naive parallel clipping:
//!   synchronous SGD whose step is clipped on the norm of the averaged
//!   gradient. The step itself is the caller's optimizer at [`Update::lr`]
//!   (= η_eff): with momentum the clipped step size multiplies the momentum
//!   buffer, as in the authors' `SGDClipGrad`.
//! - DiLoCo (`kind = "local"`): an outer round applies the outer optimizer
//!   (`strategy.outer`) to the workers' averaged model change
//!   ([`OuterRounds`]): `sgd` at lr 1 is model averaging, and `nesterov`
//!   with γ = 0 and the caller's AdamW inside is DiLoCo; fragments and a
//!   delay make it Streaming DiLoCo, whose rounds overlap the next inner
//!   steps on a thread of their own ([`OuterRoundMachine`]).
//!
//! Both fronts drive it through [`ModelAveraging`]: the burn front's handle
//! and the PyTorch front's `LocalUpdates` call the same
//! [`ModelAveraging::average`] at the same steps.

use std::time::Instant;

use gradcomp_comm::Collective;
use gradcomp_compress::StateError;

use super::base::{ModelAveraging, Strategy, Update};
use super::outer_machine::OuterRoundMachine;
use super::outer_rounds::OuterRounds;
use super::outer_schedule::OuterSchedule;
use super::sync::Synchronous;
use crate::config::{Average, ClipNorm, ConfigError, DataParallelConfig, StrategyConfig};
use crate::error::ExchangeError;
use crate::layout::GradientLayout;
use crate::state::{read_renamed, GLOBAL_NORM_KEY};
use crate::{ExchangeStats, Gradient, GradientExchange, StateBuffers, StepInput, Unit};

/// The buffer that says which phase a checkpoint was taken in: 0 the
/// synchronous phase (its memories are saved under [`SYNC_PREFIX`]), 1 the
/// local updates.
pub const PHASE_KEY: &str = "phase";
/// The prefix of the synchronous phase's buffers (its compressor's memories).
pub const SYNC_PREFIX: &str = "sync.";
/// The periods set while the run went (`[boundary, period]` pairs,
/// [`LocalUpdates::set_period_from`]), replayed on resume.
pub const DECIDED_KEY: &str = "schedule.decided";

/// A worker's local-update state.
pub struct LocalUpdates {
    cfg: StrategyConfig,
    /// η₀, the base learning rate γ is given at.
    base_lr: f64,
    /// ‖ḡ‖ of the last communication round (for `global-average` and `max`).
    global_norm: Option<f64>,
    /// When rounds start and merge (plain averaging's too).
    schedule: OuterSchedule,
    /// `None`: plain model averaging, the mean of the models.
    machine: Option<OuterRoundMachine>,
    /// The model before plain averaging, restored if a worker's is refused.
    mean_scratch: Vec<f32>,
    /// The synchronous phase's exchange while it lasts (`strategy.sync`);
    /// dropped, memories and all, at the switch to local updates.
    sync: Option<Synchronous>,
}

fn norm(x: &[f32]) -> f64 {
    gradcomp_compress::reduce::sum_of_squares(x).sqrt()
}

impl LocalUpdates {
    /// The strategy `cfg` describes for a model of `layout` among `workers`
    /// (γ decays with η/η₀, η₀ = `cfg.base_lr`). Plain averaging (dense,
    /// `sgd` at lr 1, one fragment, no delay or mix) keeps no θ_outer; every
    /// other form runs [`OuterRounds`].
    pub fn new(
        cfg: &DataParallelConfig,
        layout: &GradientLayout,
        workers: usize,
    ) -> Result<Self, ConfigError> {
        Self::build(cfg, layout, workers, false)
    }

    /// As [`LocalUpdates::new`], for rounds whose workers change (a
    /// membership engine's quorum each round, at most `workers` of them):
    /// θ_outer is kept even for plain averaging, so a worker that joins
    /// takes it from a peer and sends a zero change
    /// ([`ModelAveraging::set_contributors`]).
    pub fn with_membership(
        cfg: &DataParallelConfig,
        layout: &GradientLayout,
        workers: usize,
    ) -> Result<Self, ConfigError> {
        Self::build(cfg, layout, workers, true)
    }

    fn build(
        cfg: &DataParallelConfig,
        layout: &GradientLayout,
        workers: usize,
        membership: bool,
    ) -> Result<Self, ConfigError> {
        let st = &cfg.strategy;
        if st.plan == crate::config::PlanChoice::Auto {
            return Err(ConfigError::new(
                "strategy.plan",
                "\"auto\" is chosen before the workers start (gradcomp train, gradcomp model --plan, gradcomp.plan); resolve it to its keys first: auto_plan::resolve_in_group among the workers, or AutoPlan::apply",
            ));
        }
        if !st.period_rule.resolved() {
            return Err(ConfigError::new(
                "strategy.period_rule",
                "QSR's periods follow the inner learning rate, which the core does not hold: resolve them first \
                 (PeriodRule::resolve; the trainer and LocalUpdates(lr_at=…) do)",
            ));
        }
        let plain = !membership
            && !st.compress_change
            && st.outer().averages()
            && st.fragments <= 1
            && st.delay == 0
            && !st.overlap.whole_period()
            && st.mix() == 0.0;
        let machine = if plain {
            None
        } else {
            let rounds = OuterRounds::new(cfg, layout, workers, st.compress_change)?;
            Some(OuterRoundMachine::new(rounds, st.delay > 0 || st.overlap.whole_period()))
        };
        let schedule = OuterSchedule::new(st);
        let sync = cfg.sync_phase_config().map(|sc| {
            Synchronous::new(GradientExchange::new(layout, &sc, workers, sc.seed), sc.compression.local_clip)
        });
        Ok(Self {
            cfg: st.clone(),
            base_lr: cfg.base_lr.unwrap_or(1.0),
            global_norm: None,
            schedule,
            machine,
            mean_scratch: Vec::new(),
            sync,
        })
    }

    /// Ends the synchronous phase once `step` is past it: its exchange and
    /// error-feedback memories are dropped (config/phases.rs says why).
    fn switch_at(&mut self, step: u64) {
        if !self.schedule.warming(step) {
            self.sync = None;
        }
    }

    /// A step of the synchronous phase: the gradient through the phase's
    /// per-step compressor, every worker's combined into `out`.
    fn sync_update(
        &mut self,
        input: &StepInput,
        grad: Gradient<'_>,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Update, ExchangeError> {
        let sync = self.sync.as_mut().ok_or_else(|| {
            ExchangeError::Usage(format!(
                "step {} is in the synchronous phase, whose exchange was dropped at a later step; resume from a checkpoint of that phase",
                input.step
            ))
        })?;
        let mut u = sync.update(input, grad, out, c)?;
        u.extra.push(("communicated", 1.0));
        Ok(u)
    }

    /// When the rounds start and merge: a function of the step alone, which
    /// a front may ask without touching the rounds.
    pub fn schedule(&self) -> &OuterSchedule {
        &self.schedule
    }

    /// Periods of `h` inner steps from boundary `b` on (`plan = "auto"`
    /// deciding again while the run goes): every worker calls it at the same
    /// boundary, a period's end, with the same `h`. Refused with the whole
    /// period's overlap (eager or delayed rounds are always in flight) and
    /// where a fragment's round would be in flight across `b`.
    pub fn set_period_from(&mut self, b: u64, h: u64) -> Result<(), ExchangeError> {
        if self.cfg.overlap.whole_period() && self.cfg.delay == 0 {
            return Err(ExchangeError::Usage(
                "the period cannot change under eager or delayed rounds: one is always in flight".into(),
            ));
        }
        let mut schedule = self.schedule.clone();
        schedule.set_period_from(b, h).map_err(ExchangeError::Usage)?;
        self.install(schedule)
    }

    /// `schedule` in place of this strategy's and its rounds' copy (which
    /// the round machine reads on its thread).
    fn install(&mut self, schedule: OuterSchedule) -> Result<(), ExchangeError> {
        if let Some(m) = &mut self.machine {
            m.set_schedule(schedule.clone())?;
        }
        self.schedule = schedule;
        Ok(())
    }

    /// Whether the inner optimizer's state is averaged after the round at
    /// `step` (`strategy.inner_state_every` = k: at the end of every k-th
    /// period; the front averages it with [`Collective::allreduce_mean_f32`]).
    pub fn averages_inner_state(&self, step: u64) -> bool {
        let k = self.cfg.inner_state_every;
        k > 0 && self.schedule.period_ended(step).is_some_and(|n| n.is_multiple_of(k))
    }

    /// The schedule as the configuration gives it, then the periods a
    /// checkpoint says were set while the run went ([`DECIDED_KEY`]).
    fn replay_decided(&mut self, flat: &[f32]) -> Result<(), StateError> {
        let invalid = |problem: String| StateError::Invalid { buffer: DECIDED_KEY.into(), problem };
        if !flat.len().is_multiple_of(2)
            || flat.iter().any(|v| !(v.is_finite() && *v >= 0.0 && v.fract() == 0.0))
        {
            return Err(invalid(format!("{} values: not [boundary, period] pairs of steps", flat.len())));
        }
        let mut schedule = OuterSchedule::new(&self.cfg);
        for pair in flat.chunks(2) {
            schedule.set_period_from(pair[0] as u64, pair[1] as u64).map_err(invalid)?;
        }
        self.install(schedule).map_err(|e| invalid(e.to_string()))
    }

    /// The norm the clipping uses: the local one, or the last round's average.
    fn clip_norm(&self, local: f64) -> f64 {
        if self.cfg.average == Average::Gradients {
            return local;
        }
        match self.cfg.clip_norm {
            ClipNorm::Local => local,
            ClipNorm::GlobalAverage => self.global_norm.unwrap_or(local),
            ClipNorm::Max => self.global_norm.map_or(local, |g| g.max(local)),
        }
    }
}

impl Strategy for LocalUpdates {
    fn name(&self) -> &'static str {
        match self.cfg.kind {
            crate::config::StrategyKind::Local => "local",
            _ => "celgc",
        }
    }

    /// Completes a staged gradient first: the clipping needs its whole norm.
    fn update(
        &mut self,
        input: &StepInput,
        grad: Gradient<'_>,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Update, ExchangeError> {
        if self.schedule.warming(input.step) {
            return self.sync_update(input, grad, out, c);
        }
        self.switch_at(input.step);
        #[allow(irrefutable_let_patterns)]
        let Gradient::Host(stages) = grad
        else {
            return Err(ExchangeError::Device("local updates have no device form".into()));
        };
        stages.complete()?;
        let grad = stages.grad();
        let averaged_gradient = self.cfg.average == Average::Gradients;
        let communicated = self.cfg.average == Average::Models && self.schedule.starts_any(input.step);
        out.copy_from_slice(grad);
        let mut communicate_seconds = 0.0;
        if averaged_gradient || (communicated && self.cfg.clip_norm != ClipNorm::Local) {
            let t = Instant::now();
            c.allreduce_mean_f32(out)?;
            communicate_seconds = t.elapsed().as_secs_f64();
            self.global_norm = Some(norm(out));
            if !averaged_gradient {
                out.copy_from_slice(grad);
            }
        }
        let used = self.clip_norm(norm(out));
        let lr = input.lr;
        let gamma = self.cfg.gamma * lr / self.base_lr;
        let clipped = self.cfg.gamma > 0.0 && gamma / (used + 1e-10) < lr;
        let eta = if clipped { gamma / (used + 1e-10) } else { lr };
        Ok(Update {
            lr: eta,
            stats: ExchangeStats { communicate_seconds, ..Default::default() },
            extra: vec![
                ("eta_eff", eta),
                ("grad_norm", used),
                ("clipped", f64::from(u8::from(clipped))),
                ("communicated", f64::from(u8::from(communicated))),
            ],
        })
    }

    fn identical_replicas(&self) -> bool {
        self.cfg.average == Average::Gradients
    }

    fn set_density(&mut self, rho: f64) {
        if let Some(m) = &mut self.machine {
            m.set_density(rho);
        }
        if let Some(s) = &mut self.sync {
            s.set_density(rho);
        }
    }

    /// The outer rounds' units (the synchronous phase's are its own).
    fn units(&self) -> &[Unit] {
        self.machine.as_ref().map_or(&[], |m| m.units())
    }

    /// With a synchronous phase, [`PHASE_KEY`] says which phase this is,
    /// and the phase's memories come under [`SYNC_PREFIX`] while it lasts.
    fn state(&self) -> Result<StateBuffers, ExchangeError> {
        let mut s = StateBuffers::new();
        s.insert(GLOBAL_NORM_KEY.into(), vec![self.global_norm.map_or(f32::NAN, |g| g as f32)]);
        if let Some(m) = &self.machine {
            m.state(&mut s)?;
        }
        if self.schedule.sync_steps() > 0 {
            s.insert(PHASE_KEY.into(), vec![if self.sync.is_some() { 0.0 } else { 1.0 }]);
        }
        let decided: Vec<u64> = self.schedule.decided().iter().flatten().copied().collect();
        if !decided.is_empty() {
            // Steps as f32: exact below 2^24.
            if decided.iter().any(|&v| v >= 1 << 24) {
                return Err(ExchangeError::Usage(
                    "a period set past step 2^24 cannot be checkpointed".into(),
                ));
            }
            s.insert(DECIDED_KEY.into(), decided.iter().map(|&v| v as f32).collect());
        }
        if let Some(sync) = &self.sync {
            for (k, v) in sync.state()? {
                s.insert(format!("{SYNC_PREFIX}{k}"), v);
            }
        }
        Ok(s)
    }

    /// A checkpoint of the local phase drops the synchronous exchange; one
    /// of the synchronous phase restores its memories. A checkpoint without
    /// [`PHASE_KEY`] (before phases, whose warm-up was dense and kept no
    /// memory) leaves the phase to the schedule.
    fn restore(&mut self, s: &StateBuffers) -> Result<(), StateError> {
        let g = read_renamed(s, GLOBAL_NORM_KEY)?;
        self.global_norm = g.first().filter(|g| !g.is_nan()).map(|&g| f64::from(g));
        if let Some(m) = &mut self.machine {
            m.restore(s)?;
        }
        if let Some(flat) = s.get(DECIDED_KEY) {
            self.replay_decided(flat)?;
        }
        match s.get(PHASE_KEY).map(|v| v.as_slice()) {
            Some([p]) if *p == 1.0 => self.sync = None,
            Some([p]) if *p == 0.0 => {
                let sync = self.sync.as_mut().ok_or_else(|| StateError::Invalid {
                    buffer: PHASE_KEY.into(),
                    problem: "saved in the synchronous phase, which this strategy has passed".into(),
                })?;
                let own: StateBuffers = s
                    .iter()
                    .filter_map(|(k, v)| k.strip_prefix(SYNC_PREFIX).map(|k| (k.to_string(), v.clone())))
                    .collect();
                sync.restore(&own)?;
            }
            Some(v) => {
                return Err(StateError::Invalid {
                    buffer: PHASE_KEY.into(),
                    problem: format!("{v:?} is not a phase (0 or 1)"),
                })
            }
            None => {}
        }
        Ok(())
    }

    fn averaging(&self) -> Option<&dyn ModelAveraging> {
        (self.cfg.average == Average::Models).then_some(self as &dyn ModelAveraging)
    }

    fn averaging_mut(&mut self) -> Option<&mut dyn ModelAveraging> {
        (self.cfg.average == Average::Models).then_some(self as &mut dyn ModelAveraging)
    }
}

impl ModelAveraging for LocalUpdates {
    fn due(&self, step: u64) -> bool {
        self.schedule.due(step)
    }

    fn set_period_from(&mut self, boundary: u64, period: u64) -> Result<(), ExchangeError> {
        LocalUpdates::set_period_from(self, boundary, period)
    }

    fn schedule(&self) -> Option<&OuterSchedule> {
        Some(LocalUpdates::schedule(self))
    }

    fn agrees_after(&self, step: u64) -> bool {
        match &self.machine {
            None => true,
            Some(m) => m.merges_whole() && step > 0 && self.schedule.merges_any(step),
        }
    }

    fn average(
        &mut self,
        step: u64,
        params: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<(), ExchangeError> {
        self.switch_at(step);
        let Some(m) = &mut self.machine else {
            // The mean of the models; a non-finite model is agreed on inside
            // the allreduce (as `OuterRounds::start` does) and refused.
            let n = c.world_size() as f32;
            let mut before = std::mem::take(&mut self.mean_scratch);
            before.clear();
            before.extend_from_slice(params);
            let bad = gradcomp_compress::reduce::first_nonfinite(params).is_some();
            let mut flagged = gradcomp_comm::Flagged::new(c, bad);
            flagged.allreduce_sum_f32(params)?;
            let ranks = flagged.flagged()?;
            if !ranks.is_empty() {
                params.copy_from_slice(&before);
                self.mean_scratch = before;
                return Err(ExchangeError::NonFiniteModel { step, ranks });
            }
            self.mean_scratch = before;
            params.iter_mut().for_each(|p| *p /= n);
            return Ok(());
        };
        m.average(step, params, c)
    }

    fn set_contributors(&mut self, contributors: usize) -> Result<(), ExchangeError> {
        match &mut self.machine {
            Some(m) => m.set_contributors(contributors),
            None => Err(ExchangeError::Usage(
                "plain model averaging keeps no θ_outer to heal a worker from; build the strategy with membership"
                    .into(),
            )),
        }
    }

    fn take_channel_bytes(&mut self) -> gradcomp_comm::StepBytes {
        self.machine.as_mut().map(OuterRoundMachine::take_bytes).unwrap_or_default()
    }

    fn wait(&mut self) -> Result<(), ExchangeError> {
        self.machine.as_mut().map_or(Ok(()), OuterRoundMachine::wait)
    }
}

#[cfg(test)]
mod tests;
