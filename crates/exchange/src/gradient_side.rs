//! [`GradientSide`]: the part of an exchange that runs where the
//! gradient is. The pipeline drives it the same way on the host
//! ([`HostCompression`](super::host::HostCompression)) and on a GPU
//! (`DeviceCompression`); only messages and a few values cross to the host.

pub(crate) use gradcomp_compress::ReduceOp;
use gradcomp_compress::{Message, UnitContext};

use super::plan::Plan;
use crate::error::ExchangeError;

/// Both reduce operations, in the order a round runs their collectives.
pub(crate) const REDUCE_OPS: [ReduceOp; 2] = [ReduceOp::Max, ReduceOp::Sum];

/// Each unit's memory and compressor, wherever they live. Units are
/// indices into the [`Plan`]; `grad` is the host gradient as filled so far
/// (empty where the gradient lives on the device, which then holds its own).
///
/// The pipeline calls, for a group of units that became ready: `compensate`
/// for each; then, for each exchange round, `contribute` for each and,
/// once the round's collectives are done, `round_result`; then `compress` for
/// each unit (the uncompressed ones excepted); and, once its bucket is back from the
/// wire, `update`. Errors are the device's (the host's calls cannot fail).
pub(crate) trait GradientSide {
    /// Exchange rounds before the compressors run (0: none).
    fn rounds(&self) -> usize;

    /// Folds unit `u`'s gradient into its memory (error feedback, DGC
    /// momentum): the unit's input is now the compensated gradient, or the
    /// gradient itself for a unit without a memory.
    fn compensate(&mut self, plan: &Plan, u: usize, grad: &[f32], lr: f32) -> Result<(), ExchangeError>;

    /// Unit `u`'s contribution to exchange round `round` (`ctx` is the
    /// unit's, as for compressing): values appended to `out`, combined
    /// across workers with the returned operation; `None` when the unit
    /// takes no part (and appends nothing).
    fn contribute(
        &mut self,
        plan: &Plan,
        u: usize,
        round: usize,
        grad: &[f32],
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, ExchangeError>;

    /// The combined values (over `workers` workers) of unit `u`'s
    /// contribution to round `round`.
    fn round_result(&mut self, u: usize, round: usize, values: &[f32], workers: usize);

    /// Compresses unit `u`'s input into `msg` (`ctx` seeds its randomness;
    /// the rounds' results are the unit's own). On a measured step, returns
    /// the unit's ‖x − C(x)‖², ‖x‖² and TernGrad bound ratio.
    fn compress(
        &mut self,
        plan: &Plan,
        u: usize,
        grad: &[f32],
        ctx: &UnitContext,
        msg: &mut Message,
        measure: bool,
    ) -> Result<Option<[f64; 3]>, ExchangeError>;

    /// The values of unit `u`, which travels uncompressed, on the host.
    fn uncompressed<'a>(&'a self, plan: &Plan, u: usize, grad: &'a [f32]) -> &'a [f32];

    /// Unit `u`'s memory keeps what `msg` did not send.
    fn update(&mut self, u: usize, msg: &Message) -> Result<(), ExchangeError>;

    /// ‖residual‖₂ over the units with a memory.
    fn residual_norm(&self) -> Result<f64, ExchangeError>;

    /// Compressor-specific figures of the last step (eSGD's), from the
    /// first unit that reports any.
    fn extra(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}
