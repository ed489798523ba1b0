//! The [`Strategy`] trait: how the workers combine their work each step.

use gradcomp_comm::Collective;

use crate::error::ExchangeError;
use crate::{ExchangeStats, Gradient, StateBuffers, StepInput, Unit};

/// What a strategy made of one step: the gradient it left in the caller's
/// `out` is applied at `lr`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Update {
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
    /// The configuration name (`sync`, `celgc`, `local`), for messages.
    #[cfg_attr(not(feature = "device-kernels"), allow(dead_code))]
    fn name(&self) -> &'static str;

    /// This worker's step: its gradient combined with the others' into
    /// `out` (every step for the synchronous exchange; local updates keep
    /// their own gradient), the gradient (in gradient units) to apply at
    /// [`Update::lr`]. A host gradient may arrive in stages: a strategy that
    /// can send part of it while the rest is computed does (the synchronous
    /// exchange), the others complete it first. A device gradient comes only
    /// after [`to_device`](Strategy::to_device) succeeded. `out` has the
    /// layout's length.
    fn update(
        &mut self,
        input: &StepInput,
        grad: Gradient<'_>,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Update, ExchangeError>;

    /// Whether every worker's model is identical after every step (true for
    /// synchronous exchange and naive parallel clipping; local updates'
    /// models agree only right after an outer round).
    fn identical_replicas(&self) -> bool;

    /// Sets the sparsifiers' target density for the coming steps (density warm-up).
    fn set_density(&mut self, rho: f64);

    /// The compression units of the gradient exchange, if the strategy has one.
    fn units(&self) -> &[Unit];

    /// The state an exact resume needs (memories, θ_outer, the clipping
    /// norm); an error if it lives on a device that cannot be read.
    fn state(&self) -> Result<StateBuffers, ExchangeError>;

    /// Restores [`Strategy::state`]. Errors (naming the buffer) if a buffer
    /// is missing or its length does not fit this model and configuration.
    fn restore(&mut self, state: &StateBuffers) -> Result<(), gradcomp_compress::StateError>;

    /// The strategy's outer rounds, if it averages the workers' models
    /// between steps (local updates); `None` for a strategy that does not.
    fn averaging(&self) -> Option<&dyn ModelAveraging> {
        None
    }

    /// [`Strategy::averaging`], to run a round.
    fn averaging_mut(&mut self) -> Option<&mut dyn ModelAveraging> {
        None
    }

    /// Moves the strategy's compression (memories and compressors) to the
    /// device of `client`, so that [`Strategy::update`] takes device
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

/// The capability of a strategy that averages the workers' models in outer
/// rounds (local updates: CELGC's averaging, DiLoCo, Streaming DiLoCo). A
/// front asks [`Strategy::averaging`] for it and, at every step where
/// [`ModelAveraging::due`] is true, hands it the flat model before that
/// step's forward pass (the burn front) or after that many inner steps (the
/// PyTorch front): the same call, so both fronts run the same rounds.
///
/// The collective contract is [`Strategy`]'s: every worker calls
/// [`ModelAveraging::average`] at the same steps.
pub trait ModelAveraging: Send {
    /// Whether step `step` has an outer round's work (step 0 records the
    /// starting model; then a round's start, its merge, or both).
    fn due(&self, step: u64) -> bool;

    /// Whether every worker holds the same model right after the round at
    /// `step` (CELGC's and DiLoCo's; not a Streaming fragment's, which
    /// leaves the rest of the model local, nor one mixed with α > 0): when
    /// the caller may compare replica checksums.
    fn agrees_after(&self, step: u64) -> bool;

    /// The round's work at `step` on the flat model `params`, in place: a
    /// round in flight landed and merged, then the rounds starting here
    /// started (on the round thread when they overlap later steps). Called
    /// only at a step where [`ModelAveraging::due`] is true, or at an
    /// epoch end (CELGC's optional extra round).
    fn average(&mut self, step: u64, params: &mut [f32], c: &mut dyn Collective)
        -> Result<(), ExchangeError>;

    /// Under membership (workers that change between rounds): the next
    /// round's average divides by `contributors` workers' changes, not by
    /// its whole group, because a worker healed from a peer just before it
    /// holds θ_outer and sends a zero change. Every worker of the round
    /// passes the same number. An error where the strategy keeps no θ_outer.
    fn set_contributors(&mut self, contributors: usize) -> Result<(), ExchangeError>;

    /// What the rounds moved on a channel of their own since the last call
    /// (a round's exchange on the round thread, [`Collective::duplicate`]),
    /// which the caller counts as the step's: it calls this after
    /// [`ModelAveraging::average`].
    fn take_channel_bytes(&mut self) -> gradcomp_comm::StepBytes {
        gradcomp_comm::StepBytes::default()
    }

    /// Waits for a round in flight (a checkpoint, or the end of a run) and
    /// reports its failure; its merge stays due.
    fn wait(&mut self) -> Result<(), ExchangeError> {
        Ok(())
    }

    /// When the outer rounds start and merge, for a strategy that has a
    /// schedule of periods (local updates).
    fn schedule(&self) -> Option<&super::OuterSchedule> {
        None
    }

    /// Periods of `period` inner steps from `boundary` on, a period's end
    /// (`plan = "auto"` deciding again): every worker calls it at the same
    /// boundary with the same period. An error where the rounds' period
    /// cannot change there.
    fn set_period_from(&mut self, boundary: u64, period: u64) -> Result<(), ExchangeError> {
        let _ = (boundary, period);
        Err(ExchangeError::Usage("this strategy's outer rounds have no period to decide again".into()))
    }
}
