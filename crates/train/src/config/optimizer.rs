//! The optimizer and its learning-rate schedule (`[optimizer]`, `[schedule]`).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerName {
    /// SGD with momentum (PyTorch semantics), Nesterov, L2 weight decay.
    Sgd,
    /// Adam with L2 weight decay.
    Adam,
    /// AdamW: Adam with decoupled weight decay.
    Adamw,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    pub name: OptimizerName,
    pub lr: f64,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    /// No weight decay on 1-D parameters (biases), as in Shi et al.'s code.
    pub no_decay_on_biases: bool,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self {
            name: OptimizerName::Sgd,
            lr: 0.01,
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
            no_decay_on_biases: false,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    Constant,
    /// lr × gamma^(epoch / step_epochs).
    Step,
    /// lr × (1 − t/T)^power over all steps (TernGrad's default, power 0.5).
    Poly,
    /// lr / (2·(e + 1)) in epoch e (0-based): eSGD's η_e = 0.1/(2e), epochs from 1.
    InverseEpoch,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleConfig {
    pub kind: ScheduleKind,
    pub step_epochs: u32,
    pub gamma: f64,
    pub power: f64,
    /// Linear warm-up from lr/warmup_steps to lr over this many epochs.
    pub warmup_epochs: f64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self { kind: ScheduleKind::Constant, step_epochs: 1, gamma: 0.1, power: 0.5, warmup_epochs: 0.0 }
    }
}
