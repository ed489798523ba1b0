//! The outer optimizer of local updates (DiLoCo; ALGORITHMS.md §2): the
//! step that moves the shared model θ_outer by the workers' averaged
//! pseudo-gradient. Its state (θ_outer is the caller's anchor; the
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
}

impl OuterOptimizer {
    pub fn new(cfg: OuterConfig) -> Self {
        Self { cfg, momentum: Vec::new() }
    }

    /// Moves `anchor` (θ_outer) by the averaged model `change`, with torch's
    /// SGD arithmetic: its CPU kernels fuse `p.add_(g, alpha=−lr)` and the
    /// Nesterov `g.add(buf, alpha=μ)` into one multiply-add each, and so does
    /// this (bit for bit torchft's DiLoCo: tests/diloco_reference.rs). The
    /// signs are flipped throughout (m′ = −m, c = −Δ̄), which rounds the same.
    pub fn apply(&mut self, anchor: &mut [f32], change: &[f32]) {
        let lr = self.cfg.lr() as f32;
        let mu = self.cfg.momentum() as f32;
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

    pub fn state(&self, key: &str, s: &mut StateBuffers) {
        if self.cfg.momentum() != 0.0 {
            s.insert(key.into(), self.momentum.clone());
        }
    }

    /// Restores [`OuterOptimizer::state`] from `key`; `len` is the length it covers.
    pub fn restore(&mut self, key: &str, s: &StateBuffers, len: usize) -> Result<(), StateError> {
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

    /// torch.optim.SGD(lr, momentum, nesterov) on the pseudo-gradient
    /// Δ = −change, written out in f64 as torch's docs give it.
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
