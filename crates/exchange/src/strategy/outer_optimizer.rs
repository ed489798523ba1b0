//! The outer optimizer of local updates (DiLoCo; ALGORITHMS.md §2): the
//! step that moves the shared model θ_outer by the workers' averaged
//! change. Its state (θ_outer is the caller's anchor; the
//! momentum here) is identical on every worker, since every worker applies
//! the same step to the same average.
//!
//! The exchange averages the model change c = mean(θ_local − θ_outer) =
//! −Δ̄ (the sign CELGC's compressed rounds always sent, so their
//! compressors see the same values as before), and the step is written in
//! it: with m′ = −m, m′ ← μ·m′ + c, and θ_outer ← θ_outer + lr·m′ (`sgd`)
//! or θ_outer + lr·(c + μ·m′) (`nesterov`), which is torch's SGD on Δ̄.
//! At `sgd`, lr 1, μ 0 it is θ_outer + c: model averaging, and bit for bit
//! the `anchor += change` of CELGC's compressed rounds before it.

use gradcomp_compress::StateError;

use crate::config::{OuterConfig, OuterKind};
use crate::StateBuffers;

/// The outer optimizer and its momentum.
pub struct OuterOptimizer {
    cfg: OuterConfig,
    /// −m: the momentum of the model change (empty without momentum).
    momentum: Vec<f32>,
    /// Outer steps taken, for a warm-up or decay ([`OuterConfig::at_round`]).
    rounds: u64,
}

impl OuterOptimizer {
    pub fn new(cfg: OuterConfig) -> Self {
        Self { cfg, momentum: Vec::new(), rounds: 0 }
    }

    /// Moves `anchor` (θ_outer) by the averaged model `change`, with torch's
    /// SGD arithmetic: its CPU kernels fuse `p.add_(g, alpha=−lr)` and the
    /// Nesterov `g.add(buf, alpha=μ)` into one multiply-add each, and so does
    /// this (bit for bit torchft's DiLoCo: tests/diloco_reference.rs). The
    /// signs are flipped throughout (m′ = −m, c = −Δ̄), which rounds the same.
    ///
    /// With a warm-up or decay, the step's lr and μ are the round's, as a
    /// torch scheduler would set the param group's before `step()`: a
    /// round at μ = 0 leaves the momentum as it is (torch skips its buffer).
    pub fn apply(&mut self, anchor: &mut [f32], change: &[f32]) {
        let (lr, mu) = if self.cfg.scheduled() {
            self.rounds += 1;
            self.cfg.at_round(self.rounds)
        } else {
            (self.cfg.lr(), self.cfg.momentum())
        };
        let (lr, mu) = (lr as f32, mu as f32);
        if mu == 0.0 {
            fused_add(anchor, change, lr);
            return;
        }
        if self.momentum.len() != change.len() {
            self.momentum = change.to_vec();
        } else {
            for (m, c) in self.momentum.iter_mut().zip(change) {
                *m = *m * mu + c;
            }
        }
        match self.cfg.kind() {
            OuterKind::Sgd => fused_add(anchor, &self.momentum, lr),
            OuterKind::Nesterov => fused_nesterov(anchor, &self.momentum, change, mu, lr),
        }
    }

    /// The momentum under `key` (`outer.momentum[.p]`) and, with a warm-up
    /// or decay, the rounds taken under the same key with `rounds` for
    /// `momentum` (exact up to 2^24 rounds).
    pub fn state(&self, key: &str, s: &mut StateBuffers) {
        if self.cfg.momentum() != 0.0 {
            s.insert(key.into(), self.momentum.clone());
        }
        if self.cfg.scheduled() {
            s.insert(key.replacen("momentum", "rounds", 1), vec![self.rounds as f32]);
        }
    }

    /// Restores [`OuterOptimizer::state`] from `key`; `len` is the length it covers.
    pub fn restore(&mut self, key: &str, s: &StateBuffers, len: usize) -> Result<(), StateError> {
        if self.cfg.scheduled() {
            let k = key.replacen("momentum", "rounds", 1);
            let r = s.get(&k).ok_or_else(|| StateError::Missing { buffer: k.clone() })?;
            match r.as_slice() {
                [r] if *r >= 0.0 && r.fract() == 0.0 && *r < 16_777_216.0 => self.rounds = *r as u64,
                _ => {
                    return Err(StateError::Invalid {
                        buffer: format!("the outer rounds taken ({k})"),
                        problem: format!("{r:?} is not one whole number of rounds"),
                    })
                }
            }
        }
        if self.cfg.momentum() == 0.0 {
            return Ok(());
        }
        let m = s.get(key).ok_or_else(|| StateError::Missing { buffer: key.into() })?;
        if !m.is_empty() && m.len() != len {
            let buffer = format!("the outer momentum ({key})");
            return Err(StateError::Length { buffer, expected: len, got: m.len() });
        }
        self.momentum.clone_from(m);
        Ok(())
    }
}

// The fused multiply-adds torch's CPU kernels make. `mul_add` is one
// instruction where the CPU has FMA; the baseline build calls libm's `fmaf`
// for each value (3× slower here), hence the run-time dispatch. Both round
// once, so the two versions agree bit for bit.
gradcomp_compress::multiversion! {
    /// a ← x·lr + a.
    fn fused_add(anchor: &mut [f32], x: &[f32], lr: f32) {
        for (a, x) in anchor.iter_mut().zip(x) {
            *a = x.mul_add(lr, *a);
        }
    }
}

gradcomp_compress::multiversion! {
    /// a ← (m·μ + c)·lr + a: Nesterov's step on the momentum `m` and change `c`.
    fn fused_nesterov(anchor: &mut [f32], momentum: &[f32], change: &[f32], mu: f32, lr: f32) {
        for ((a, m), c) in anchor.iter_mut().zip(momentum).zip(change) {
            *a = m.mul_add(mu, *c).mul_add(lr, *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torch.optim.SGD(lr, momentum, nesterov) on Δ = −change (DiLoCo's
    /// pseudo-gradient), written out in f64 as torch's docs give it.
    fn torch_sgd(cfg: OuterConfig, theta: &[f64], changes: &[Vec<f64>]) -> Vec<f64> {
        let (lr, mu) = (cfg.lr(), cfg.momentum());
        let mut theta = theta.to_vec();
        let mut buf: Option<Vec<f64>> = None;
        for c in changes {
            let g: Vec<f64> = c.iter().map(|v| -v).collect();
            let b = match buf.take() {
                None => g.clone(),
                Some(b) => b.iter().zip(&g).map(|(b, g)| mu * b + g).collect(),
            };
            let d: Vec<f64> = match cfg.kind() {
                OuterKind::Nesterov => g.iter().zip(&b).map(|(g, b)| g + mu * b).collect(),
                OuterKind::Sgd if mu == 0.0 => g.clone(),
                OuterKind::Sgd => b.clone(),
            };
            theta.iter_mut().zip(&d).for_each(|(t, d)| *t -= lr * d);
            buf = Some(b);
        }
        theta
    }

    #[test]
    fn the_outer_step_is_torchs_sgd_on_the_pseudo_gradient() {
        let theta = [0.5f32, -1.25, 2.0];
        let changes = [vec![0.25f32, -0.5, 0.125], vec![-0.375, 0.25, 0.5], vec![0.0625, 0.125, -0.25]];
        let configs = [
            OuterConfig::default(),
            OuterConfig::nesterov(),
            OuterConfig::sgd(0.5, 0.8),
            OuterConfig { lr: Some(1.0), momentum: Some(0.5), ..OuterConfig::nesterov() },
        ];
        for cfg in configs {
            let mut anchor = theta.to_vec();
            let mut outer = OuterOptimizer::new(cfg);
            for c in &changes {
                outer.apply(&mut anchor, c);
            }
            let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
            let want = torch_sgd(cfg, &f64s(&theta), &changes.iter().map(|c| f64s(c)).collect::<Vec<_>>());
            for (got, want) in anchor.iter().zip(&want) {
                assert!((f64::from(*got) - want).abs() < 1e-6, "{cfg:?}: {anchor:?} against {want:?}");
            }
        }
    }

    #[test]
    fn a_warm_up_and_a_decay_move_lr_and_momentum_between_averaging_and_the_configured_step() {
        let cfg =
            OuterConfig { warmup_rounds: 2, decay_rounds: 2, rounds: Some(5), ..OuterConfig::nesterov() };
        // f = w·d: 1/2, 1, 1, 1/2, 0 over rounds 1..=5 (decay over rounds 4, 5).
        let want = [(0.85, 0.45), (0.7, 0.9), (0.7, 0.9), (0.85, 0.45), (1.0, 0.0)];
        for (k, (lr, mu)) in want.iter().enumerate() {
            let (l, m) = cfg.at_round(k as u64 + 1);
            assert!((l - lr).abs() < 1e-12 && (m - mu).abs() < 1e-12, "round {}: ({l}, {m})", k + 1);
        }
        assert_eq!(OuterConfig::nesterov().at_round(1), (0.7, 0.9), "no schedule: the configured step");
        // Five rounds against torch's SGD with the param group's lr and
        // momentum set before each step (μ = 0 skips the buffer), in f64.
        let changes: Vec<Vec<f32>> =
            (0..5).map(|k| (0..3).map(|j| ((k * 5 + j * 3) % 7) as f32 * 0.125 - 0.375).collect()).collect();
        let mut anchor = vec![0.5f32, -1.25, 2.0];
        let mut outer = OuterOptimizer::new(cfg);
        let mut theta: Vec<f64> = anchor.iter().map(|&x| f64::from(x)).collect();
        let mut buf: Option<Vec<f64>> = None;
        for (k, c) in changes.iter().enumerate() {
            outer.apply(&mut anchor, c);
            let (lr, mu) = want[k];
            let g: Vec<f64> = c.iter().map(|&v| -f64::from(v)).collect();
            let d = if mu == 0.0 {
                g.clone()
            } else {
                let b: Vec<f64> = match buf.take() {
                    None => g.clone(),
                    Some(b) => b.iter().zip(&g).map(|(b, g)| mu * b + g).collect(),
                };
                let d = g.iter().zip(&b).map(|(g, b)| g + mu * b).collect();
                buf = Some(b);
                d
            };
            theta.iter_mut().zip(&d).for_each(|(t, d)| *t -= lr * d);
            for (got, want) in anchor.iter().zip(&theta) {
                assert!(
                    (f64::from(*got) - want).abs() < 1e-6,
                    "round {}: {anchor:?} against {theta:?}",
                    k + 1
                );
            }
        }
        // The rounds taken round-trip; a count that is not one is named.
        let mut s = StateBuffers::new();
        outer.state("outer.momentum", &mut s);
        assert_eq!(s["outer.rounds"], vec![5.0]);
        let mut back = OuterOptimizer::new(cfg);
        back.restore("outer.momentum", &s, 3).unwrap();
        assert_eq!((back.rounds, &back.momentum), (5, &outer.momentum));
        s.insert("outer.rounds".into(), vec![2.5]);
        let e = back.restore("outer.momentum", &s, 3).unwrap_err().to_string();
        assert!(e.contains("outer.rounds"), "{e}");
        s.remove("outer.rounds");
        assert!(matches!(back.restore("outer.momentum", &s, 3), Err(StateError::Missing { .. })));
    }

    #[test]
    fn averaging_adds_the_change_exactly() {
        let mut anchor = vec![0.1f32, 0.2, 0.3];
        let change = [0.7f32, -0.05, 1e-8];
        let want: Vec<f32> = anchor.iter().zip(&change).map(|(a, c)| a + c).collect();
        OuterOptimizer::new(OuterConfig::default()).apply(&mut anchor, &change);
        assert_eq!(anchor, want, "sgd at lr 1 is the old anchor += change, bit for bit");
    }

    #[test]
    fn the_momentum_round_trips_and_a_wrong_length_is_named() {
        let mut a = OuterOptimizer::new(OuterConfig::nesterov());
        a.apply(&mut [0.0; 3], &[1.0, 2.0, 3.0]);
        let mut s = StateBuffers::new();
        a.state("m", &mut s);
        let mut b = OuterOptimizer::new(OuterConfig::nesterov());
        b.restore("m", &s, 3).unwrap();
        assert_eq!(b.momentum, a.momentum);
        assert!(matches!(b.restore("m", &s, 4), Err(StateError::Length { .. })));
        assert!(matches!(b.restore("m", &StateBuffers::new(), 3), Err(StateError::Missing { .. })));
    }
}
