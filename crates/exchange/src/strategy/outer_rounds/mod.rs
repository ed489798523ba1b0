//! The outer rounds of local steps (ALGORITHMS.md §2.1): every `period` H
//! steps a worker's change goes out (its model change since the
//! last round, densely or through a compressor with error feedback), the
//! outer optimizer moves the shared model θ_outer by the workers' average,
//! and the worker takes θ_outer back. DiLoCo is this with Nesterov;
//! CELGC's compressed averaging is it with `sgd` at lr 1.
//!
//! Streaming DiLoCo (Douillard et al. 2025) splits the model into
//! `fragments` P, contiguous runs of whole tensors of about equal size.
//! Fragment p's rounds end (merge) at the steps t ≥ o_p with
//! (t − o_p) mod H = 0, where o_p = ⌊(p+1)·H/P⌋, and start `delay` τ steps
//! earlier: the change is taken at t − τ and the result merged at t
//! as θ_p ← α·θ_p + (1 − α)·θ_outer,p (`mix` α; α = 0 adopts θ_outer),
//! computed as torch's `lerp`. This is torchft's `DiLoCo` schedule (its
//! fragment p is performed at (p+1)·H/P + kH and prepared τ steps before),
//! checked against its vectors (tests/diloco_reference.rs); a round whose
//! start would fall before step 1 is left out (torchft refuses τ ≥ H/P).
//!
//! A round is split in two so a front can run the first half while the
//! next τ inner steps compute: [`OuterRounds::start`] (form the change from
//! a snapshot of the model, exchange it, step θ_outer) touches only the
//! rounds' own buffers and the collective; [`OuterRounds::merge`] touches
//! only the model. Which fragments start or merge at a step follows from
//! the step alone, so a checkpoint between steps needs no record of a
//! round in flight once its start has finished.
//!
//! Eager and delayed outer steps (`overlap`, ALGORITHMS.md §2.3) split it
//! the other way: [`OuterRounds::step_ahead`] takes the outer step on the
//! last round's average (eager: with the worker's fresh change standing in
//! for its own part of it) and adopts θ_outer, locally; the start then only
//! exchanges the change, and its average waits for the next round.
//!
//! Eager rounds per fragment (`overlap = "eager"` with a delay τ ≥ 1, the
//! eager Streaming DiLoCo of Kale et al. 2025, arXiv 2502.12996): the start
//! only averages the change c_m taken at t − τ; the merge at t steps the
//! fragment's θ_m on c̄ − c_m/M + c'_m/M, the worker's fresh change c'_m
//! (the τ steps since included) standing in for its stale own part, and
//! adopts θ_m, locally.

use std::ops::Range;

use gradcomp_comm::{Collective, Flagged};
use gradcomp_compress::reduce::first_nonfinite;
use gradcomp_compress::StateError;

use super::outer_optimizer::OuterOptimizer;
use super::outer_schedule::{partition, OuterSchedule};
use crate::config::Overlap;
use crate::config::{ConfigError, DataParallelConfig};
use crate::error::ExchangeError;
use crate::grad_stages::CompleteGrad;
use crate::layout::GradientLayout;
use crate::state::{read_renamed, with_change_scope, ANCHOR_KEY, CHANGE_SCOPE, OWN_KEY, PENDING_KEY};
use crate::{Gradient, GradientExchange, StateBuffers, StepInput, Unit};

/// One fragment: its place in the flat model, its exchange and its outer
/// optimizer (whose momentum covers the fragment only).
struct Fragment {
    range: Range<usize>,
    /// `None`: the change is averaged densely.
    exchange: Option<GradientExchange>,
    outer: OuterOptimizer,
}

/// Every fragment's rounds, and θ_outer.
pub struct OuterRounds {
    fragments: Vec<Fragment>,
    /// Every fragment's units, at their offsets in the whole model.
    units: Vec<Unit>,
    schedule: OuterSchedule,
    mix: f32,
    /// θ_outer: the shared model, identical on every worker; empty until
    /// the first round records the starting model.
    anchor: Vec<f32>,
    /// This worker's change θ_local − θ_outer, and the workers' average of
    /// it (with `overlap`: the last round's, until the next step ahead).
    delta: Vec<f32>,
    averaged: Vec<f32>,
    overlap: Overlap,
    /// Eager: this worker's share c_m/M of the change in the last round.
    own: Vec<f32>,
    /// Eager rounds per fragment (eager with τ ≥ 1): the outer step is the
    /// merge's, on the fresh change.
    eager_merge: bool,
    /// Of those, 1/M of the round in flight: the share of a fresh change
    /// (after a resume, 1/M of the workers the rounds were built for: no
    /// manager, whose rounds may have fewer contributors, runs them).
    share: f32,
    /// The most workers a round may have (the codes' sum width is theirs).
    workers: usize,
    /// How many of the next round's workers contribute a change (the
    /// others, just healed from a peer, send a zero one): the average
    /// divides by them. `None`: every worker ([`OuterRounds::set_contributors`]).
    contributors: Option<usize>,
}

impl OuterRounds {
    /// The rounds `cfg.strategy` describes for a model of `layout` among
    /// `workers`; `compress`: send the change through `cfg`'s compressor
    /// (`compress_change`), each fragment's with its own random stream.
    /// Errors (key `strategy.fragments`) if the model has fewer tensors than
    /// fragments.
    pub fn new(
        cfg: &DataParallelConfig,
        layout: &GradientLayout,
        workers: usize,
        compress: bool,
    ) -> Result<Self, ConfigError> {
        let st = &cfg.strategy;
        let slots = layout.slots();
        let parts = st.fragments.max(1) as usize;
        if parts > slots.len().max(1) {
            return Err(ConfigError::new(
                "strategy.fragments",
                format!(
                    "{parts} fragments of a model of {} tensors: a fragment holds whole tensors; at most {}",
                    slots.len(),
                    slots.len()
                ),
            ));
        }
        let lens: Vec<usize> = slots.iter().map(|s| s.len).collect();
        let groups =
            if slots.is_empty() { vec![Range { start: 0, end: 0 }] } else { partition(&lens, parts) };
        let mut units = Vec::new();
        let mut fragments = Vec::with_capacity(parts);
        for (p, g) in groups.into_iter().enumerate() {
            let start = slots.get(g.start).map_or(0, |s| s.offset);
            let end = g.clone().last().map_or(start, |j| slots[j].offset + slots[j].len);
            // The model delta's random stream differs from a gradient
            // exchange's, and each fragment's from the others'.
            let seed = cfg.seed ^ 0xCE16C ^ ((p as u64) << 40);
            let exchange = compress.then(|| {
                let sub =
                    GradientLayout::new(slots[g.clone()].iter().map(|s| (s.name.clone(), s.shape.clone())));
                GradientExchange::new(&sub, cfg, workers, seed)
            });
            if let Some(e) = &exchange {
                units.extend(e.units().iter().map(|u| Unit { offset: u.offset + start, ..u.clone() }));
            }
            fragments.push(Fragment { range: start..end, exchange, outer: OuterOptimizer::new(st.outer()) });
        }
        Ok(Self {
            fragments,
            units,
            schedule: OuterSchedule::new(st),
            mix: st.mix() as f32,
            anchor: Vec::new(),
            delta: Vec::new(),
            averaged: Vec::new(),
            overlap: if st.delay > 0 { Overlap::None } else { st.overlap },
            own: Vec::new(),
            eager_merge: st.overlap == Overlap::Eager && st.delay > 0,
            share: 1.0 / workers.max(1) as f32,
            workers,
            contributors: None,
        })
    }

    /// The next round's average divides by `contributors` workers' changes,
    /// not by its whole group: under membership a worker healed from a
    /// peer just before the round holds θ_outer, so its change is zero and
    /// it contributes nothing (every worker passes the same number).
    pub fn set_contributors(&mut self, contributors: usize) {
        self.contributors = Some(contributors);
    }

    /// When the rounds start and merge.
    pub fn schedule(&self) -> &OuterSchedule {
        &self.schedule
    }

    /// Replaces the schedule (a period decided again while the run goes).
    pub(crate) fn set_schedule(&mut self, schedule: OuterSchedule) {
        self.schedule = schedule;
    }

    /// Whether a merge takes the whole model with nothing mixed in, after
    /// which every worker holds θ_outer (not under eager outer steps, whose
    /// θ_m is each worker's own).
    pub fn merges_whole(&self) -> bool {
        self.fragments.len() == 1 && self.mix == 0.0 && self.overlap != Overlap::Eager && !self.eager_merge
    }

    /// Whether θ_outer has been recorded for a model of `len` values (the
    /// first round has been).
    pub fn anchored(&self, len: usize) -> bool {
        self.anchor.len() == len
    }

    /// The first half of the rounds due at `step`, on `params` as they are
    /// at `step` (a snapshot, if the caller goes on stepping): each starting
    /// fragment's change is averaged across workers and its outer optimizer
    /// steps θ_outer. At the first call it records `params` as θ_outer.
    /// Every worker calls it at the same steps (it runs collectives).
    pub fn start(&mut self, step: u64, params: &[f32], c: &mut dyn Collective) -> Result<(), ExchangeError> {
        if self.anchor.len() != params.len() {
            // The first round: every worker starts from the same model.
            self.anchor = params.to_vec();
            self.delta = vec![0.0; params.len()];
            self.averaged = vec![0.0; params.len()];
            self.own = if self.overlap == Overlap::Eager || self.eager_merge {
                vec![0.0; params.len()]
            } else {
                Vec::new()
            };
            return Ok(());
        }
        let starting: Vec<usize> =
            (0..self.fragments.len()).filter(|&p| self.schedule.starts(p, step)).collect();
        if starting.is_empty() {
            return Ok(());
        }
        let ahead = self.overlap.whole_period();
        if !ahead {
            for &p in &starting {
                let r = self.fragments[p].range.clone();
                for ((o, x), a) in
                    self.delta[r.clone()].iter_mut().zip(&params[r.clone()]).zip(&self.anchor[r])
                {
                    *o = x - a;
                }
            }
        }
        self.average_changes(step, &starting, c)?;
        if self.eager_merge {
            // The outer step waits for the merge and the fresh change.
            for &p in &starting {
                let r = self.fragments[p].range.clone();
                let share = self.share;
                self.own[r.clone()].iter_mut().zip(&self.delta[r]).for_each(|(o, c)| *o = c * share);
            }
        } else if !ahead {
            for &p in &starting {
                let f = &mut self.fragments[p];
                let r = f.range.clone();
                f.outer.apply(&mut self.anchor[r.clone()], &self.averaged[r]);
            }
        }
        Ok(())
    }

    /// The workers' average of the `starting` fragments' changes into
    /// `averaged` (divided by the contributors), densely or through each
    /// fragment's exchange. A worker whose travelling fragments hold a
    /// non-finite value says so inside the round's first collective: every
    /// worker learns it there and refuses the round, its memories restored,
    /// before any outer step is applied. (The change is the model less a
    /// finite θ_outer.)
    fn average_changes(
        &mut self,
        step: u64,
        starting: &[usize],
        c: &mut dyn Collective,
    ) -> Result<(), ExchangeError> {
        let bad =
            starting.iter().any(|&p| first_nonfinite(&self.delta[self.fragments[p].range.clone()]).is_some());
        let mut flagged = Flagged::new(c, bad);
        // The compressed fragments' memories as they were, restored if the
        // round is refused (the exchange updates them on its way).
        let mut memories = StateBuffers::new();
        for &p in starting {
            if let Some(e) = &self.fragments[p].exchange {
                e.state(&format!("{p}."), &mut memories)?;
            }
        }
        let workers = flagged.world_size();
        let contributors = self.contributors.take().unwrap_or(workers);
        if workers > self.workers || contributors == 0 || contributors > workers {
            return Err(ExchangeError::Usage(format!(
                "the outer round at step {step} has {workers} workers of whom {contributors} contribute a change; \
                 these rounds were built for at most {} workers and need at least one contribution",
                self.workers
            )));
        }
        let n = workers as f32;
        // The exchange's mean divides by the round's workers; a worker that
        // contributes no change does not count (`set_contributors`).
        let rescale = workers as f32 / contributors as f32;
        self.share = 1.0 / contributors as f32;
        for &p in starting {
            let f = &mut self.fragments[p];
            let r = f.range.clone();
            let (delta, averaged) = (&mut self.delta[r.clone()], &mut self.averaged[r]);
            match &mut f.exchange {
                Some(e) => {
                    let input = StepInput { step, lr: 1.0, loss: None, measure: false };
                    e.exchange(Gradient::Host(&mut CompleteGrad(delta)), &input, averaged, &mut flagged)?;
                }
                None => {
                    averaged.copy_from_slice(delta);
                    flagged.allreduce_sum_f32(averaged)?;
                    averaged.iter_mut().for_each(|v| *v /= n);
                }
            }
        }
        let ranks = flagged.flagged()?;
        if !ranks.is_empty() {
            for &p in starting {
                if let Some(e) = &mut self.fragments[p].exchange {
                    e.restore(&format!("{p}."), &memories)
                        .map_err(|e| ExchangeError::Usage(e.to_string()))?;
                }
            }
            return Err(ExchangeError::NonFiniteModel { step, ranks });
        }
        if rescale != 1.0 {
            for &p in starting {
                self.averaged[self.fragments[p].range.clone()].iter_mut().for_each(|v| *v *= rescale);
            }
        }
        Ok(())
    }

    /// Whether the rounds step ahead (eager or delayed outer steps): the
    /// change is taken by [`OuterRounds::step_ahead`], not by the start.
    pub fn steps_ahead(&self) -> bool {
        self.overlap.whole_period()
    }

    /// Eager and delayed outer steps (ALGORITHMS.md §2.3), at a round's step
    /// before its [`OuterRounds::start`]: records this worker's change
    /// c_m = θ_local − θ_m for the start to exchange, steps θ_m on
    /// G = (c̄ − o) + c_m/M (eager; o the last round's c_m/M) or on c̄
    /// (delayed), c̄ the last round's average (zero before any), and adopts
    /// θ_m into `params`. Local; `workers` M is the starting round's.
    /// Nothing without `overlap` or before the first round.
    pub fn step_ahead(&mut self, params: &mut [f32], workers: usize) {
        if !self.overlap.whole_period() || self.anchor.len() != params.len() {
            return;
        }
        let m = workers as f32;
        let eager = self.overlap == Overlap::Eager;
        for (j, (c, x)) in self.delta.iter_mut().zip(params.iter()).enumerate() {
            *c = x - self.anchor[j];
            if eager {
                // In place: the average is overwritten by this round's start.
                let own = *c / m;
                self.averaged[j] = (self.averaged[j] - self.own[j]) + own;
                self.own[j] = own;
            }
        }
        let f = &mut self.fragments[0];
        f.outer.apply(&mut self.anchor, &self.averaged);
        params.copy_from_slice(&self.anchor);
    }

    /// The second half: every fragment whose round's result is due at
    /// `step` takes θ_outer into `params` (α·θ + (1 − α)·θ_outer); eager
    /// rounds per fragment first step θ_outer on the average with the fresh
    /// change in place of the stale own part. Local.
    pub fn merge(&mut self, step: u64, params: &mut [f32]) {
        if self.anchor.len() != params.len() || self.overlap.whole_period() {
            return;
        }
        for (p, f) in self.fragments.iter_mut().enumerate() {
            if step == 0 || !self.schedule.merges(p, step) {
                continue;
            }
            if self.eager_merge {
                let r = f.range.clone();
                let g = &mut self.averaged[r.clone()];
                for (((g, o), x), a) in g
                    .iter_mut()
                    .zip(&self.own[r.clone()])
                    .zip(&params[r.clone()])
                    .zip(&self.anchor[r.clone()])
                {
                    *g = (*g - o) + (x - a) * self.share;
                }
                f.outer.apply(&mut self.anchor[r.clone()], &self.averaged[r]);
            }
            let (x, a) = (&mut params[f.range.clone()], &self.anchor[f.range.clone()]);
            let alpha = self.mix;
            if alpha == 0.0 {
                x.copy_from_slice(a);
            } else {
                lerp(x, a, alpha);
            }
        }
    }

    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    pub fn set_density(&mut self, rho: f64) {
        self.fragments.iter_mut().filter_map(|f| f.exchange.as_mut()).for_each(|e| e.set_density(rho));
    }

    /// State keys: `outer.anchor` (θ_outer), the outer momentum and the
    /// compressors' memories (`outer.momentum`, `change.` for one fragment;
    /// with `.p` and `change.p.` per fragment p for several; `delta.` read
    /// as `change.`).
    fn keys(&self, p: usize) -> (String, String) {
        if self.fragments.len() == 1 {
            ("outer.momentum".into(), CHANGE_SCOPE.into())
        } else {
            (format!("outer.momentum.{p}"), format!("{CHANGE_SCOPE}{p}."))
        }
    }

    /// With `overlap`, the last round's average and this worker's share of
    /// its change too (`outer.pending`, `outer.own`): the round in flight
    /// has landed by then (the machine's read).
    pub fn state(&self, s: &mut StateBuffers) -> Result<(), ExchangeError> {
        s.insert(ANCHOR_KEY.into(), self.anchor.clone());
        if self.eager_merge {
            s.insert(PENDING_KEY.into(), self.averaged.clone());
            s.insert(OWN_KEY.into(), self.own.clone());
        }
        if self.overlap.whole_period() {
            s.insert(PENDING_KEY.into(), self.averaged.clone());
            if self.overlap == Overlap::Eager {
                s.insert(OWN_KEY.into(), self.own.clone());
            }
        }
        for (p, f) in self.fragments.iter().enumerate() {
            let (momentum, delta) = self.keys(p);
            f.outer.state(&momentum, s);
            if let Some(e) = &f.exchange {
                e.state(&delta, s)?;
            }
        }
        Ok(())
    }

    pub fn restore(&mut self, s: &StateBuffers) -> Result<(), StateError> {
        let s = &*with_change_scope(s);
        let a = read_renamed(s, ANCHOR_KEY)?;
        let total = self.fragments.last().map_or(0, |f| f.range.end);
        if !a.is_empty() && total > 0 && a.len() != total {
            let buffer = format!("the shared model θ_outer ({ANCHOR_KEY})");
            return Err(StateError::Length { buffer, expected: total, got: a.len() });
        }
        self.anchor.clone_from(a);
        self.delta = vec![0.0; a.len()];
        self.averaged = vec![0.0; a.len()];
        if self.eager_merge {
            self.averaged = self.overlapped(s, PENDING_KEY, "the rounds' averages in flight")?;
            self.own = self.overlapped(s, OWN_KEY, "this worker's share of its changes in flight")?;
        }
        if self.overlap.whole_period() {
            self.averaged = self.overlapped(s, PENDING_KEY, "the last round's average")?;
            self.own = match self.overlap {
                Overlap::Eager => self.overlapped(s, OWN_KEY, "this worker's share of its last change")?,
                _ => Vec::new(),
            };
        }
        for p in 0..self.fragments.len() {
            let (momentum, delta) = self.keys(p);
            let f = &mut self.fragments[p];
            f.outer.restore(&momentum, s, f.range.len())?;
            if let Some(e) = &mut f.exchange {
                e.restore(&delta, s)?;
            }
        }
        Ok(())
    }
}

impl OuterRounds {
    /// Buffer `key` of an overlapped round's state (`what` names it),
    /// as long as θ_outer (empty before the first round).
    fn overlapped(&self, s: &StateBuffers, key: &str, what: &str) -> Result<Vec<f32>, StateError> {
        let b = s.get(key).ok_or_else(|| StateError::Missing { buffer: key.into() })?;
        if b.len() != self.anchor.len() {
            let buffer = format!("{what} ({key})");
            return Err(StateError::Length { buffer, expected: self.anchor.len(), got: b.len() });
        }
        Ok(b.clone())
    }
}

gradcomp_compress::multiversion! {
    /// x ← torch's lerp(a, x, α) = a + α·(x − a), fused as its CPU kernel
    /// is (from the nearer end: x − (1 − α)·(x − a) when α ≥ 0.5); one
    /// instruction per value where the CPU has FMA, libm's `fmaf` otherwise,
    /// the same bits either way.
    fn lerp(x: &mut [f32], a: &[f32], alpha: f32) {
        if alpha < 0.5 {
            x.iter_mut().zip(a).for_each(|(x, &a)| *x = alpha.mul_add(*x - a, a));
        } else {
            let beta = -(1.0 - alpha);
            x.iter_mut().zip(a).for_each(|(x, &a)| *x = beta.mul_add(*x - a, *x));
        }
    }
}

#[cfg(test)]
mod tests;
