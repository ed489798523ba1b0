//! How workers combine their work (`[strategy]`): synchronous exchange, or
//! CELGC's local steps with periodic averaging (ALGORITHMS.md §2).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// Synchronous compressed SGD: gradients exchanged every step.
    Sync,
    /// CELGC: local SGD with per-worker clipping, models averaged every `period` steps.
    Celgc,
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
/// how the workers' averaged pseudo-gradient Δ̄ = θ_outer − mean(θ_local)
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

/// `[strategy.outer]`: the outer optimizer and its settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OuterConfig {
    pub name: OuterKind,
    /// The outer learning rate; unset: 1 for `sgd` (averaging), 0.7 for
    /// `nesterov` (DiLoCo's).
    pub lr: Option<f64>,
    /// The outer momentum μ; unset: 0 for `sgd`, 0.9 for `nesterov` (DiLoCo's).
    pub momentum: Option<f64>,
}

impl OuterConfig {
    /// DiLoCo's outer optimizer: Nesterov at lr 0.7, momentum 0.9.
    pub fn nesterov() -> Self {
        Self { name: OuterKind::Nesterov, lr: None, momentum: None }
    }

    pub fn lr(&self) -> f64 {
        self.lr.unwrap_or(match self.name {
            OuterKind::Sgd => 1.0,
            OuterKind::Nesterov => 0.7,
        })
    }

    pub fn momentum(&self) -> f64 {
        self.momentum.unwrap_or(match self.name {
            OuterKind::Sgd => 0.0,
            OuterKind::Nesterov => 0.9,
        })
    }

    /// Whether the outer step is plain model averaging (`sgd`, lr 1, no momentum).
    pub fn averages(&self) -> bool {
        self.name == OuterKind::Sgd && self.lr() == 1.0 && self.momentum() == 0.0
    }
}

impl Default for OuterConfig {
    fn default() -> Self {
        Self { name: OuterKind::Sgd, lr: None, momentum: None }
    }
}

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
    /// CELGC: send the periodic model change through `[compressor]` with
    /// error feedback instead of averaging models densely.
    pub compress_delta: bool,
    /// CELGC's model rounds: the outer optimizer applied to the averaged
    /// pseudo-gradient (default `sgd` at lr 1: model averaging).
    pub outer: OuterConfig,
}

impl StrategyConfig {
    /// CELGC: local steps clipped at `gamma` (0: no clipping), models
    /// averaged every `period` steps, every other option at its default.
    pub fn celgc(period: u64, gamma: f64) -> Self {
        Self { kind: StrategyKind::Celgc, period, gamma, ..Default::default() }
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

    pub fn with_compress_delta(mut self, on: bool) -> Self {
        self.compress_delta = on;
        self
    }

    pub fn with_outer(mut self, outer: OuterConfig) -> Self {
        self.outer = outer;
        self
    }
}

impl Default for StrategyConfig {
    fn default() -> Self {
        Self {
            kind: StrategyKind::Sync,
            period: 1,
            gamma: 0.0,
            clip_norm: ClipNorm::Local,
            average: Average::Models,
            average_at_epoch_end: false,
            compress_delta: false,
            outer: OuterConfig::default(),
        }
    }
}
