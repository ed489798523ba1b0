//! Optimizers on flat parameter buffers.
//!
//! Every worker applies the same update to the same averaged gradient, so
//! replicas stay bit-identical without parameters ever travelling; keeping
//! parameters, gradients and optimizer state as flat `Vec<f32>` makes that
//! update one loop and the state trivial to checkpoint.

use crate::config::{OptimizerConfig, OptimizerName};
use crate::layout::GradientLayout;

/// SGD with momentum (PyTorch semantics) or Adam, with L2 weight decay.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    kind: OptimizerName,
    momentum: f32,
    nesterov: bool,
    weight_decay: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    /// Per-element weight-decay factor (0 where decay is off).
    decay: Vec<f32>,
    /// SGD velocity, or Adam's first moment.
    m: Vec<f32>,
    /// Adam's second moment.
    v: Vec<f32>,
    /// Steps taken (Adam's bias correction).
    pub steps: u64,
}

impl Optimizer {
    pub fn new(c: &OptimizerConfig, layout: &GradientLayout) -> Self {
        let mut decay = vec![c.weight_decay as f32; layout.total()];
        if c.no_decay_on_biases {
            for s in layout.slots().iter().filter(|s| s.shape.len() <= 1) {
                decay[s.offset..s.offset + s.len].fill(0.0);
            }
        }
        let n = layout.total();
        Self {
            kind: c.name,
            momentum: c.momentum as f32,
            nesterov: c.nesterov,
            weight_decay: c.weight_decay as f32,
            beta1: c.beta1 as f32,
            beta2: c.beta2 as f32,
            eps: c.eps as f32,
            decay,
            m: vec![0.0; n],
            v: if c.name == OptimizerName::Adam { vec![0.0; n] } else { Vec::new() },
            steps: 0,
        }
    }

    /// `params -= lr · update(grad)`.
    pub fn step(&mut self, params: &mut [f32], grad: &[f32], lr: f32) {
        assert_eq!(params.len(), grad.len());
        self.steps += 1;
        let wd_on = self.weight_decay != 0.0;
        match self.kind {
            OptimizerName::Sgd => {
                let (mu, nesterov) = (self.momentum, self.nesterov);
                for (((p, &g), m), &wd) in params.iter_mut().zip(grad).zip(&mut self.m).zip(&self.decay) {
                    let g = if wd_on { g + wd * *p } else { g };
                    let d = if mu == 0.0 {
                        g
                    } else {
                        *m = mu * *m + g;
                        if nesterov {
                            g + mu * *m
                        } else {
                            *m
                        }
                    };
                    *p -= lr * d;
                }
            }
            OptimizerName::Adam => {
                let (b1, b2, eps) = (self.beta1, self.beta2, self.eps);
                let t = self.steps as i32;
                let c1 = 1.0 - b1.powi(t);
                let c2 = 1.0 - b2.powi(t);
                for ((((p, &g), m), v), &wd) in
                    params.iter_mut().zip(grad).zip(&mut self.m).zip(&mut self.v).zip(&self.decay)
                {
                    let g = if wd_on { g + wd * *p } else { g };
                    *m = b1 * *m + (1.0 - b1) * g;
                    *v = b2 * *v + (1.0 - b2) * g * g;
                    *p -= lr * (*m / c1) / ((*v / c2).sqrt() + eps);
                }
            }
        }
    }

    /// The state buffers, for checkpoints.
    pub fn state(&self) -> [&[f32]; 2] {
        [&self.m, &self.v]
    }

    pub fn restore(&mut self, m: Vec<f32>, v: Vec<f32>, steps: u64) -> Result<(), String> {
        if m.len() != self.m.len() || v.len() != self.v.len() {
            return Err("optimizer state does not match the model".into());
        }
        self.m = m;
        self.v = v;
        self.steps = steps;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> GradientLayout {
        GradientLayout::new([("w".into(), vec![2, 1]), ("b".into(), vec![1])])
    }

    #[test]
    fn sgd_momentum_matches_hand_computation() {
        let c = OptimizerConfig {
            momentum: 0.5,
            weight_decay: 0.1,
            no_decay_on_biases: true,
            ..Default::default()
        };
        let mut o = Optimizer::new(&c, &layout());
        let mut p = vec![1.0, 2.0, 3.0];
        o.step(&mut p, &[1.0, 1.0, 1.0], 0.1);
        // g + wd·p: [1.1, 1.2, 1.0]; v = g; p -= 0.1 v
        assert!((p[0] - 0.89).abs() < 1e-6 && (p[1] - 1.88).abs() < 1e-6 && (p[2] - 2.9).abs() < 1e-6);
        o.step(&mut p, &[0.0, 0.0, 0.0], 0.1);
        // v = 0.5 v + wd·p
        assert!((p[2] - (2.9 - 0.1 * 0.5)).abs() < 1e-6);
    }

    #[test]
    fn adam_first_step_is_lr_sign() {
        let c = OptimizerConfig { name: OptimizerName::Adam, ..Default::default() };
        let mut o = Optimizer::new(&c, &layout());
        let mut p = vec![0.0; 3];
        o.step(&mut p, &[2.0, -3.0, 0.5], 0.01);
        for (x, s) in p.iter().zip([-1.0, 1.0, -1.0]) {
            assert!((x - 0.01 * s).abs() < 1e-5, "{x}");
        }
    }
}
