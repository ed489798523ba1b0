//! The one API a compressor implements per compression unit.
//!
//! # Protocol
//! For every unit (a tensor, or the whole flattened model at `global`
//! granularity), every step, on every worker (written once, in
//! [`CompressionUnit`](crate::unit::CompressionUnit), which every caller drives):
//!
//! 1. `memory.compensate(grad)` gives the buffer to compress (see [`crate::memory`]).
//! 2. Exchange rounds, if the compressor has any ([`Compressor::rounds`]):
//!    for each round in order, [`Compressor::round_contribution`] appends the
//!    values this worker contributes, the caller combines them across workers
//!    (a sum or a max, [`ReduceOp`]) and hands the result back through
//!    [`Compressor::round_result`]; a round may read the previous one's
//!    result (PowerSGD: P = MQ is summed, orthogonalized, then Q = MᵀP is
//!    summed; TernGrad's shared scaler is one max round of one value).
//! 3. [`Compressor::compress`] writes a [`Message`] into a caller-owned buffer.
//!    It never allocates once that buffer has grown to its steady-state size,
//!    never fails, and never panics on any finite or non-finite input (NaN
//!    detection is the trainer's job, before this point).
//! 4. The message is encoded ([`crate::codec`]), moved by the collective chosen
//!    from [`Compressor::combine`], decoded and aggregated; `memory.update`
//!    records what was sent.
//!
//! Which collective may carry a compressor's messages is a property of the
//! compressor ([`Combine`]), known before training starts, so a configuration
//! that pairs a compressor with a topology that cannot carry it is rejected
//! up front instead of hanging at run time.

use crate::message::Message;
use crate::rng::RngKey;

/// What a compressor needs besides its input.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnitContext {
    /// Seeds this unit's random stream (ALGORITHMS.md §6.7).
    pub key: RngKey,
    /// This worker's training loss at this step (eSGD's selection rule reads it).
    pub loss: Option<f64>,
}

/// How an exchange round combines the workers' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
}

/// How the messages of N workers combine, which decides the collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Dense f32 vectors that add elementwise: allreduce.
    DenseSum,
    /// Half-precision vectors, summed by a half-precision allreduce (each
    /// addition rounded to f16, as PyTorch's `fp16_compress_hook` sums):
    /// half of `DenseSum`'s bytes.
    HalfSum,
    /// Ternary codes under one shared scaler: the integer code sums are the
    /// aggregate (allreduce of small integers, or the parameter server with the
    /// compact `ceil(log2(2N+1))`-bit download).
    TernarySum,
    /// Every worker selects the same indices (Rand-k `same_seed`): allreduce of
    /// the k values alone.
    SharedIndexSum,
    /// Per-worker messages that do not add in compressed form: allgatherv, or a
    /// parameter server that decodes and sums them.
    Gather,
    /// Per-worker sign messages whose aggregate is the sign of their sum
    /// (signSGD's majority vote, ties to +1): allgatherv, or a parameter
    /// server that votes and sends the one-bit result down.
    MajorityVote,
    /// Per-worker sparse messages averaged per position over the workers
    /// that sent it (SparseLoCo's and DeMo's aggregate; a position no one
    /// sent is 0), each worker's values first scaled down to the median of
    /// the workers' norms when `clip` (Templar's): allgatherv, or a
    /// parameter server that does the same.
    SenderMean { clip: bool },
    /// The exchange rounds are the exchange: every worker's message is
    /// already the aggregate (PowerSGD's P Qᵀ after two allreduces), and
    /// nothing more travels.
    InRounds,
}

/// Compresses one unit's gradient into a [`Message`]. See the module docs for
/// the protocol and the contract on allocation and failure.
pub trait Compressor: Send {
    /// The configuration name (`terngrad`, `topk`, ...).
    fn name(&self) -> &'static str;

    /// How messages from different workers combine.
    fn combine(&self) -> Combine;

    /// Exchange rounds before [`Compressor::compress`] (0: none).
    fn rounds(&self) -> usize {
        0
    }

    /// Round `round`'s contribution for `input` (the compensated gradient):
    /// values appended to `out`, combined across workers with the returned
    /// operation; `None` when this step's round has nothing (and `out` is
    /// left as it was). Every worker contributes the same number of values.
    fn round_contribution(
        &mut self,
        _round: usize,
        _input: &[f32],
        _ctx: &UnitContext,
        _out: &mut Vec<f32>,
    ) -> Option<ReduceOp> {
        None
    }

    /// The combined values of round `round` over `workers` workers.
    fn round_result(&mut self, _round: usize, _combined: &[f32], _workers: usize) {}

    /// Compresses `input` into `out`, reusing `out`'s buffers.
    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message);

    /// State carried from step to step that an exact resume needs (PowerSGD's
    /// warm-start Q), as flat buffers; empty for most compressors.
    fn state(&self) -> Vec<&[f32]> {
        Vec::new()
    }

    /// Restores [`Compressor::state`] (as many buffers as it returns; an
    /// empty buffer is a compressor that has not run yet).
    fn restore(&mut self, _state: &[Vec<f32>]) -> Result<(), crate::StateError> {
        Ok(())
    }

    /// Sets the target density ρ for this step (density warm-up); ignored by
    /// compressors that have none.
    fn set_density(&mut self, _density: f64) {}

    /// The target density ρ, for compressors that have one.
    fn density(&self) -> Option<f64> {
        None
    }

    /// Named figures about the last call, for the step record (eSGD's
    /// replacements and importance scores); empty for most compressors.
    fn stats(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

impl Combine {
    /// Whether each worker's message travels as it is (allgatherv, or a
    /// parameter server): the messages do not add in compressed form.
    pub fn per_worker(self) -> bool {
        matches!(self, Combine::Gather | Combine::MajorityVote | Combine::SenderMean { .. })
    }
}

impl<C: Compressor + ?Sized> Compressor for Box<C> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn combine(&self) -> Combine {
        (**self).combine()
    }
    fn rounds(&self) -> usize {
        (**self).rounds()
    }
    fn round_contribution(
        &mut self,
        round: usize,
        input: &[f32],
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Option<ReduceOp> {
        (**self).round_contribution(round, input, ctx, out)
    }
    fn round_result(&mut self, round: usize, combined: &[f32], workers: usize) {
        (**self).round_result(round, combined, workers)
    }
    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        (**self).compress(input, ctx, out)
    }
    fn state(&self) -> Vec<&[f32]> {
        (**self).state()
    }
    fn restore(&mut self, state: &[Vec<f32>]) -> Result<(), crate::StateError> {
        (**self).restore(state)
    }
    fn set_density(&mut self, density: f64) {
        (**self).set_density(density)
    }
    fn density(&self) -> Option<f64> {
        (**self).density()
    }
    fn stats(&self) -> Vec<(&'static str, f64)> {
        (**self).stats()
    }
}

/// Compresses `input` as the only worker would: each exchange round's
/// combined values are this worker's own contribution. For tests,
/// benchmarks and single-worker tools; the exchange runs the rounds itself.
pub fn compress_as_sole_worker(c: &mut dyn Compressor, input: &[f32], ctx: &UnitContext, out: &mut Message) {
    agree_alone(c, input, ctx, &mut Vec::new(), |_, _| {});
    c.compress(input, ctx, out);
}

/// Runs `c`'s exchange rounds for `input` as the only worker (the combined
/// values are its own contribution, over 1 worker), showing each round's
/// values to `seen` (round, values); `scratch` holds them.
pub(crate) fn agree_alone(
    c: &mut dyn Compressor,
    input: &[f32],
    ctx: &UnitContext,
    scratch: &mut Vec<f32>,
    mut seen: impl FnMut(usize, &[f32]),
) {
    for round in 0..c.rounds() {
        scratch.clear();
        if c.round_contribution(round, input, ctx, scratch).is_some() {
            seen(round, scratch);
            c.round_result(round, scratch, 1);
        }
    }
}

/// `k = max(1, floor(ρ·d))`, capped at `d` (ALGORITHMS.md, notation).
pub fn k_for(density: f64, d: usize) -> usize {
    if d == 0 {
        return 0;
    }
    ((density * d as f64).floor() as usize).clamp(1, d)
}

/// The dense baseline: values sent as they are.
#[derive(Clone, Debug, Default)]
pub struct Dense;

impl Compressor for Dense {
    fn name(&self) -> &'static str {
        "dense"
    }
    fn combine(&self) -> Combine {
        Combine::DenseSum
    }
    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        let m = out.dense_mut();
        m.values.clear();
        m.values.extend_from_slice(input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_is_at_least_one_and_at_most_d() {
        assert_eq!(k_for(0.001, 100), 1);
        assert_eq!(k_for(0.001, 25_000_000), 25_000);
        assert_eq!(k_for(2.0, 10), 10);
        assert_eq!(k_for(0.5, 0), 0);
    }
}
