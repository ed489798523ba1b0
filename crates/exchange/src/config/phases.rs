//! A run of local updates as a plan of phases (`[strategy.sync]`,
//! `[strategy.period_rule]`): synchronous steps through a per-step
//! compressor first, then local updates whose period follows a rule
//! (ALGORITHMS.md §2.4). Local SGD's drift grows with η²(H − 1) (Lin et al.
//! 2020, arXiv 1808.07217), so a run synchronises while the learning rate is
//! high and goes local, with a period that grows, as it falls.

use gradcomp_compress::memory::MemoryKind;
use gradcomp_compress::CompressorConfig;
use serde::{Deserialize, Serialize};

use crate::route::Topology;

/// `[strategy.sync]`: the synchronous phase before local updates. Its
/// steps exchange every worker's gradient through `compressor` (dense, or
/// any per-step compressor with its memory: PowerSGD, fp4, 8-bit, Top-k
/// with error feedback), as `kind = "sync"` does; the rounds start at its
/// end, where θ_outer is recorded.
///
/// At the switch the model and the caller's inner optimizer carry on as
/// they are (Adam's moments included: they were built on the averaged
/// gradients). The per-step compressor's error-feedback memory is
/// **dropped**, not folded into the first change: it holds gradient mass
/// not yet applied, in gradient units, which only the inner optimizer
/// could turn into a model change (under Adam its step is not a multiple
/// of the gradient), and error feedback keeps it of the order of one
/// step's compression error, which the local steps' own noise exceeds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyncPhase {
    /// Synchronous steps before local updates (post-local SGD's
    /// `start_localSGD_iter`). 0: none, or `warmup_steps` (the older key,
    /// a dense phase) where that is set.
    pub steps: u64,
    /// The phase's per-step compressor, with its options (`name = "dense"`
    /// by default: the gradients averaged as DDP does).
    pub compressor: Option<CompressorConfig>,
    /// Its memory (`auto`: the compressor's own, error feedback for the
    /// biased ones).
    pub memory: MemoryKind,
    /// Its collective pattern; unset, the one its messages need.
    pub topology: Option<Topology>,
}

impl SyncPhase {
    /// `steps` synchronous steps through `compressor`.
    pub fn new(steps: u64, compressor: CompressorConfig) -> Self {
        Self { steps, compressor: Some(compressor), ..Self::default() }
    }

    /// The compressor, `dense` where unset.
    pub fn compressor(&self) -> CompressorConfig {
        self.compressor
            .clone()
            .unwrap_or_else(|| CompressorConfig::named("dense").expect("dense is built in"))
    }
}

/// `strategy.period_rule`: how the period H of local updates follows the
/// run. Fragments keep their share of the period (fragment p merges at
/// (p+1)·H/P of each period) and τ stays in inner steps, so both stay
/// consistent as H grows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PeriodRule {
    /// H every period.
    #[default]
    Fixed,
    /// H doubles at each of the stated steps (counted from the run's first
    /// step): the first period that begins at or after one is twice the
    /// one before, as post-local SGD's period grows when the learning rate
    /// decays (Lin et al. 2020).
    Doubling {
        /// The steps after which H doubles, ascending.
        at: Vec<u64>,
    },
    /// Quadratic synchronisation (QSR, Gu et al. 2023, arXiv 2310.14423):
    /// the period that begins at boundary b is H_b = max(H, ⌈(α/η_b)²⌉),
    /// η_b the inner learning rate at step b, so the period grows as the
    /// learning rate decays. η is the front's learning-rate schedule, which
    /// the core does not hold: [`PeriodRule::resolve`] turns the rule into
    /// its `periods` before the workers start (the trainer from its
    /// `[schedule]`, `LocalUpdates(lr_at=…)` from its function), so every
    /// copy of the schedule, and a resume, read the same periods.
    Qsr {
        /// α, the growth coefficient (QSR's; its paper's values lie
        /// between 0.01 and 0.25 for SGD and AdamW).
        alpha: f64,
        /// The resolved segments, `[first boundary, period]` each,
        /// ascending, the first at the synchronous phase's end; empty until
        /// resolved.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        periods: Vec<[u64; 2]>,
    },
}

impl PeriodRule {
    /// QSR's rule (`alpha`), unresolved.
    pub fn qsr(alpha: f64) -> Self {
        Self::Qsr { alpha, periods: Vec::new() }
    }

    /// The rule with QSR's periods worked out for a run whose rounds begin
    /// at step `first` with base period `h` and end by step `horizon`, the
    /// inner learning rate at a step being `lr(step)`; other rules as they
    /// are. Consecutive equal periods make one segment; a learning rate of
    /// 0 (a schedule's end) gives a period that outlasts the run.
    pub fn resolve(&self, h: u64, first: u64, horizon: u64, lr: &dyn Fn(u64) -> f64) -> Self {
        let Self::Qsr { alpha, .. } = self else { return self.clone() };
        let h = h.max(1);
        let mut periods: Vec<[u64; 2]> = Vec::new();
        let mut b = first;
        loop {
            let eta = lr(b);
            let grown = if eta > 0.0 { (alpha / eta).powi(2).ceil() } else { f64::INFINITY };
            // `as` saturates; a period past the horizon is cut to end one step after it.
            let period = h.max(grown as u64).min(horizon.saturating_sub(b).max(h) + 1);
            if periods.last().is_none_or(|&[_, p]| p != period) {
                periods.push([b, period]);
            }
            b = b.saturating_add(period);
            if b >= horizon {
                break;
            }
        }
        Self::Qsr { alpha: *alpha, periods }
    }

    /// Whether the rule's periods are known without a learning-rate
    /// schedule (all but an unresolved QSR).
    pub fn resolved(&self) -> bool {
        !matches!(self, Self::Qsr { periods, .. } if periods.is_empty())
    }
}

/// `strategy.plan`: whether the keys of local updates are the ones given,
/// or chosen by the performance model before the run (`auto`,
/// ALGORITHMS.md §2.5: the synchronous phase, H, fragments, τ, the change's
/// route and the outer optimizer, each decision printed with its reason).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanChoice {
    /// The configuration's own keys.
    #[default]
    Given,
    /// Chosen from the measured step and the link (`crate::auto_plan`);
    /// resolved to `given` keys before any worker starts.
    Auto,
}
