//! The model rounds of local steps (ALGORITHMS.md §2.1): every `period` H
//! steps a worker's pseudo-gradient goes out (its model change since the
//! last round, densely or through a compressor with error feedback), the
//! outer optimizer moves the shared model θ_outer by the workers' average,
//! and the worker takes θ_outer back. DiLoCo is this with Nesterov;
//! CELGC's compressed averaging is it with `sgd` at lr 1.
//!
//! Streaming DiLoCo (Douillard et al. 2025) splits the model into
//! `fragments` P, contiguous runs of whole tensors of about equal size.
//! Fragment p's rounds end (merge) at the steps t ≥ o_p with
//! (t − o_p) mod H = 0, where o_p = ⌊(p+1)·H/P⌋, and start `delay` τ steps
//! earlier: the pseudo-gradient is taken at t − τ and the result merged at t
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
use crate::state::{read_renamed, ANCHOR_KEY, OWN_KEY, PENDING_KEY};
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
    /// (`compress_delta`), each fragment's with its own random stream.
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
            overlap: st.overlap,
            own: Vec::new(),
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

    /// Whether a merge takes the whole model with nothing mixed in, after
    /// which every worker holds θ_outer.
    pub fn merges_whole(&self) -> bool {
        self.fragments.len() == 1 && self.mix == 0.0
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
            self.own = if self.overlap == Overlap::Eager { vec![0.0; params.len()] } else { Vec::new() };
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
        // A worker whose travelling fragments hold a non-finite value says
        // so inside the round's first collective: every worker learns it
        // there and refuses the round before any outer step is applied.
        // (The change is the model less a finite θ_outer.)
        let bad =
            starting.iter().any(|&p| first_nonfinite(&self.delta[self.fragments[p].range.clone()]).is_some());
        let mut flagged = Flagged::new(c, bad);
        // The compressed fragments' memories as they were, restored if the
        // round is refused (the exchange updates them on its way).
        let mut memories = StateBuffers::new();
        for &p in &starting {
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
        for &p in &starting {
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
            for &p in &starting {
                if let Some(e) = &mut self.fragments[p].exchange {
                    e.restore(&format!("{p}."), &memories)
                        .map_err(|e| ExchangeError::Usage(e.to_string()))?;
                }
            }
            return Err(ExchangeError::NonFiniteModel { step, ranks });
        }
        for &p in &starting {
            let f = &mut self.fragments[p];
            let r = f.range.clone();
            if rescale != 1.0 {
                self.averaged[r.clone()].iter_mut().for_each(|v| *v *= rescale);
            }
            if !ahead {
                f.outer.apply(&mut self.anchor[r.clone()], &self.averaged[r]);
            }
        }
        Ok(())
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
    /// `step` takes θ_outer into `params` (α·θ + (1 − α)·θ_outer). Local.
    pub fn merge(&self, step: u64, params: &mut [f32]) {
        if self.anchor.len() != params.len() || self.overlap.whole_period() {
            return;
        }
        for (p, f) in self.fragments.iter().enumerate() {
            if step == 0 || !self.schedule.merges(p, step) {
                continue;
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
    /// compressors' memories (`outer.momentum`, `delta.` for one fragment;
    /// with `.p` and `delta.p.` per fragment p for several).
    fn keys(&self, p: usize) -> (String, String) {
        if self.fragments.len() == 1 {
            ("outer.momentum".into(), "delta.".into())
        } else {
            (format!("outer.momentum.{p}"), format!("delta.{p}."))
        }
    }

    /// With `overlap`, the last round's average and this worker's share of
    /// its change too (`outer.pending`, `outer.own`): the round in flight
    /// has landed by then (the machine's read).
    pub fn state(&self, s: &mut StateBuffers) -> Result<(), ExchangeError> {
        s.insert(ANCHOR_KEY.into(), self.anchor.clone());
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
        let a = read_renamed(s, ANCHOR_KEY)?;
        let total = self.fragments.last().map_or(0, |f| f.range.end);
        if !a.is_empty() && total > 0 && a.len() != total {
            let buffer = format!("the shared model θ_outer ({ANCHOR_KEY})");
            return Err(StateError::Length { buffer, expected: total, got: a.len() });
        }
        self.anchor.clone_from(a);
        self.delta = vec![0.0; a.len()];
        self.averaged = vec![0.0; a.len()];
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
mod tests {
    use gradcomp_comm::InProcessGroup;
    use gradcomp_compress::CompressorConfig;

    use super::*;
    use crate::config::{OuterConfig, StrategyConfig, Topology};

    #[test]
    fn fragments_are_contiguous_tensor_runs_of_about_equal_size() {
        assert_eq!(partition(&[10, 10, 10, 10], 2), vec![0..2, 2..4]);
        assert_eq!(partition(&[100, 1, 1, 1], 2), vec![0..1, 1..4]);
        assert_eq!(partition(&[1, 1, 1, 100], 2), vec![0..3, 3..4]);
        assert_eq!(partition(&[5, 5, 5], 3), vec![0..1, 1..2, 2..3]);
        assert_eq!(partition(&[7], 1), vec![0..1]);
        // Every group keeps a tensor even when one tensor dominates.
        assert_eq!(partition(&[1000, 1, 1, 1], 3), vec![0..1, 1..2, 2..4]);
    }

    /// Tensors of 3, 2 and 3 values: two fragments are values 0..3 and 3..8.
    fn layout() -> GradientLayout {
        GradientLayout::new([
            ("a".to_string(), vec![3]),
            ("b".to_string(), vec![2]),
            ("c".to_string(), vec![3]),
        ])
    }

    fn config(st: StrategyConfig) -> DataParallelConfig {
        DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st)
    }

    /// Worker r's own change at inner step t (its inner optimizer's work).
    fn change(r: usize, t: u64, j: usize) -> f32 {
        ((r * 5 + t as usize * 3 + j * 7) % 11) as f32 * 0.0625 - 0.3
    }

    /// Two workers, `steps` inner steps, a round call at every step; every
    /// worker's model after each step. `save_at`: the rounds are saved after
    /// that step and restored into a fresh strategy (a resume).
    fn run(st: &StrategyConfig, steps: u64, save_at: Option<u64>) -> Vec<Vec<Vec<f32>>> {
        let cfg = config(st.clone());
        InProcessGroup::new(2)
            .run(|mut c| {
                let r = c.rank();
                let mut rounds = OuterRounds::new(&cfg, &layout(), 2, false).unwrap();
                let mut params: Vec<f32> = (0..8).map(|j| j as f32 * 0.25 - 1.0).collect();
                let mut seen = Vec::new();
                for t in 0..=steps {
                    if t > 0 {
                        params.iter_mut().enumerate().for_each(|(j, p)| *p += change(r, t, j));
                    }
                    if rounds.schedule().due(t) {
                        rounds.start(t, &params, &mut c).unwrap();
                        rounds.merge(t, &mut params);
                    }
                    seen.push(params.clone());
                    if Some(t) == save_at {
                        let mut s = StateBuffers::new();
                        rounds.state(&mut s).unwrap();
                        rounds = OuterRounds::new(&cfg, &layout(), 2, false).unwrap();
                        rounds.restore(&s).unwrap();
                    }
                }
                seen
            })
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    /// The same in f64, written from the method's description (ALGORITHMS.md
    /// §2.2) rather than the code: fragment p of range `ranges[p]` merges at
    /// t ≥ o_p = ⌊(p+1)·H/P⌋, (t − o_p) mod H = 0, having started at t − τ ≥ 1
    /// with its outer Nesterov step on the averaged change.
    fn reference(h: u64, tau: u64, alpha: f64, ranges: &[Range<usize>], steps: u64) -> Vec<Vec<Vec<f64>>> {
        let (lr, mu) = (0.7, 0.9);
        let p_count = ranges.len() as u64;
        let mut theta: Vec<Vec<f64>> = vec![(0..8).map(|j| j as f64 * 0.25 - 1.0).collect(); 2];
        let mut anchor = theta[0].clone();
        let mut momentum: Vec<Option<Vec<f64>>> = vec![None; ranges.len()];
        let mut seen = vec![vec![]; 2];
        let merges = |p: u64, t: u64| {
            let o = (p + 1) * h / p_count;
            t >= o && (t - o).is_multiple_of(h) && t > tau
        };
        let starts = |p: u64, t: u64| merges(p, t + tau);
        for t in 0..=steps {
            if t > 0 {
                for (r, th) in theta.iter_mut().enumerate() {
                    th.iter_mut().enumerate().for_each(|(j, x)| *x = (*x as f32 + change(r, t, j)) as f64);
                }
            }
            for (p, range) in ranges.iter().enumerate() {
                if starts(p as u64, t) {
                    // c = mean(θ_i − θ_outer) = −Δ̄; torch's SGD on Δ̄ = −c.
                    let c: Vec<f64> =
                        range.clone().map(|j| (theta[0][j] + theta[1][j]) / 2.0 - anchor[j]).collect();
                    let m = match momentum[p].take() {
                        None => c.clone(),
                        Some(m) => m.iter().zip(&c).map(|(m, c)| mu * m + c).collect(),
                    };
                    for (k, j) in range.clone().enumerate() {
                        anchor[j] += lr * (c[k] + mu * m[k]);
                    }
                    momentum[p] = Some(m);
                }
                if merges(p as u64, t) {
                    for th in theta.iter_mut() {
                        range.clone().for_each(|j| th[j] = alpha * th[j] + (1.0 - alpha) * anchor[j]);
                    }
                }
            }
            for (r, th) in theta.iter().enumerate() {
                seen[r].push(th.clone());
            }
        }
        seen
    }

    fn assert_close(got: &[Vec<Vec<f32>>], want: &[Vec<Vec<f64>>], what: &str) {
        for (r, (g, w)) in got.iter().zip(want).enumerate() {
            for (t, (g, w)) in g.iter().zip(w).enumerate() {
                for (j, (g, w)) in g.iter().zip(w).enumerate() {
                    assert!(
                        (f64::from(*g) - w).abs() < 1e-4,
                        "{what}: worker {r} step {t} value {j}: {g} against {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn streaming_rounds_follow_the_schedule_the_outer_step_and_the_mix() {
        let ranges = [0..3, 3..8];
        for (fragments, delay, mix) in
            [(1, 0, None), (2, 0, None), (2, 1, Some(0.5)), (2, 2, Some(0.0)), (2, 3, None)]
        {
            let mut st =
                StrategyConfig::local(4).with_outer(OuterConfig::nesterov()).with_streaming(fragments, delay);
            st.mix = mix;
            let got = run(&st, 13, None);
            let whole = [Range { start: 0, end: 8 }];
            let r: &[Range<usize>] = if fragments == 1 { &whole } else { &ranges };
            let want = reference(4, delay, st.mix(), r, 13);
            assert_close(&got, &want, &format!("P {fragments}, τ {delay}, α {}", st.mix()));
        }
    }

    #[test]
    fn a_resume_inside_an_overlap_continues_bit_for_bit() {
        // P 2, H 4, τ 2: fragment 0 merges at 6, 10 (started at 4, 8; its
        // round ending at 2 would start at 0, left out), fragment 1 at 4, 8,
        // 12 (started at 2, 6, 10). Saving after step 3, 5 or 7 leaves a
        // round between its start and its merge.
        let st = StrategyConfig::local(4).with_streaming(2, 2);
        let whole = run(&st, 13, None);
        for at in [3, 5, 7] {
            assert_eq!(run(&st, 13, Some(at)), whole, "resumed after step {at}");
        }
    }

    #[test]
    fn only_a_whole_unmixed_merge_leaves_the_replicas_equal() {
        use crate::strategy::{LocalUpdates, ModelAveraging};
        let rounds = |st: StrategyConfig| LocalUpdates::new(&config(st), &layout(), 2).unwrap();
        let diloco = rounds(StrategyConfig::local(4));
        assert!(diloco.agrees_after(4) && !diloco.agrees_after(3));
        assert_eq!(diloco.schedule().offsets, vec![4]);
        let streaming = rounds(StrategyConfig::local(8).with_streaming(2, 1));
        assert_eq!(streaming.schedule().offsets, vec![4, 8], "torchft's: fragment p ends at (p+1)·H/P");
        let starts: Vec<u64> = (0..20).filter(|&t| streaming.schedule().starts_any(t) && t > 0).collect();
        let merges: Vec<u64> = (0..20).filter(|&t| streaming.schedule().merges_any(t)).collect();
        assert_eq!((starts, merges), (vec![3, 7, 11, 15, 19], vec![4, 8, 12, 16]));
        assert!(!rounds(StrategyConfig::local(4).with_streaming(2, 0)).agrees_after(4));
        assert!(!rounds(StrategyConfig::local(4).with_streaming(1, 1)).agrees_after(4), "mixed at α 0.5");
        assert!(rounds(StrategyConfig::local(4).with_streaming(1, 1).with_mix(0.0)).agrees_after(4));
        let got = run(&StrategyConfig::local(4), 8, None);
        assert_eq!(got[0][4], got[1][4], "after a DiLoCo round both workers hold θ_outer");
        // Warm-up steps first: θ_outer is recorded at step S, and the rounds
        // fall every H steps from there.
        let warm = StrategyConfig { warmup_steps: 3, ..StrategyConfig::local(4) };
        let schedule = OuterSchedule::new(&warm);
        let due: Vec<u64> = (0..16).filter(|&t| schedule.due(t)).collect();
        assert_eq!(due, vec![3, 7, 11, 15]);
        assert!(schedule.starts_any(3) && !schedule.merges_any(3), "step S records the model");
        let warming: Vec<u64> = (0..6).filter(|&t| schedule.warming(t)).collect();
        assert_eq!(warming, vec![0, 1, 2], "steps 1..=S (taken after 0..S steps) are synchronous");
    }

    #[test]
    fn more_fragments_than_tensors_is_refused_naming_the_key() {
        let cfg = config(StrategyConfig::local(8).with_streaming(4, 0));
        let e = OuterRounds::new(&cfg, &layout(), 2, false).err().expect("4 fragments of 3 tensors");
        assert_eq!(e.key, "strategy.fragments", "{e}");
    }

    #[test]
    fn each_fragment_checkpoints_its_own_momentum_and_memory() {
        let cfg = DataParallelConfig::new(CompressorConfig::named("topk").unwrap())
            .with_strategy(StrategyConfig::local(4).with_streaming(2, 0).with_compress_delta(true));
        let rounds = OuterRounds::new(&cfg, &layout(), 1, true).unwrap();
        let mut s = StateBuffers::new();
        rounds.state(&mut s).unwrap();
        for key in [ANCHOR_KEY, "outer.momentum.0", "outer.momentum.1"] {
            assert!(s.contains_key(key), "{key} in {:?}", s.keys());
        }
        assert!(
            s.keys().any(|k| k.starts_with("delta.0.")) && s.keys().any(|k| k.starts_with("delta.1.")),
            "{:?}",
            s.keys()
        );
        assert_eq!(
            rounds.units().iter().map(|u| u.offset).collect::<Vec<_>>(),
            vec![0, 3, 5],
            "units at their model offsets"
        );
    }

    /// A worker's NaN reaches a round: every worker refuses it, naming the
    /// worker, and θ_outer (and the outer momentum) stay as they were.
    #[test]
    fn a_non_finite_model_is_refused_by_every_worker_and_nothing_is_applied() {
        for (compressor, topology) in
            [("dense", Topology::Allreduce), ("topk", Topology::Allgather), ("fp4", Topology::ReduceScatter)]
        {
            let cfg = DataParallelConfig::new(CompressorConfig::named(compressor).unwrap())
                .with_topology(topology)
                .with_strategy(StrategyConfig::local(4).with_compress_delta(compressor != "dense"));
            let outcomes = InProcessGroup::new(3)
                .run(|mut c| {
                    let r = c.rank();
                    let mut rounds = OuterRounds::new(&cfg, &layout(), 3, compressor != "dense").unwrap();
                    let mut params: Vec<f32> = (0..8).map(|j| j as f32 * 0.25).collect();
                    rounds.start(0, &params, &mut c).unwrap();
                    let mut before = StateBuffers::new();
                    rounds.state(&mut before).unwrap();
                    params.iter_mut().for_each(|p| *p += 0.5);
                    if r == 1 {
                        params[5] = f32::NAN;
                    }
                    let e = rounds.start(4, &params, &mut c).unwrap_err();
                    let mut after = StateBuffers::new();
                    rounds.state(&mut after).unwrap();
                    (
                        e.to_string(),
                        matches!(e, ExchangeError::NonFiniteModel { step: 4, ref ranks } if ranks == &[1]),
                        format!("{before:?}") == format!("{after:?}"),
                    )
                })
                .unwrap();
            for (w, o) in outcomes.into_iter().enumerate() {
                let (text, named, unchanged) = o.unwrap();
                assert!(named, "{compressor}: worker {w}: {text}");
                assert!(text.contains("worker(s) [1]") && text.contains("step 4"), "{text}");
                assert!(unchanged, "{compressor}: worker {w}: the round left its state");
            }
        }
    }
}
