//! When outer rounds happen and over which part of the model: the
//! schedule of each Streaming fragment's start and merge (a function of the
//! step alone, ALGORITHMS.md §2.2: torchft's), and the fragments' cut.

use std::ops::Range;

use crate::config::StrategyConfig;

/// When each fragment's rounds start and merge: a function of the step
/// alone, which a front may query without touching the rounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OuterSchedule {
    period: u64,
    delay: u64,
    /// S synchronous steps before the rounds: step S records θ_outer.
    warmup: u64,
    /// o_p per fragment: the step of its first merge.
    pub(crate) offsets: Vec<u64>,
}

impl OuterSchedule {
    /// The schedule `st` describes (one fragment ending every H steps when
    /// it has no `fragments`: plain averaging's rounds).
    pub fn new(st: &StrategyConfig) -> Self {
        let parts = st.fragments.max(1);
        let offsets = (1..=parts).map(|p| p * st.period / parts).collect();
        Self { period: st.period, delay: st.delay, warmup: st.warmup_steps, offsets }
    }

    /// Whether fragment `p`'s round's result is merged at `step`: at
    /// t ≥ o_p with (t − o_p) mod H = 0, if its start τ steps earlier is a
    /// step (≥ 1; the starting model is recorded at step 0).
    /// Steps count from the end of the warm-up.
    pub(crate) fn merges(&self, p: usize, step: u64) -> bool {
        let Some(step) = step.checked_sub(self.warmup) else { return false };
        let o = self.offsets[p];
        step >= o && (step - o).is_multiple_of(self.period) && step > self.delay
    }

    /// Whether fragment `p`'s round starts at `step`: τ steps before its merge.
    pub(crate) fn starts(&self, p: usize, step: u64) -> bool {
        self.merges(p, step + self.delay)
    }

    /// Whether anything happens at `step`: the first round, a start or a merge.
    pub fn due(&self, step: u64) -> bool {
        step == self.warmup || (0..self.offsets.len()).any(|p| self.starts(p, step) || self.merges(p, step))
    }

    /// Whether `step` starts a round (a collective) on any fragment; the
    /// first (step 0, or the warm-up's last) records the starting model.
    pub fn starts_any(&self, step: u64) -> bool {
        step == self.warmup || (0..self.offsets.len()).any(|p| self.starts(p, step))
    }

    /// Whether a round's result is merged at `step` on any fragment.
    pub fn merges_any(&self, step: u64) -> bool {
        step > self.warmup && (0..self.offsets.len()).any(|p| self.merges(p, step))
    }

    /// Whether the step taken after `step` steps is a warm-up step, whose
    /// gradient every worker averages (synchronous data parallel).
    pub fn warming(&self, step: u64) -> bool {
        step < self.warmup
    }
}

/// Splits tensors of lengths `lens` into `parts` contiguous groups of about
/// equal total length: group k ends at the tensor boundary nearest to
/// (k+1)/parts of the total, leaving every group at least one tensor.
pub(crate) fn partition(lens: &[usize], parts: usize) -> Vec<Range<usize>> {
    let total: usize = lens.iter().sum();
    let ends: Vec<usize> = lens
        .iter()
        .scan(0, |sum, &l| {
            *sum += l;
            Some(*sum)
        })
        .collect();
    let mut groups = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..parts {
        let target = (total as f64) * k as f64 / parts as f64;
        // The boundary after tensor j (exclusive end j + 1), kept so that
        // this group has a tensor and each later group one too.
        let last_end = lens.len() - (parts - k);
        let end = (start + 1..=last_end)
            .min_by(|&a, &b| {
                let da = (ends[a - 1] as f64 - target).abs();
                let db = (ends[b - 1] as f64 - target).abs();
                da.total_cmp(&db)
            })
            .unwrap_or(start + 1);
        groups.push(start..end);
        start = end;
    }
    groups.push(start..lens.len());
    groups
}
