//! The [`Strategy`] trait: how the workers combine their work each step.

use gradcomp_comm::Collective;

use crate::error::ExchangeError;
use crate::{ExchangeStats, Gradient, StateBuffers, StepInput, Unit};

/// What a strategy made of one step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepResult {
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

/// How the workers' gradients (or models) come together each step.
///
/// # Contract
/// - **Collective use.** Every method that takes a [`Collective`] is called
///   by every worker with the same arguments except the data (`step`,
///   `lr` schedule and configuration are the same everywhere), in the same
///   order, so the collectives inside match. A worker that skips a call
///   leaves the others to fail with the collective's error; nothing hangs.
/// - **Ownership.** Buffers are the caller's: the gradient, `out` and
///   `params` are flat, in the model's [layout](crate::GradientLayout)
///   order, and the strategy keeps no reference to them. A strategy owns
///   its memories (error feedback, DGC momentum, CELGC's anchor) and its
///   reused scratch; it does not allocate per step once they have grown
///   (beyond the exchange's step statistics).
/// - **Failures.** Errors are [`ExchangeError::Comm`] (a peer failed, timed
///   out, or called a different operation: the collective's own error,
///   returned on every worker) or [`ExchangeError::Codec`] (a message that
///   does not decode, naming the worker that sent it). After an error the
///   strategy's state is unspecified: the step must not be applied and the
///   run ends (resume from a checkpoint). A peer's failure is never turned
///   into a partial result.
/// - **Determinism.** Given the same inputs on every worker, the combined
///   gradient and the averaged parameters are bitwise identical on every
///   worker: every sum is taken in the same order everywhere.
pub trait Strategy: Send {
    /// The configuration name (`sync`, `celgc`), for messages.
    #[cfg_attr(not(feature = "device-kernels"), allow(dead_code))]
    fn name(&self) -> &'static str;

    /// Whether step `step` begins with a round that averages the workers'
    /// models, before the step's gradient is computed. When it does, the
    /// caller must call [`Strategy::average_models`] before
    /// [`Strategy::step`] for that step.
    fn averages_models(&self, step: u64) -> bool;

    /// Whether every worker holds the same model right after the round at
    /// `step` (CELGC's and DiLoCo's; not a Streaming fragment's, which
    /// leaves the rest of the model local, nor one mixed with α > 0): when
    /// the caller may compare replica checksums.
    fn agrees_after_round(&self, step: u64) -> bool;

    /// Averages the workers' parameters `params` in place (every worker ends
    /// with the same values). Called only at a step where
    /// [`Strategy::averages_models`] is true, or at an epoch end.
    fn average_models(
        &mut self,
        step: u64,
        params: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<(), ExchangeError>;

    /// The bytes the strategy moved on a channel of its own since the last
    /// call (a Streaming round's exchange on its round thread,
    /// [`Collective::duplicate`]), which the caller counts as the step's: it
    /// calls this after [`Strategy::average_models`]. The default moves
    /// nothing there.
    fn take_channel_bytes(&mut self) -> gradcomp_comm::StepBytes {
        gradcomp_comm::StepBytes::default()
    }

    /// This worker's step: its gradient combined with the others' into
    /// `out` (every step for the synchronous exchange; CELGC's local steps
    /// keep their own gradient), the gradient (in
    /// gradient units) to apply at [`StepResult::lr`]. A host gradient may
    /// arrive in stages: a strategy that can send part of it while the rest
    /// is computed does (the synchronous exchange), the others complete it
    /// first. A device gradient comes only after
    /// [`to_device`](Strategy::to_device) succeeded. `out` has the layout's
    /// length.
    fn step(
        &mut self,
        input: &StepInput,
        grad: Gradient<'_>,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<StepResult, ExchangeError>;

    /// Whether every worker's model is identical after every step (true for
    /// synchronous exchange and naive parallel clipping; CELGC's models
    /// agree only right after a round).
    fn identical_replicas(&self) -> bool;

    /// Sets the sparsifiers' target density for the coming steps (density warm-up).
    fn set_density(&mut self, rho: f64);

    /// The compression units of the gradient exchange, if the strategy has one.
    fn units(&self) -> &[Unit];

    /// The state an exact resume needs (memories, CELGC's anchor and norm);
    /// an error if it lives on a device that cannot be read.
    fn state(&self) -> Result<StateBuffers, ExchangeError>;

    /// Restores [`Strategy::state`]. Errors (naming the buffer) if a buffer
    /// is missing or its length does not fit this model and configuration.
    fn restore(&mut self, state: &StateBuffers) -> Result<(), gradcomp_compress::StateError>;

    /// Moves the strategy's compression (memories and compressors) to the
    /// device of `client`, so that [`Strategy::step`] takes device
    /// gradients; the error says why the strategy has no device form, and
    /// the caller keeps the host.
    #[cfg(feature = "device-kernels")]
    fn to_device(&mut self, _client: &gradcomp_kernels::Client) -> Result<(), crate::error::NoDeviceForm> {
        Err(crate::error::NoDeviceForm::HostOnly(format!(
            "strategy `{}` compresses on the host",
            self.name()
        )))
    }
}
