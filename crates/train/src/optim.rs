//! The built-in trainer's optimizer: one of burn's, built from the
//! configuration. Every worker applies the same update to the same combined
//! gradient, so replicas stay bit-identical without parameters travelling.
//!
//! | `optimizer.name` | burn | weight decay |
//! |---|---|---|
//! | `sgd` | `SgdConfig` with momentum (PyTorch semantics: no dampening), Nesterov | L2, added to the gradient |
//! | `adam` | `AdamConfig` | L2, added to the gradient |
//! | `adamw` | `AdamWConfig` | decoupled |
//!
//! `no_decay_on_biases` puts the 1-D parameters in a group of their own
//! without weight decay (Shi et al.'s code).

use burn::module::{Module, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer, Optimizer, SgdConfig};
use burn::tensor::Tensor;

use crate::config::{OptimizerConfig, OptimizerName};

/// The configured burn optimizer for `model`.
pub fn optimizer<M: Module>(c: &OptimizerConfig, model: &M) -> ModuleOptimizer {
    match c.name {
        OptimizerName::Sgd => with_bias_group(c, model, |wd| {
            let momentum = (c.momentum > 0.0).then(|| {
                MomentumConfig::new().with_momentum(c.momentum).with_dampening(0.0).with_nesterov(c.nesterov)
            });
            SgdConfig::new().with_momentum(momentum).with_weight_decay(wd.map(WeightDecayConfig::new)).build()
        }),
        OptimizerName::Adam => with_bias_group(c, model, |wd| {
            AdamConfig::new()
                .with_beta_1(c.beta1 as f32)
                .with_beta_2(c.beta2 as f32)
                .with_epsilon(c.eps as f32)
                .with_weight_decay(wd.map(WeightDecayConfig::new))
                .build()
        }),
        OptimizerName::Adamw => with_bias_group(c, model, |wd| {
            AdamWConfig::new()
                .with_beta_1(c.beta1 as f32)
                .with_beta_2(c.beta2 as f32)
                .with_epsilon(c.eps as f32)
                .with_weight_decay(wd.unwrap_or(0.0))
                .build()
        }),
    }
}

/// `make(Some(wd))` for every parameter, and `make(None)` for the 1-D ones
/// when `no_decay_on_biases` is set.
fn with_bias_group<M: Module, O: Optimizer>(
    c: &OptimizerConfig,
    model: &M,
    make: impl Fn(Option<f32>) -> O,
) -> ModuleOptimizer {
    let wd = (c.weight_decay > 0.0).then_some(c.weight_decay as f32);
    let optim = ModuleOptimizer::from(make(wd));
    if c.no_decay_on_biases && wd.is_some() {
        optim.with_group(ParamGroup::from_ids(vector_ids(model)), make(None), None)
    } else {
        optim
    }
}

/// The ids of the model's 1-D trainable parameters (biases, norms' scales).
fn vector_ids<M: Module>(model: &M) -> Vec<ParamId> {
    struct Vectors(Vec<ParamId>);
    impl ModuleVisitor for Vectors {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if D == 1 && param.is_require_grad() {
                self.0.push(param.id);
            }
        }
    }
    let mut v = Vectors(Vec::new());
    model.visit(&mut v);
    v.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::GradientsParams;

    fn step(c: &OptimizerConfig, grads: [f32; 3], steps: usize) -> Vec<f32> {
        let device = gradcomp_dp::default_device();
        // w = [[1], [2]] (2 inputs, 1 output), b = [3].
        let mut layer: Linear = LinearConfig::new(2, 1).init(&device);
        layer = gradcomp_dp::params::write_params(layer, &[1.0, 2.0, 3.0]);
        let mut optim = optimizer(c, &layer);
        for _ in 0..steps {
            let g = gradcomp_dp::params::grads_params(&layer, &grads);
            layer = optim.step(0.1, layer, g);
        }
        let mut out = Vec::new();
        gradcomp_dp::params::read_params(&layer, &mut out);
        out
    }

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    }

    #[test]
    fn sgd_momentum_with_weight_decay_but_not_on_biases_matches_hand_computation() {
        let c = OptimizerConfig {
            momentum: 0.5,
            weight_decay: 0.1,
            no_decay_on_biases: true,
            ..Default::default()
        };
        // g + wd·p: [1.1, 1.2, 1.0]; v = g; p -= 0.1 v
        assert!(close(&step(&c, [1.0; 3], 1), &[0.89, 1.88, 2.9]));
        // A second step with the same gradient: the bias's v = 0.5·1 + 1.
        let p = step(&c, [1.0; 3], 2);
        assert!((p[2] - (2.9 - 0.1 * (0.5 + 1.0))).abs() < 1e-5, "{p:?}");
    }

    #[test]
    fn adam_first_step_is_lr_times_sign() {
        let c = OptimizerConfig { name: OptimizerName::Adam, momentum: 0.0, ..Default::default() };
        let p = step(&c, [2.0, -3.0, 0.5], 1);
        assert!(close(&p, &[1.0 - 0.1, 2.0 + 0.1, 3.0 - 0.1]), "{p:?}");
    }

    #[test]
    fn an_empty_gradient_leaves_the_model_unchanged() {
        let device = gradcomp_dp::default_device();
        let layer: Linear = LinearConfig::new(2, 1).init(&device);
        let mut before = Vec::new();
        gradcomp_dp::params::read_params(&layer, &mut before);
        let mut optim = optimizer(&OptimizerConfig::default(), &layer);
        let layer = optim.step(0.1, layer, GradientsParams::new());
        let mut after = Vec::new();
        gradcomp_dp::params::read_params(&layer, &mut after);
        assert_eq!(before, after);
    }
}
