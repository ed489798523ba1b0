//! When outer rounds happen and over which part of the model: the
//! schedule of each Streaming fragment's start and merge (a function of the
//! step alone, ALGORITHMS.md §2.2: torchft's), and the fragments' cut.

use std::ops::Range;

use crate::config::{PeriodRule, StrategyConfig};

/// When each fragment's rounds start and merge: a function of the step
/// alone, which a front may query without touching the rounds.
///
/// The periods follow the run's [`PeriodRule`] as segments of equal
/// period: segment k begins at the boundary `starts[k]` (the first, the end
/// of the synchronous phase) and its periods last `periods[k]` steps; a
/// doubling at step a begins a segment at the first boundary at or after a.
/// Fragment p of a period of H steps merges (p+1)·H/P steps into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OuterSchedule {
    delay: u64,
    /// S synchronous steps before the rounds: step S records θ_outer.
    warmup: u64,
    /// The fragments' count P.
    parts: u64,
    /// Each segment's first boundary (ascending; the first is `warmup`).
    starts: Vec<u64>,
    /// Each segment's period.
    periods: Vec<u64>,
    /// The periods set while the run went ([`OuterSchedule::set_period_from`]),
    /// `[boundary, period]` in order: a checkpoint's, replayed on resume.
    decided: Vec<[u64; 2]>,
}

impl OuterSchedule {
    /// The schedule `st` describes (one fragment ending every H steps when
    /// it has no `fragments`: plain averaging's rounds).
    pub fn new(st: &StrategyConfig) -> Self {
        let warmup = st.sync_steps();
        let period = st.period.max(1);
        let (mut starts, mut periods) = (vec![warmup], vec![period]);
        if let PeriodRule::Qsr { periods: segments, .. } = &st.period_rule {
            // Resolved before the workers start (PeriodRule::resolve); the
            // first segment begins where the rounds do (validated).
            if let Some(&[_, h0]) = segments.first() {
                periods[0] = h0;
            }
            for &[b, h] in segments.iter().skip(1) {
                starts.push(b);
                periods.push(h);
            }
        }
        if let PeriodRule::Doubling { at } = &st.period_rule {
            for &a in at {
                let (s, h) = (*starts.last().expect("one segment"), *periods.last().expect("one segment"));
                let boundary = if a <= s { s } else { s + (a - s).div_ceil(h) * h };
                if boundary == s {
                    // A doubling at the segment's own start doubles it.
                    *periods.last_mut().expect("one segment") = 2 * h;
                } else {
                    starts.push(boundary);
                    periods.push(2 * h);
                }
            }
        }
        Self { delay: st.delay, warmup, parts: st.fragments.max(1), starts, periods, decided: Vec::new() }
    }

    /// The period in force at `step` (that of the period that ends at or
    /// after it; the first before the rounds begin).
    pub fn period_at(&self, step: u64) -> u64 {
        self.periods[self.segment(step)]
    }

    /// The segment whose periods hold `step` as a merge: the last that
    /// begins before it (a segment's first boundary ends the last period of
    /// the segment before).
    fn segment(&self, step: u64) -> usize {
        self.starts.partition_point(|&s| s < step).saturating_sub(1)
    }

    /// Fragment `p`'s merge within a period of `h` steps.
    fn offset(&self, p: usize, h: u64) -> u64 {
        (p as u64 + 1) * h / self.parts
    }

    /// Whether fragment `p`'s round's result is merged at `step`: at
    /// b + o_p + k·H within a segment beginning at boundary b, if its start
    /// τ steps earlier is a step after the rounds' first (the starting
    /// model is recorded at the phase's end).
    pub(crate) fn merges(&self, p: usize, step: u64) -> bool {
        if step <= self.warmup + self.delay {
            return false;
        }
        let k = self.segment(step);
        let (b, h) = (self.starts[k], self.periods[k]);
        let o = self.offset(p, h);
        step - b >= o && (step - b - o).is_multiple_of(h)
    }

    /// Whether fragment `p`'s round starts at `step`: τ steps before its merge.
    pub(crate) fn starts(&self, p: usize, step: u64) -> bool {
        self.merges(p, step + self.delay)
    }

    /// Whether anything happens at `step`: the first round, a start or a merge.
    pub fn due(&self, step: u64) -> bool {
        step == self.warmup || (0..self.parts as usize).any(|p| self.starts(p, step) || self.merges(p, step))
    }

    /// Whether `step` starts a round (a collective) on any fragment; the
    /// first (step 0, or the synchronous phase's last) records the starting model.
    pub fn starts_any(&self, step: u64) -> bool {
        step == self.warmup || (0..self.parts as usize).any(|p| self.starts(p, step))
    }

    /// Whether a round's result is merged at `step` on any fragment.
    pub fn merges_any(&self, step: u64) -> bool {
        step > self.warmup && (0..self.parts as usize).any(|p| self.merges(p, step))
    }

    /// Periods of `h` from boundary `b` on, in place of whatever the rule
    /// gave after it (a plan decided again while the run goes,
    /// `auto_plan::replan_period`). `b` must end a period (or begin the
    /// rounds) at or after the last change, and every fragment's round must
    /// start after it under both periods (τ·P < H), so no round is in
    /// flight across the change; the error says which is not so.
    pub fn set_period_from(&mut self, b: u64, h: u64) -> Result<(), String> {
        let ends = b == self.warmup || self.period_ended(b).is_some();
        if !ends || self.decided.last().is_some_and(|&[d, _]| b < d) {
            return Err(format!("step {b} is not a period's end at or after the last change"));
        }
        let old = self.period_at(b + 1);
        if self.delay * self.parts >= old.min(h) || h < self.parts {
            return Err(format!(
                "a period of {h} from step {b}: each of {} fragments' rounds, {} step(s) early, would be in flight across it",
                self.parts, self.delay
            ));
        }
        // Segments from b on give way to one of period h.
        let keep = self.starts.partition_point(|&s| s < b);
        self.starts.truncate(keep.max(1));
        self.periods.truncate(keep.max(1));
        if keep == 0 {
            self.periods[0] = h;
        } else {
            self.starts.push(b);
            self.periods.push(h);
        }
        self.decided.push([b, h]);
        Ok(())
    }

    /// The periods set while the run went, `[boundary, period]` in order.
    pub fn decided(&self) -> &[[u64; 2]] {
        &self.decided
    }

    /// Which period ends at `step` (1 for the first after the synchronous
    /// phase), if one does: where the last fragment's round merges with no
    /// delay, the whole model's last.
    pub fn period_ended(&self, step: u64) -> Option<u64> {
        if step <= self.warmup {
            return None;
        }
        let k = self.segment(step);
        let (b, h) = (self.starts[k], self.periods[k]);
        if !(step - b).is_multiple_of(h) {
            return None;
        }
        let before: u64 = (0..k).map(|j| (self.starts[j + 1] - self.starts[j]) / self.periods[j]).sum();
        Some(before + (step - b) / h)
    }

    /// The first step at or after `step` at which a round starts.
    pub fn next_start(&self, step: u64) -> u64 {
        let horizon = self.period_at(step + self.delay) + self.delay + self.warmup + 1;
        (step..step + horizon).find(|&t| self.starts_any(t)).unwrap_or(step)
    }

    /// Whether the step taken after `step` steps is in the synchronous
    /// phase, whose gradients the workers exchange every step.
    pub fn warming(&self, step: u64) -> bool {
        step < self.warmup
    }

    /// The steps of the synchronous phase before the rounds.
    pub fn sync_steps(&self) -> u64 {
        self.warmup
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
