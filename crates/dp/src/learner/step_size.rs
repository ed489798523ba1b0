//! [`GradcompOptimizer`]: a burn optimizer whose step size gradcomp's
//! burn-train strategy sets per worker and step.
//!
//! burn-train's `Learner` applies its own optimizer at its scheduler's
//! learning rate, and keeps both private. CELGC steps each worker at its
//! clipped step size `min(η, γ/‖g‖)` (with momentum, the clipped size scales
//! the momentum step, as the authors' `SGDClipGrad` does), which scaling the
//! gradient cannot reproduce. So the learner's optimizer is wrapped: the
//! strategy sets the factor η_eff/η on the worker's thread right before the
//! learner steps, and the wrapper multiplies the learning rate by it.

use std::cell::Cell;

use burn::optim::{LearningRate, Optimizer};
use burn::tensor::{Device, Tensor};

thread_local! {
    /// The factor this thread's next optimizer step applies to its learning rate.
    static SCALE: Cell<Option<f64>> = const { Cell::new(None) };
    /// Whether a wrapped optimizer applied the factor.
    static APPLIED: Cell<bool> = const { Cell::new(false) };
}

/// The burn optimizer `O` with a step size gradcomp's burn-train strategy
/// controls; pass it to `Learner::new` where CELGC runs under burn-train:
///
/// ```ignore
/// Learner::new(model, GradcompOptimizer(SgdConfig::new().build()).into(), lr)
/// ```
///
/// Outside a gradcomp worker's step it is `O` unchanged.
#[derive(Clone, Debug)]
pub struct GradcompOptimizer<O>(pub O);

impl<O: Optimizer> Optimizer for GradcompOptimizer<O> {
    type State<const D: usize> = O::State<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        let lr = match SCALE.with(Cell::get) {
            Some(scale) => {
                APPLIED.with(|a| a.set(true));
                lr * scale
            }
            None => lr,
        };
        self.0.step(lr, tensor, grad, state)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        O::to_device(state, device)
    }
}

/// Runs `step` (the learner's optimizer step) with the learning rate scaled
/// by `scale`; an error when the factor is not 1 and no wrapped optimizer
/// applied it.
pub(super) fn with_step_scale(scale: f64, step: impl FnOnce()) -> Result<(), String> {
    if scale == 1.0 {
        step();
        return Ok(());
    }
    SCALE.with(|s| s.set(Some(scale)));
    APPLIED.with(|a| a.set(false));
    step();
    SCALE.with(|s| s.set(None));
    if APPLIED.with(Cell::get) {
        Ok(())
    } else {
        Err("CELGC sets each worker's step size, which the Learner's optimizer ignores: wrap it, \
             Learner::new(model, GradcompOptimizer(SgdConfig::new().build()).into(), lr)"
            .into())
    }
}
