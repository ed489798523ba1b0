//! [`Backward`]: what a step's gradients come from. The loss itself (the
//! handle runs its backward pass and reads its value, which eSGD's selection
//! needs), a backward pass already run, or a backward pass in stages.

use burn::optim::GradientsParams;
use burn::tensor::{Gradients, Tensor};

use super::stages::StagedBackward;
use crate::params::GradSource;

/// A step's gradients and, when known, the worker's loss.
pub struct BackwardPass<G> {
    pub loss: Option<f64>,
    pub grads: Pass<G>,
}

/// The gradients of one backward pass: whole, or stage by stage.
pub enum Pass<G> {
    Whole(G),
    Staged(Box<StagedBackward>),
}

/// What [`DataParallel::step`](crate::DataParallel::step) takes as a step's
/// gradients:
///
/// - the loss tensor (`Tensor<1>`): the handle runs `backward()` and reads
///   the loss's value (for the step record, and eSGD's selection);
/// - the [`Gradients`] of a `backward()` already run, or burn's
///   [`GradientsParams`] (what burn-train hands over): no loss value;
/// - `(grads, loss)`: either of those with the loss's value;
/// - a [`StagedBackward`] (`cuts.backward(loss)`): the backward pass in
///   stages, each bucket leaving as soon as its stage is done.
pub trait Backward {
    type Grads: GradSource;
    /// Runs what is left to run of the backward pass (a staged one runs as
    /// the exchange pulls its stages).
    fn into_pass(self) -> BackwardPass<Self::Grads>;
}

impl Backward for Tensor<1> {
    type Grads = Gradients;
    fn into_pass(self) -> BackwardPass<Gradients> {
        let loss = f64::from(self.clone().into_scalar::<f32>());
        BackwardPass { loss: Some(loss), grads: Pass::Whole(self.backward()) }
    }
}

impl Backward for StagedBackward {
    type Grads = Gradients;
    fn into_pass(self) -> BackwardPass<Gradients> {
        BackwardPass { loss: self.loss(), grads: Pass::Staged(Box::new(self)) }
    }
}

impl Backward for Gradients {
    type Grads = Gradients;
    fn into_pass(self) -> BackwardPass<Gradients> {
        BackwardPass { loss: None, grads: Pass::Whole(self) }
    }
}

impl Backward for GradientsParams {
    type Grads = GradientsParams;
    fn into_pass(self) -> BackwardPass<GradientsParams> {
        BackwardPass { loss: None, grads: Pass::Whole(self) }
    }
}

/// Borrowed gradients: the caller keeps them (to hand the same gradients
/// to two handles).
impl<'a, G: GradSource> Backward for &'a G {
    type Grads = &'a G;
    fn into_pass(self) -> BackwardPass<&'a G> {
        BackwardPass { loss: None, grads: Pass::Whole(self) }
    }
}

impl<G: GradSource> Backward for (G, f64) {
    type Grads = G;
    fn into_pass(self) -> BackwardPass<G> {
        BackwardPass { loss: Some(self.1), grads: Pass::Whole(self.0) }
    }
}
