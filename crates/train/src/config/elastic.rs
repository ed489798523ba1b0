//! What a resume with another number of workers does (`[elastic]`, issue
//! #27): whether it may, what becomes of the state of workers that are
//! gone, and the learning rate after the change.

use serde::{Deserialize, Serialize};

use super::{Average, StrategyKind, TrainConfig};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ElasticConfig {
    /// Refuse a resume with another number of workers: for a run whose
    /// meaning depends on N (a study of N itself).
    pub fixed_workers: bool,
    /// The per-worker state of workers that are gone (error-feedback
    /// residuals, DGC's momentum and velocity): folded into the survivors'
    /// or dropped.
    pub lost_state: LostState,
    /// The learning rate after a change of workers.
    pub lr: ElasticLr,
    /// In-process runs: when a worker is lost (its thread panics), go on
    /// with the others from the latest checkpoint as long as at least this
    /// many remain (0: a lost worker ends the run).
    pub min_workers: usize,
}

/// The per-worker memories of workers that are gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LostState {
    /// Each survivor adds the lost workers' memories, divided by the old
    /// N: the gradient mass they still owed reaches the model as it would
    /// have (its share of the mean over N).
    #[default]
    Fold,
    /// The lost memories are discarded.
    Drop,
}

/// The learning rate after a change from N to N′ workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ElasticLr {
    /// The configured learning rate, whatever N′.
    #[default]
    Keep,
    /// Scaled by N′/N, linear in the global batch (Goyal et al., 2017).
    Linear,
}

impl TrainConfig {
    /// Why this run may not change its number of workers, if it may not:
    /// where N is part of its meaning and a new N would change it silently.
    /// A resume with another N and `gradcomp launch` both ask.
    ///
    /// Local updates (`kind = "local"`) may: a resume with another N
    /// restarts every worker from the shared model θ_outer
    /// ([`TrainConfig::restarts_from_outer_model`]). CELGC may not: its
    /// clipping and averaging period are studied at a fixed N.
    pub fn fixed_workers_reason(&self) -> Option<&'static str> {
        if self.elastic.fixed_workers {
            Some("its configuration fixes them (elastic.fixed_workers = true)")
        } else if self.strategy.kind == StrategyKind::ClippedAveraging {
            Some("CELGC (kind = \"celgc\") keeps each worker's own model, and its compressor memory, between rounds and is a study at its N (its clipping γ and period I are tuned for it); kind = \"local\" restarts every worker from the shared model θ_outer instead")
        } else {
            None
        }
    }

    /// Whether a resume with another number of workers restarts every
    /// worker from the shared model of the outer rounds (local updates that
    /// average models, `kind = "local"`): the workers' own models differ
    /// between rounds, so none of them is the run's model. Their memories
    /// are reset, whatever `lost_state` says (docs/RELIABILITY.md).
    pub fn restarts_from_outer_model(&self) -> bool {
        self.strategy.kind == StrategyKind::Local && self.strategy.average == Average::Models
    }
}
