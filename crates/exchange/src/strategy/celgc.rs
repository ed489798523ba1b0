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

use std::time::Instant;

use gradcomp_comm::Collective;
use gradcomp_compress::StateError;

use super::base::{StepResult, Strategy};
use crate::config::{Average, ClipNorm, StrategyConfig};
use crate::error::ExchangeError;
use crate::grad_stages::CompleteGrad;
use crate::{ExchangeStats, Gradient, GradientExchange, StateBuffers, StepInput, Unit};

/// The periodic model change sent through a compressor with error feedback.
struct DeltaExchange {
    exchange: GradientExchange,
    /// The model after the last communication round, identical everywhere.
    anchor: Vec<f32>,
    delta: Vec<f32>,
    averaged: Vec<f32>,
}

/// A worker's CELGC state.
pub struct Celgc {
    cfg: StrategyConfig,
    /// η₀, the base learning rate γ is given at.
    base_lr: f64,
    /// ‖ḡ‖ of the last communication round (for `global-average` and `max`).
    global_norm: Option<f64>,
    delta: Option<DeltaExchange>,
}

fn norm(x: &[f32]) -> f64 {
    gradcomp_compress::reduce::sum_of_squares(x).sqrt()
}

impl Celgc {
    /// `base_lr` is η₀ (γ decays with η/η₀); `delta` is the exchange for
    /// compressed model deltas (`compress_delta`).
    pub fn new(cfg: &StrategyConfig, base_lr: f64, delta: Option<GradientExchange>) -> Self {
        Self {
            cfg: cfg.clone(),
            base_lr,
            global_norm: None,
            delta: delta.map(|exchange| DeltaExchange {
                exchange,
                anchor: Vec::new(),
                delta: Vec::new(),
                averaged: Vec::new(),
            }),
        }
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
        let Some(d) = &mut self.delta else {
            c.allreduce_sum_f32(params)?;
            params.iter_mut().for_each(|p| *p /= n);
            return Ok(());
        };
        if d.anchor.len() != params.len() {
            // The first round: every worker starts from the same model.
            d.anchor = params.to_vec();
            d.delta = vec![0.0; params.len()];
            d.averaged = vec![0.0; params.len()];
            return Ok(());
        }
        for ((o, x), a) in d.delta.iter_mut().zip(params.iter()).zip(&d.anchor) {
            *o = x - a;
        }
        let input = StepInput { step, lr: 1.0, loss: None, measure: false };
        d.exchange.exchange(Gradient::Host(&mut CompleteGrad(&d.delta)), &input, &mut d.averaged, c)?;
        for ((x, a), g) in params.iter_mut().zip(&mut d.anchor).zip(&d.averaged) {
            *a += g;
            *x = *a;
        }
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
        if let Some(d) = &mut self.delta {
            d.exchange.set_density(rho);
        }
    }

    fn units(&self) -> &[Unit] {
        self.delta.as_ref().map_or(&[], |d| d.exchange.units())
    }

    fn state(&self) -> Result<StateBuffers, ExchangeError> {
        let mut s = StateBuffers::new();
        s.insert("celgc.global_norm".into(), vec![self.global_norm.map_or(f32::NAN, |g| g as f32)]);
        if let Some(d) = &self.delta {
            s.insert("celgc.anchor".into(), d.anchor.clone());
            d.exchange.state("delta.", &mut s)?;
        }
        Ok(s)
    }

    fn restore(&mut self, s: &StateBuffers) -> Result<(), StateError> {
        let missing = |buffer: &str| StateError::Missing { buffer: buffer.to_string() };
        let g = s.get("celgc.global_norm").ok_or_else(|| missing("celgc.global_norm"))?;
        self.global_norm = g.first().filter(|g| !g.is_nan()).map(|&g| f64::from(g));
        if let Some(d) = &mut self.delta {
            let a = s.get("celgc.anchor").ok_or_else(|| missing("celgc.anchor"))?;
            let total: usize = d.exchange.units().iter().map(|u| u.len).sum();
            if !a.is_empty() && a.len() != total {
                let buffer = "CELGC's model anchor (celgc.anchor)".to_string();
                return Err(StateError::Length { buffer, expected: total, got: a.len() });
            }
            d.anchor.clone_from(a);
            d.delta = vec![0.0; a.len()];
            d.averaged = vec![0.0; a.len()];
            d.exchange.restore("delta.", s)?;
        }
        Ok(())
    }
}
