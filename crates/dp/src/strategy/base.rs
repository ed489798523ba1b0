//! Strategies: how the workers combine their work each step.
//!
//! A [`Strategy`] turns each worker's gradient into the update every worker
//! applies, and may average the workers' models now and then. Two implement
//! it:
//!
//! - [`Synchronous`]: compressed gradient exchange every step
//!   ([`GradientExchange`]: memory → compressor → codec → collective → decode
//!   → aggregate → memory update). eSGD and DGC are compressors and memories
//!   inside it; DGC's local clipping is an option of it.
//! - [`Celgc`]: local SGD with per-worker norm clipping and model averaging
//!   every I steps (ALGORITHMS.md §2), or, averaging gradients with I = 1,
//!   naive parallel clipping.
//!
//! The library's [`DataParallel`](crate::api::DataParallel) handle drives a
//! strategy through this trait and knows nothing else of it; so does the
//! built-in trainer, which drives the handle.

mod celgc;
mod exchange;
mod sync;

pub use celgc::Celgc;
pub use exchange::{
    bucket_bytes, cut_buckets, BucketTimes, ExchangeStats, GradientExchange, Unit, WireCall, WireKind,
};
pub use sync::Synchronous;

use std::collections::BTreeMap;

use gradcomp_comm::{Collective, CommError};
use gradcomp_compress::codec::CodecError;

/// This worker's step, as a strategy sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepInput {
    /// The step number, from 0. With the rank and the unit it seeds every
    /// random choice of the compressors, and it decides CELGC's rounds.
    pub step: u64,
    /// The learning rate the caller's optimizer applies this step (positive).
    pub lr: f64,
    /// This worker's training loss, when the caller reported it (eSGD's
    /// selection reads it).
    pub loss: Option<f64>,
    /// Measure the contraction ratio and TernGrad's bound ratios this step.
    pub measure: bool,
}

/// What a strategy made of one step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Combined {
    /// The learning rate to apply to the combined gradient: the caller's,
    /// or CELGC's clipped step `min(η, γ/‖g‖)`.
    pub lr: f64,
    /// Bytes, times and compression statistics of the exchange.
    pub stats: ExchangeStats,
    /// Strategy-specific figures for the step record (CELGC's effective step
    /// size, gradient norm, whether it clipped and whether it communicated);
    /// compressors' own figures are in [`ExchangeStats::extra`].
    pub extra: Vec<(&'static str, f64)>,
}

/// Why a strategy could not complete a step.
#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    #[error(transparent)]
    Comm(#[from] CommError),
    #[error("corrupt message from worker {rank}: {source}")]
    Codec { rank: usize, source: CodecError },
    /// A device kernel or transfer failed (the device was lost, or a buffer
    /// did not hold what it should).
    #[error("the device exchange failed: {0}")]
    Device(String),
    /// The caller broke a rule of the call (a gradient of the wrong size,
    /// a parameter in two backward stages).
    #[error("{0}")]
    Usage(String),
}

/// A worker's gradient as it becomes ready: all at once ([`Whole`]), or in
/// stages from a staged backward pass, output layers first, so the first
/// buckets go on the wire while the rest of the backward pass runs.
pub trait GradStages {
    /// The flat gradient as filled so far (zeros where no stage has written).
    fn grad(&self) -> &[f32];
    /// Computes the next stage into the gradient and appends the flat
    /// ranges it filled to `filled`; returns false, filling nothing, when
    /// no stage was left: the gradient is then complete.
    fn next_stage(&mut self, filled: &mut Vec<std::ops::Range<usize>>) -> Result<bool, StrategyError>;
}

/// Runs every stage left and returns the complete gradient.
pub(crate) fn complete(stages: &mut dyn GradStages) -> Result<Vec<f32>, StrategyError> {
    let mut filled = Vec::new();
    while stages.next_stage(&mut filled)? {}
    Ok(stages.grad().to_vec())
}

/// A gradient that is complete from the start.
pub struct Whole<'a>(pub &'a [f32]);

impl GradStages for Whole<'_> {
    fn grad(&self) -> &[f32] {
        self.0
    }
    fn next_stage(&mut self, _filled: &mut Vec<std::ops::Range<usize>>) -> Result<bool, StrategyError> {
        Ok(false)
    }
}

/// A strategy's state, for checkpoints: named flat buffers.
pub type StateBuffers = BTreeMap<String, Vec<f32>>;

/// How the workers' gradients (or models) are combined.
///
/// # Contract
/// - **Collective use.** Every method that takes a [`Collective`] is called
///   by every worker with the same arguments except the data (`step`,
///   `lr` schedule and configuration are the same everywhere), in the same
///   order, so the collectives inside match. A worker that skips a call
///   leaves the others to fail with the collective's error; nothing hangs.
/// - **Ownership.** Buffers are the caller's: `grad`, `out` and `params`
///   are flat, in the model's [layout](crate::GradientLayout) order, and the
///   strategy keeps no reference to them. A strategy owns its memories
///   (error feedback, DGC momentum, CELGC's anchor) and its reused scratch;
///   it does not allocate per step once they have grown.
/// - **Failures.** Errors are [`StrategyError::Comm`] (a peer failed, timed
///   out, or called a different operation: the collective's own error,
///   returned on every worker) or [`StrategyError::Codec`] (a message that
///   does not decode, naming the worker that sent it). After an error the
///   strategy's state is unspecified: the step must not be applied and the
///   run ends (resume from a checkpoint). A peer's failure is never turned
///   into a partial result.
/// - **Determinism.** Given the same inputs on every worker, the combined
///   gradient and the averaged parameters are bitwise identical on every
///   worker: every sum is taken in the same order everywhere.
pub trait Strategy: Send {
    /// The configuration name (`sync`, `celgc`).
    fn name(&self) -> &'static str;

    /// Whether step `step` begins with a round that averages the workers'
    /// models, before the step's gradient is computed. When it does, the
    /// caller must call [`Strategy::average_models`] before
    /// [`Strategy::combine`] for that step.
    fn averages_models(&self, step: u64) -> bool;

    /// Averages the workers' parameters `params` in place (every worker ends
    /// with the same values). Called only at a step where
    /// [`Strategy::averages_models`] is true.
    fn average_models(
        &mut self,
        step: u64,
        params: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<(), StrategyError>;

    /// Combines this worker's gradient `grad` into `out`, the gradient (in
    /// gradient units) to apply at [`Combined::lr`]. `grad` may be modified
    /// (DGC's local clipping scales it in place). `grad` and `out` have the
    /// layout's length and hold only finite values on entry (the caller
    /// checks).
    fn combine(
        &mut self,
        input: &StepInput,
        grad: &mut [f32],
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Combined, StrategyError>;

    /// Whether [`combine_staged`](Strategy::combine_staged) starts on part
    /// of the gradient; when not, it waits for the whole of it.
    fn streams(&self) -> bool {
        false
    }

    /// [`combine`](Strategy::combine) with the gradient computed in stages
    /// by `stages`; `grad` is `stages`' buffer once it is complete. A
    /// strategy that [streams](Strategy::streams) sends each part as it
    /// is ready; the default waits for every stage, then combines.
    fn combine_staged(
        &mut self,
        input: &StepInput,
        stages: &mut dyn GradStages,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Combined, StrategyError> {
        let mut grad = complete(stages)?;
        self.combine(input, &mut grad, out, c)
    }

    /// Whether every worker's model is identical after every step (true for
    /// synchronous exchange and naive parallel clipping; CELGC's models
    /// agree only right after a round).
    fn identical_replicas(&self) -> bool;

    /// Sets the sparsifiers' target density for the coming steps (density warm-up).
    fn set_density(&mut self, rho: f64);

    /// The compression units of the gradient exchange, if the strategy has one.
    fn units(&self) -> &[Unit];

    /// The state an exact resume needs (memories, CELGC's anchor and norm).
    fn state(&self) -> StateBuffers;

    /// Restores [`Strategy::state`]. Errors (naming the buffer) if a buffer
    /// is missing or its length does not fit this model and configuration.
    fn restore(&mut self, state: &StateBuffers) -> Result<(), String>;

    /// Moves the strategy's compression (memories and compressors) to the
    /// device of `client`, so that [`Strategy::combine_device`] can run; the
    /// error says why the strategy has no device form, and the caller keeps
    /// [`Strategy::combine`].
    #[cfg(feature = "device-kernels")]
    fn to_device(&mut self, _client: &gradcomp_kernels::Client) -> Result<(), String> {
        Err(format!("strategy `{}` compresses on the host", self.name()))
    }

    /// [`Strategy::combine`] for a gradient in device memory, after
    /// [`Strategy::to_device`] succeeded: the same result, with only the
    /// messages crossing to the host.
    #[cfg(feature = "device-kernels")]
    fn combine_device(
        &mut self,
        _input: &StepInput,
        _grad: &crate::device_grad::DeviceGrad,
        _out: &mut [f32],
        _c: &mut dyn Collective,
    ) -> Result<Combined, StrategyError> {
        Err(StrategyError::Device(format!("strategy `{}` has no device form", self.name())))
    }
}
