//! CELGC: communication-efficient local gradient clipping (Liu et al.,
//! NeurIPS 2022; ALGORITHMS.md §2).
//!
//! Every worker steps on its own gradient with `η_eff = min(η, γ/(‖g‖ +
//! 1e-10))`, the norm taken over all parameters of its raw local gradient,
//! and the models are averaged through the collective every `I` steps,
//! before that step's gradient. γ decays with η: at learning rate η it is
//! `γ·η/η₀`. With `average = "gradients"` and I = 1 the same code is the
//! paper's baseline, naive parallel clipping: synchronous SGD whose step is
//! clipped on the norm of the averaged gradient.
//!
//! The step itself is the caller's optimizer at [`StepResult::lr`] (= η_eff):
//! with momentum the clipped step size multiplies the momentum buffer, as in
//! the authors' `SGDClipGrad`.
//!
//! A round applies the outer optimizer (`strategy.outer`, [`Outer`]) to the
//! workers' averaged model change: `sgd` at lr 1 is model averaging, and
//! `nesterov` with γ = 0 and the caller's AdamW inside is DiLoCo.

use std::time::Instant;

use gradcomp_comm::Collective;
use gradcomp_compress::StateError;

use super::base::{StepResult, Strategy};
use super::outer::Outer;
use crate::config::{Average, ClipNorm, StrategyConfig};
use crate::error::ExchangeError;
use crate::grad_stages::CompleteGrad;
use crate::{ExchangeStats, Gradient, GradientExchange, StateBuffers, StepInput, Unit};

/// Model rounds beyond plain averaging: the model change sent through a
/// compressor with error feedback (`compress_delta`), an outer optimizer
/// other than averaging (DiLoCo's Nesterov), or both.
struct Rounds {
    /// `compress_delta`'s exchange; `None`: the change is averaged densely.
    exchange: Option<GradientExchange>,
    /// θ_outer: the model after the last round, identical everywhere.
    anchor: Vec<f32>,
    /// This worker's change θ_local − θ_outer, and the workers' average of it.
    delta: Vec<f32>,
    averaged: Vec<f32>,
    outer: Outer,
}

/// A worker's CELGC state.
pub struct Celgc {
    cfg: StrategyConfig,
    /// η₀, the base learning rate γ is given at.
    base_lr: f64,
    /// ‖ḡ‖ of the last communication round (for `global-average` and `max`).
    global_norm: Option<f64>,
    /// `None`: plain model averaging, the mean of the models.
    rounds: Option<Rounds>,
}

fn norm(x: &[f32]) -> f64 {
    gradcomp_compress::reduce::sum_of_squares(x).sqrt()
}

impl Celgc {
    /// `base_lr` is η₀ (γ decays with η/η₀); `delta` is the exchange for
    /// compressed model deltas (`compress_delta`).
    pub fn new(cfg: &StrategyConfig, base_lr: f64, delta: Option<GradientExchange>) -> Self {
        let rounds = (delta.is_some() || !cfg.outer.averages()).then(|| Rounds {
            exchange: delta,
            anchor: Vec::new(),
            delta: Vec::new(),
            averaged: Vec::new(),
            outer: Outer::new(cfg.outer),
        });
        Self { cfg: cfg.clone(), base_lr, global_norm: None, rounds }
    }

    /// The norm the clipping uses: the local one, or the last round's average.
    fn clip_norm(&self, local: f64) -> f64 {
        if self.cfg.average == Average::Gradients {
            return local;
        }
        match self.cfg.clip_norm {
            ClipNorm::Local => local,
            ClipNorm::GlobalAverage => self.global_norm.unwrap_or(local),
            ClipNorm::Max => self.global_norm.map_or(local, |g| g.max(local)),
        }
    }
}

impl Strategy for Celgc {
    fn name(&self) -> &'static str {
        "celgc"
    }

    fn averages_models(&self, step: u64) -> bool {
        self.cfg.average == Average::Models && step.is_multiple_of(self.cfg.period)
    }

    fn average_models(
        &mut self,
        step: u64,
        params: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<(), ExchangeError> {
        let n = c.world_size() as f32;
        let Some(r) = &mut self.rounds else {
            c.allreduce_sum_f32(params)?;
            params.iter_mut().for_each(|p| *p /= n);
            return Ok(());
        };
        if r.anchor.len() != params.len() {
            // The first round: every worker starts from the same model.
            r.anchor = params.to_vec();
            r.delta = vec![0.0; params.len()];
            r.averaged = vec![0.0; params.len()];
            return Ok(());
        }
        for ((o, x), a) in r.delta.iter_mut().zip(params.iter()).zip(&r.anchor) {
            *o = x - a;
        }
        match &mut r.exchange {
            Some(e) => {
                let input = StepInput { step, lr: 1.0, loss: None, measure: false };
                e.exchange(Gradient::Host(&mut CompleteGrad(&r.delta)), &input, &mut r.averaged, c)?;
            }
            None => {
                r.averaged.copy_from_slice(&r.delta);
                c.allreduce_sum_f32(&mut r.averaged)?;
                r.averaged.iter_mut().for_each(|v| *v /= n);
            }
        }
        r.outer.step(&mut r.anchor, &r.averaged);
        params.copy_from_slice(&r.anchor);
        Ok(())
    }

    /// Completes a staged gradient first: the clipping needs its whole norm.
    fn step(
        &mut self,
        input: &StepInput,
        grad: Gradient<'_>,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<StepResult, ExchangeError> {
        #[allow(irrefutable_let_patterns)]
        let Gradient::Host(stages) = grad
        else {
            return Err(ExchangeError::Device("CELGC has no device form".into()));
        };
        stages.complete()?;
        let grad = stages.grad();
        let averaged_gradient = self.cfg.average == Average::Gradients;
        let communicated = self.averages_models(input.step);
        out.copy_from_slice(grad);
        let mut communicate_seconds = 0.0;
        if averaged_gradient || (communicated && self.cfg.clip_norm != ClipNorm::Local) {
            let t = Instant::now();
            c.allreduce_sum_f32(out)?;
            communicate_seconds = t.elapsed().as_secs_f64();
            let n = c.world_size() as f32;
            out.iter_mut().for_each(|v| *v /= n);
            self.global_norm = Some(norm(out));
            if !averaged_gradient {
                out.copy_from_slice(grad);
            }
        }
        let used = self.clip_norm(norm(out));
        let lr = input.lr;
        let gamma = self.cfg.gamma * lr / self.base_lr;
        let clipped = self.cfg.gamma > 0.0 && gamma / (used + 1e-10) < lr;
        let eta = if clipped { gamma / (used + 1e-10) } else { lr };
        Ok(StepResult {
            lr: eta,
            stats: ExchangeStats { communicate_seconds, ..Default::default() },
            extra: vec![
                ("eta_eff", eta),
                ("grad_norm", used),
                ("clipped", f64::from(u8::from(clipped))),
                ("communicated", f64::from(u8::from(communicated))),
            ],
        })
    }

    fn identical_replicas(&self) -> bool {
        self.cfg.average == Average::Gradients
    }

    fn set_density(&mut self, rho: f64) {
        if let Some(e) = self.rounds.as_mut().and_then(|r| r.exchange.as_mut()) {
            e.set_density(rho);
        }
    }

    fn units(&self) -> &[Unit] {
        self.rounds.as_ref().and_then(|r| r.exchange.as_ref()).map_or(&[], |e| e.units())
    }

    fn state(&self) -> Result<StateBuffers, ExchangeError> {
        let mut s = StateBuffers::new();
        s.insert("celgc.global_norm".into(), vec![self.global_norm.map_or(f32::NAN, |g| g as f32)]);
        if let Some(r) = &self.rounds {
            s.insert("celgc.anchor".into(), r.anchor.clone());
            r.outer.state(&mut s);
            if let Some(e) = &r.exchange {
                e.state("delta.", &mut s)?;
            }
        }
        Ok(s)
    }

    fn restore(&mut self, s: &StateBuffers) -> Result<(), StateError> {
        let missing = |buffer: &str| StateError::Missing { buffer: buffer.to_string() };
        let g = s.get("celgc.global_norm").ok_or_else(|| missing("celgc.global_norm"))?;
        self.global_norm = g.first().filter(|g| !g.is_nan()).map(|&g| f64::from(g));
        if let Some(r) = &mut self.rounds {
            let a = s.get("celgc.anchor").ok_or_else(|| missing("celgc.anchor"))?;
            if let Some(e) = &r.exchange {
                let total: usize = e.units().iter().map(|u| u.len).sum();
                if !a.is_empty() && a.len() != total {
                    let buffer = "CELGC's model anchor (celgc.anchor)".to_string();
                    return Err(StateError::Length { buffer, expected: total, got: a.len() });
                }
            }
            r.anchor.clone_from(a);
            r.delta = vec![0.0; a.len()];
            r.averaged = vec![0.0; a.len()];
            r.outer.restore(s, a.len())?;
            if let Some(e) = &mut r.exchange {
                e.restore("delta.", s)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gradcomp_comm::InProcessGroup;

    use super::*;
    use crate::config::{OuterConfig, StrategyConfig};

    /// Two workers' rounds with DiLoCo's Nesterov: each moves its model by its
    /// own steps between rounds; after every round both hold θ_outer, which is
    /// torch's SGD(lr 0.7, momentum 0.9, nesterov) on the averaged
    /// pseudo-gradient (computed here in f64).
    #[test]
    fn nesterov_rounds_move_the_shared_model_as_torchs_sgd_does() {
        let start = [1.0f32, -2.0, 0.5, 0.0];
        // Worker r's change before round k (rounds 1..=3; round 0 only anchors).
        let change = |r: usize, k: usize| -> Vec<f32> {
            (0..4).map(|j| ((r * 7 + k * 3 + j) % 5) as f32 * 0.125 - 0.25).collect()
        };
        let cfg = StrategyConfig::celgc(2, 0.0).with_outer(OuterConfig::nesterov());
        let results = InProcessGroup::new(2)
            .run(|mut c| {
                let rank = c.rank();
                let mut s = Celgc::new(&cfg, 1.0, None);
                let mut params = start.to_vec();
                let mut seen = Vec::new();
                for k in 0..4u64 {
                    if k > 0 {
                        params.iter_mut().zip(change(rank, k as usize)).for_each(|(p, d)| *p += d);
                    }
                    s.average_models(2 * k, &mut params, &mut c).unwrap();
                    seen.push(params.clone());
                }
                seen
            })
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<_>>();
        assert_eq!(results[0], results[1], "every worker adopts the same θ_outer");
        let (lr, mu) = (0.7, 0.9);
        let mut theta: Vec<f64> = start.iter().map(|&v| f64::from(v)).collect();
        let mut buf: Option<Vec<f64>> = None;
        for (k, round) in results[0].iter().enumerate().skip(1) {
            // Δ̄ = θ_outer − mean(θ_i) = −mean(change).
            let d: Vec<f64> =
                (0..4).map(|j| -(f64::from(change(0, k)[j]) + f64::from(change(1, k)[j])) / 2.0).collect();
            let b: Vec<f64> = match buf.take() {
                None => d.clone(),
                Some(b) => b.iter().zip(&d).map(|(b, d)| mu * b + d).collect(),
            };
            theta.iter_mut().zip(d.iter().zip(&b)).for_each(|(t, (d, b))| *t -= lr * (d + mu * b));
            buf = Some(b);
            for (got, want) in round.iter().zip(&theta) {
                assert!((f64::from(*got) - want).abs() < 1e-5, "round {k}: {round:?} against {theta:?}");
            }
        }
    }

    #[test]
    fn plain_averaging_keeps_no_anchor_and_an_outer_optimizer_checkpoints_its_own() {
        let avg = Celgc::new(&StrategyConfig::celgc(4, 0.0), 1.0, None);
        assert!(
            !avg.state().unwrap().contains_key("celgc.anchor"),
            "the mean of the models needs no θ_outer"
        );
        let cfg = StrategyConfig::celgc(4, 0.0).with_outer(OuterConfig::nesterov());
        let s = InProcessGroup::new(1)
            .run(|mut c| {
                let mut a = Celgc::new(&cfg, 1.0, None);
                for k in 0..3u64 {
                    let mut p = vec![k as f32; 3];
                    a.average_models(4 * k, &mut p, &mut c).unwrap();
                }
                a.state().unwrap()
            })
            .unwrap()
            .remove(0)
            .unwrap();
        assert!(s.contains_key("celgc.anchor") && s.contains_key("outer.momentum"), "{:?}", s.keys());
        let mut b = Celgc::new(&cfg, 1.0, None);
        b.restore(&s).unwrap();
        let back = b.state().unwrap();
        for key in ["celgc.anchor", "outer.momentum"] {
            assert_eq!(back[key], s[key], "{key} round-trips");
        }
    }
}
