//! The training loop's own options (`[train]`): how long, what it
//! measures, when it evaluates and checkpoints.

use gradcomp_dp::OnNonFinite;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopConfig {
    pub epochs: u32,
    /// Stop after this many steps in all (0: no limit).
    pub max_steps: u64,
    /// Compare a parameter checksum across workers every this many steps (0: never).
    pub checksum_every: u64,
    pub on_nonfinite: OnNonFinite,
    /// Write a checkpoint at the end of every this many epochs (0: only on
    /// a signal). Its old name `checkpoint_every` still reads.
    #[serde(alias = "checkpoint_every")]
    pub checkpoint_every_epochs: u32,
    /// Also write one every this many steps within an epoch (0: none), in
    /// the background: the state is copied at the step and written while
    /// training goes on, so a lost worker costs at most this many steps.
    pub checkpoint_every_steps: u64,
    /// Measure the contraction ratio and gradient histogram every this many steps (0: never).
    pub stats_every: u64,
    /// Evaluate on the test set after every epoch.
    pub eval: bool,
    /// Also evaluate every this many steps within an epoch (0: at epoch
    /// ends only); every evaluation is a line of `evals.jsonl`, with the
    /// cumulative measured and predicted wall-clock (time to accuracy).
    pub eval_every: u64,
    /// Stop the run at the first evaluation whose test accuracy (a fraction,
    /// e.g. 0.98) reaches this (image tasks).
    pub target_accuracy: Option<f64>,
    /// Stop the run at the first evaluation whose test perplexity is at or
    /// below this (language models): their time to accuracy.
    pub target_perplexity: Option<f64>,
    /// Keep this many of the newest checkpoints, deleting older ones (0: keep all).
    pub keep_checkpoints: u32,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            epochs: 1,
            max_steps: 0,
            checksum_every: 50,
            on_nonfinite: OnNonFinite::Stop,
            checkpoint_every_epochs: 1,
            checkpoint_every_steps: 0,
            stats_every: 50,
            eval: true,
            eval_every: 0,
            target_accuracy: None,
            target_perplexity: None,
            keep_checkpoints: 3,
        }
    }
}
