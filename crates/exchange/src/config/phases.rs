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
