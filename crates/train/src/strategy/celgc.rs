//! CELGC: communication-efficient local gradient clipping (Liu et al.,
//! NeurIPS 2022; ALGORITHMS.md §2).
//!
//! Every worker runs local SGD steps with `η_eff = min(η, γ/(‖g‖ + 1e-10))`
//! on the norm of its raw local gradient over all parameters, and the models
//! are averaged through the collective every `I` steps, before that step's
//! gradient. η and γ decay together. With `average = "gradients"` and I = 1
//! the same code is the paper's baseline, naive parallel clipping:
//! synchronous SGD whose step is clipped on the norm of the averaged
//! gradient.

use gradcomp_comm::{Collective, CommError};

use super::sync::{ExchangeError, GradientExchange};
use crate::config::{Average, ClipNorm, OptimizerConfig, StrategyConfig};

/// What one CELGC step did, for the step record.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CelgcStats {
    /// The step size applied: η, or γ/‖g‖ when clipped.
    pub eta_eff: f64,
    /// The norm the clipping used.
    pub grad_norm: f64,
    pub clipped: bool,
}

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
    lr0: f64,
    momentum: f32,
    weight_decay: f32,
    velocity: Vec<f32>,
    /// ‖ḡ‖ of the last communication round (for `global_average` and `max`).
    global_norm: Option<f64>,
    scratch: Vec<f32>,
    delta: Option<DeltaExchange>,
}

fn norm(x: &[f32]) -> f64 {
    gradcomp_compress::reduce::sum_of_squares(x).sqrt()
}

impl Celgc {
    /// `delta` is the exchange for compressed model deltas (`compress_delta`).
    pub fn new(
        cfg: &StrategyConfig,
        opt: &OptimizerConfig,
        params: usize,
        delta: Option<GradientExchange>,
    ) -> Self {
        Self {
            cfg: cfg.clone(),
            lr0: opt.lr,
            momentum: opt.momentum as f32,
            weight_decay: opt.weight_decay as f32,
            velocity: if opt.momentum > 0.0 { vec![0.0; params] } else { Vec::new() },
            global_norm: None,
            scratch: Vec::new(),
            delta: delta.map(|exchange| DeltaExchange {
                exchange,
                anchor: Vec::new(),
                delta: vec![0.0; params],
                averaged: vec![0.0; params],
            }),
        }
    }

    /// Whether step `step` starts with a communication round.
    pub fn communicates(&self, step: u64) -> bool {
        self.cfg.average == Average::Models && step.is_multiple_of(self.cfg.period)
    }

    /// Averages the workers' models if this step starts a round (before the
    /// step's gradient). Returns whether it did.
    pub fn begin_step(
        &mut self,
        step: u64,
        params: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<bool, ExchangeError> {
        if !self.communicates(step) {
            return Ok(false);
        }
        let n = c.world_size() as f32;
        match &mut self.delta {
            None => {
                c.allreduce_sum_f32(params)?;
                params.iter_mut().for_each(|p| *p /= n);
            }
            Some(d) => {
                if d.anchor.len() != params.len() {
                    // The first round: every worker starts from the same model.
                    d.anchor = params.to_vec();
                    return Ok(true);
                }
                for ((x, a), o) in params.iter().zip(&d.anchor).zip(&mut d.delta) {
                    *o = x - a;
                }
                d.exchange.exchange(&d.delta, 0.0, &mut d.averaged, step, 1.0, false, c)?;
                for ((x, a), g) in params.iter_mut().zip(&mut d.anchor).zip(&d.averaged) {
                    *a += g;
                    *x = *a;
                }
            }
        }
        Ok(true)
    }

    /// One clipped local step on `grad` at learning rate `lr`; `communicated`
    /// tells whether this step began with a round.
    pub fn update(
        &mut self,
        params: &mut [f32],
        grad: &[f32],
        lr: f64,
        communicated: bool,
        c: &mut dyn Collective,
    ) -> Result<CelgcStats, CommError> {
        let n = c.world_size() as f32;
        let averaged_gradient = self.cfg.average == Average::Gradients;
        let g: &[f32] = if averaged_gradient || (communicated && self.cfg.clip_norm != ClipNorm::Local) {
            self.scratch.clear();
            self.scratch.extend_from_slice(grad);
            c.allreduce_sum_f32(&mut self.scratch)?;
            self.scratch.iter_mut().for_each(|v| *v /= n);
            self.global_norm = Some(norm(&self.scratch));
            if averaged_gradient {
                &self.scratch
            } else {
                grad
            }
        } else {
            grad
        };
        let local = norm(g);
        let used = if averaged_gradient {
            local
        } else {
            match self.cfg.clip_norm {
                ClipNorm::Local => local,
                ClipNorm::GlobalAverage => self.global_norm.unwrap_or(local),
                ClipNorm::Max => self.global_norm.map_or(local, |gn| gn.max(local)),
            }
        };
        // γ decays with η.
        let gamma = self.cfg.gamma * lr / self.lr0;
        let clipped = self.cfg.gamma > 0.0 && gamma / (used + 1e-10) < lr;
        let eta = if clipped { gamma / (used + 1e-10) } else { lr } as f32;
        let (mu, wd) = (self.momentum, self.weight_decay);
        if self.velocity.is_empty() {
            for (x, &gj) in params.iter_mut().zip(g) {
                *x -= eta * (gj + wd * *x);
            }
        } else {
            for ((x, &gj), v) in params.iter_mut().zip(g).zip(&mut self.velocity) {
                *v = mu * *v + gj + wd * *x;
                *x -= eta * *v;
            }
        }
        Ok(CelgcStats { eta_eff: f64::from(eta), grad_norm: used, clipped })
    }

    /// The state a checkpoint must keep for an exact resume.
    pub fn state(&self) -> Vec<Vec<f32>> {
        let mut s = vec![self.velocity.clone(), vec![self.global_norm.map_or(f32::NAN, |g| g as f32)]];
        if let Some(d) = &self.delta {
            s.push(d.anchor.clone());
        }
        s
    }

    pub fn restore(&mut self, s: &[Vec<f32>]) -> Result<(), String> {
        if s.len() < 2 || s[0].len() != self.velocity.len() {
            return Err("CELGC state does not match the configuration".into());
        }
        self.velocity.clone_from(&s[0]);
        self.global_norm = s[1].first().filter(|g| !g.is_nan()).map(|&g| f64::from(g));
        if let (Some(d), Some(a)) = (&mut self.delta, s.get(2)) {
            d.anchor.clone_from(a);
        }
        Ok(())
    }

    /// The delta exchange's memories, for checkpoints.
    pub fn delta_exchange(&mut self) -> Option<&mut GradientExchange> {
        self.delta.as_mut().map(|d| &mut d.exchange)
    }
}
