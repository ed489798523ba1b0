//! How workers combine their work (`[strategy]`): synchronous exchange, or
//! local steps with periodic rounds: CELGC's clipped local SGD with model
//! averaging (ALGORITHMS.md §2), and local updates with an outer optimizer,
//! DiLoCo and Streaming DiLoCo (§2.1), which are the same strategy.

use serde::{Deserialize, Serialize};

use super::phases::{PeriodRule, PlanChoice, SyncPhase};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// Synchronous compressed SGD: gradients exchanged every step (`"sync"`).
    #[serde(rename = "sync")]
    Synchronous,
    /// CELGC (`"celgc"`): local SGD with per-worker clipping, models
    /// averaged every `period` steps; a configuration of local updates.
    #[serde(rename = "celgc")]
    ClippedAveraging,
    /// Local updates (DiLoCo): the caller's inner optimizer for `period`
    /// steps, then a round in which the outer optimizer (`nesterov` unless
    /// `outer.name` says otherwise) moves the shared model by the averaged
    /// change; with `fragments` and `delay`, Streaming DiLoCo. The
    /// same strategy as `celgc`, whose clipping stays an option (`gamma`).
    Local,
}

impl StrategyKind {
    /// Whether workers step on their own between rounds (`celgc`, `local`).
    pub fn steps_locally(self) -> bool {
        matches!(self, StrategyKind::ClippedAveraging | StrategyKind::Local)
    }
}

/// Which norm CELGC clips with (ALGORITHMS.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClipNorm {
    /// The worker's own raw gradient norm (the paper).
    Local,
    /// The norm of the average gradient of the last communication round.
    GlobalAverage,
    /// The larger of the two.
    Max,
}

/// What CELGC averages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Average {
    /// Models, every `period` steps (CELGC).
    Models,
    /// Gradients, every step, clipping on the average: "naive parallel
    /// clipping", the paper's baseline (`period` must be 1).
    Gradients,
}

/// The outer optimizer of local updates (DiLoCo, Douillard et al. 2023):
/// how the workers' averaged change c̄ = mean(θ_local) − θ_outer (DiLoCo's
/// pseudo-gradient is −c̄)
/// moves the model every worker adopts after a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OuterKind {
    /// θ_outer ← θ_outer − lr·m, m ← μ·m + Δ̄; at lr 1 and μ 0 this is model averaging.
    Sgd,
    /// Nesterov momentum as torch's SGD takes it: m ← μ·m + Δ̄,
    /// θ_outer ← θ_outer − lr·(Δ̄ + μ·m) (DiLoCo's outer optimizer).
    Nesterov,
}

impl OuterKind {
    /// Every outer optimizer, in `strategy.outer.name`'s spelling: the one
    /// list both fronts read (`_core.outer_optimizers()`).
    pub const ALL: [OuterKind; 2] = [OuterKind::Sgd, OuterKind::Nesterov];

    /// Its `strategy.outer.name`.
    pub fn name(self) -> &'static str {
        match self {
            OuterKind::Sgd => "sgd",
            OuterKind::Nesterov => "nesterov",
        }
    }
}

/// `[strategy.outer]`: the outer optimizer and its settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OuterConfig {
    /// Unset: `nesterov` for `kind = "local"`, `sgd` (averaging) for `celgc`
    /// ([`StrategyConfig::outer`] resolves it).
    pub name: Option<OuterKind>,
    /// The outer learning rate; unset: 1 for `sgd` (averaging), 0.7 for
    /// `nesterov` (DiLoCo's).
    pub lr: Option<f64>,
    /// The outer momentum μ; unset: 0 for `sgd`, 0.9 for `nesterov` (DiLoCo's).
    pub momentum: Option<f64>,
    /// Rounds over which the outer step warms up from model averaging
    /// (lr 1, μ 0) to `lr` and `momentum`, linearly: round k of the first
    /// W takes the fraction k/W of the way ([`OuterConfig::at_round`]). 0: none.
    pub warmup_rounds: u64,
    /// Rounds over which it decays back to averaging at the end of the run:
    /// the last D of `rounds` (needed then). 0: none.
    pub decay_rounds: u64,
    /// The run's outer rounds, where `decay_rounds` ends.
    pub rounds: Option<u64>,
}

impl OuterConfig {
    /// DiLoCo's outer optimizer: Nesterov at lr 0.7, momentum 0.9.
    pub fn nesterov() -> Self {
        Self { name: Some(OuterKind::Nesterov), ..Self::default() }
    }

    /// Plain SGD at `lr` with `momentum`.
    pub fn sgd(lr: f64, momentum: f64) -> Self {
        Self { name: Some(OuterKind::Sgd), lr: Some(lr), momentum: Some(momentum), ..Self::default() }
    }

    /// The optimizer; unset is `sgd` (resolve the kind's default with
    /// [`StrategyConfig::outer`]).
    pub fn kind(&self) -> OuterKind {
        self.name.unwrap_or(OuterKind::Sgd)
    }

    pub fn lr(&self) -> f64 {
        self.lr.unwrap_or(match self.kind() {
            OuterKind::Sgd => 1.0,
            OuterKind::Nesterov => 0.7,
        })
    }

    pub fn momentum(&self) -> f64 {
        self.momentum.unwrap_or(match self.kind() {
            OuterKind::Sgd => 0.0,
            OuterKind::Nesterov => 0.9,
        })
    }

    /// The optimizer's name as the configuration spells it.
    pub fn kind_name(&self) -> &'static str {
        self.kind().name()
    }

    /// Whether the outer step is plain model averaging (`sgd`, lr 1, no momentum).
    pub fn averages(&self) -> bool {
        self.kind() == OuterKind::Sgd && self.lr() == 1.0 && self.momentum() == 0.0
    }

    /// Whether the outer step changes from round to round (a warm-up or a decay).
    pub fn scheduled(&self) -> bool {
        self.warmup_rounds > 0 || self.decay_rounds > 0
    }

    /// The outer step's (lr, μ) at round `k` (1: the first outer step): the
    /// configured ones scaled toward averaging by f = w·d, with the warm-up
    /// w = min(1, k/W) and the decay d = min(1, (R − k)/D) over the last D
    /// of R rounds: lr_k = 1 + (lr − 1)·f, μ_k = μ·f. Without either, f = 1.
    pub fn at_round(&self, k: u64) -> (f64, f64) {
        let w = if self.warmup_rounds > 0 { (k as f64 / self.warmup_rounds as f64).min(1.0) } else { 1.0 };
        let d = match (self.decay_rounds, self.rounds) {
            (0, _) | (_, None) => 1.0,
            (dr, Some(r)) => (r.saturating_sub(k) as f64 / dr as f64).min(1.0),
        };
        let f = w * d;
        (1.0 + (self.lr() - 1.0) * f, self.momentum() * f)
    }
}

/// How a round overlaps the next inner phase beyond Streaming's `delay`
/// (ALGORITHMS.md §2.3, Kale, Douillard, Donchev 2025, arXiv 2502.12996).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// No overlap past `delay`: a round's result is merged when it ends.
    #[default]
    None,
    /// The round runs through the whole next period; meanwhile the outer
    /// step takes the worker's own fresh change in place of its part of the
    /// average (the others' part is the last round's).
    Eager,
    /// The round runs through the whole next period; the outer step applies
    /// the last round's average (one-step-delay DiLoCo).
    Delayed,
}

impl Overlap {
    /// Whether a round overlaps the whole next period.
    pub fn whole_period(self) -> bool {
        self != Overlap::None
    }

    pub fn name(self) -> &'static str {
        match self {
            Overlap::None => "none",
            Overlap::Eager => "eager",
            Overlap::Delayed => "delayed",
        }
    }
}

/// Streaming DiLoCo's mixing factor α when a fragment's round overlaps
/// `delay` ≥ 1 inner steps (Douillard et al. 2025, arXiv 2501.18512, §2.3:
/// the merged fragment is α·θ_local + (1 − α)·θ_outer, α = 0.5 in their runs).
pub const STREAMING_MIX: f64 = 0.5;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StrategyConfig {
    pub kind: StrategyKind,
    /// CELGC: the communication period I.
    pub period: u64,
    /// CELGC: γ in η_eff = min(η, γ/‖g‖); decays with η. 0 turns clipping off.
    pub gamma: f64,
    pub clip_norm: ClipNorm,
    pub average: Average,
    /// CELGC: also average the models at every epoch end but the last,
    /// whatever the period (the authors' scripts do; the paper's algorithm
    /// does not say). The last epoch's evaluation uses the average anyway.
    pub average_at_epoch_end: bool,
    /// Send each outer round's change through `[compressor]` with error
    /// feedback instead of averaging it densely (the key's name before
    /// round six, below, still reads).
    #[serde(alias = "compress_delta")]
    pub compress_change: bool,
    /// The outer rounds' outer optimizer, applied to the averaged change
    /// ([`StrategyConfig::outer`] gives it resolved).
    pub outer: OuterConfig,
    /// Streaming: the model's tensors in P contiguous groups of about equal
    /// size; group p has its round at the steps t with t ≥ p·H/P and
    /// (t − p·H/P) mod H = 0, so a round carries 1/P of the model. 1: the
    /// whole model at once.
    pub fragments: u64,
    /// Streaming: τ, the inner steps a fragment's round overlaps; its result
    /// is merged τ steps after its change was taken. 0: blocking.
    pub delay: u64,
    /// Streaming: α in θ ← α·θ_local + (1 − α)·θ_outer when a round's result
    /// is merged; unset: [`STREAMING_MIX`] with `delay` ≥ 1, else 0 (adopt
    /// θ_outer, DiLoCo; and eager rounds per fragment, which adopt θ_m).
    pub mix: Option<f64>,
    /// Eager or delayed outer steps: each round overlaps the whole next
    /// period (one fragment, no delay, no mix). `none`: it does not.
    pub overlap: Overlap,
    /// Dense synchronous steps before local updates begin (post-local SGD's
    /// `start_localSGD_iter`): the first S steps average their gradients
    /// across workers, θ_outer is recorded after them, and the rounds fall
    /// every `period` steps from there. 0: local from the first step. The
    /// older key of `sync.steps` with a dense compressor, still read.
    pub warmup_steps: u64,
    /// The synchronous phase before local updates: its steps and its
    /// per-step compressor ([`StrategyConfig::sync_phase`] resolves it).
    pub sync: SyncPhase,
    /// How the period grows over the run (`fixed`: it does not).
    pub period_rule: PeriodRule,
    /// `auto`: the keys of local updates chosen by the performance model
    /// before the run ([`crate::auto_plan`]); `given`: as configured.
    pub plan: PlanChoice,
    /// Also average the model's buffers (BatchNorm's running statistics) at
    /// every round: the fronts that have them (PyTorch's). Off: each
    /// worker keeps its own, as torchft's DiLoCo does.
    pub average_buffers: bool,
    /// Average the inner optimizer's state (Adam's moments, SGD's momentum)
    /// across the workers at the end of every k-th period, after its round
    /// (DES-LOC, arXiv 2505.22549): the fronts that can read their
    /// optimizer's state (PyTorch's). 0: each worker keeps its own.
    pub inner_state_every: u64,
}

impl StrategyConfig {
    /// CELGC: local steps clipped at `gamma` (0: no clipping), models
    /// averaged every `period` steps, every other option at its default.
    pub fn celgc(period: u64, gamma: f64) -> Self {
        Self { kind: StrategyKind::ClippedAveraging, period, gamma, ..Default::default() }
    }

    pub fn with_clip_norm(mut self, clip_norm: ClipNorm) -> Self {
        self.clip_norm = clip_norm;
        self
    }

    pub fn with_average(mut self, average: Average) -> Self {
        self.average = average;
        self
    }

    pub fn with_average_at_epoch_end(mut self, on: bool) -> Self {
        self.average_at_epoch_end = on;
        self
    }

    pub fn with_compress_change(mut self, on: bool) -> Self {
        self.compress_change = on;
        self
    }

    pub fn with_outer(mut self, outer: OuterConfig) -> Self {
        self.outer = outer;
        self
    }

    /// Local updates (DiLoCo): rounds every `period` inner steps, the outer
    /// optimizer `nesterov` unless set otherwise.
    pub fn local(period: u64) -> Self {
        Self { kind: StrategyKind::Local, period, ..Default::default() }
    }

    /// Streaming: `fragments` groups, each round overlapping `delay` steps.
    pub fn with_streaming(mut self, fragments: u64, delay: u64) -> Self {
        self.fragments = fragments;
        self.delay = delay;
        self
    }

    pub fn with_overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    pub fn with_mix(mut self, mix: f64) -> Self {
        self.mix = Some(mix);
        self
    }

    /// The outer optimizer with its name resolved: `outer.name`, else
    /// `nesterov` for `kind = "local"` and `sgd` (averaging) otherwise.
    pub fn outer(&self) -> OuterConfig {
        let default = match self.kind {
            StrategyKind::Local => OuterKind::Nesterov,
            _ => OuterKind::Sgd,
        };
        OuterConfig { name: Some(self.outer.name.unwrap_or(default)), ..self.outer }
    }

    /// The synchronous phase before local updates, if the run has one:
    /// `sync`, or `warmup_steps` dense steps (the older key).
    pub fn sync_phase(&self) -> Option<SyncPhase> {
        if self.sync.steps > 0 {
            Some(self.sync.clone())
        } else if self.warmup_steps > 0 {
            Some(SyncPhase { steps: self.warmup_steps, ..SyncPhase::default() })
        } else {
            None
        }
    }

    /// The steps of the synchronous phase (0: none).
    pub fn sync_steps(&self) -> u64 {
        self.sync_phase().map_or(0, |p| p.steps)
    }

    /// A synchronous phase of `steps` steps through `compressor` first.
    pub fn with_sync_phase(mut self, phase: SyncPhase) -> Self {
        self.sync = phase;
        self
    }

    pub fn with_period_rule(mut self, rule: PeriodRule) -> Self {
        self.period_rule = rule;
        self
    }

    /// α, resolved (see [`StrategyConfig::mix`]).
    pub fn mix(&self) -> f64 {
        let streaming = self.delay > 0 && self.overlap != Overlap::Eager;
        self.mix.unwrap_or(if streaming { STREAMING_MIX } else { 0.0 })
    }
}

impl Default for StrategyConfig {
    fn default() -> Self {
        Self {
            kind: StrategyKind::Synchronous,
            period: 1,
            gamma: 0.0,
            clip_norm: ClipNorm::Local,
            average: Average::Models,
            average_at_epoch_end: false,
            compress_change: false,
            outer: OuterConfig::default(),
            fragments: 1,
            delay: 0,
            mix: None,
            overlap: Overlap::None,
            warmup_steps: 0,
            sync: SyncPhase::default(),
            period_rule: PeriodRule::Fixed,
            plan: PlanChoice::Given,
            average_buffers: false,
            inner_state_every: 0,
        }
    }
}
