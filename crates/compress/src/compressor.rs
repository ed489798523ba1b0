//! The one API the trainer drives per compression unit.
//!
//! # Protocol
//! For every unit (a tensor, or the whole flattened model at `global`
//! granularity), every step, on every worker:
//!
//! 1. `memory.compensate(grad)` gives the buffer to compress (see [`crate::memory`]).
//! 2. If [`Compressor::local_scalar`] returns `Some(s_i)`, the caller reduces it
//!    across workers with a max (TernGrad's scalar sharing, ALGORITHMS.md §1.2)
//!    and passes the result as [`UnitContext::shared_scalar`]. A caller that
//!    does not share passes `None` and the compressor uses its local value.
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
    /// The max over workers of [`Compressor::local_scalar`], if the caller shares.
    pub shared_scalar: Option<f32>,
    /// This worker's training loss at this step (eSGD's selection rule reads it).
    pub loss: Option<f64>,
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
}

/// Compresses one unit's gradient into a [`Message`]. See the module docs for
/// the protocol and the contract on allocation and failure.
pub trait Compressor: Send {
    /// The configuration name (`terngrad`, `topk`, ...).
    fn name(&self) -> &'static str;

    /// How messages from different workers combine.
    fn combine(&self) -> Combine;

    /// Phase one of a two-phase compressor: the value this worker contributes
    /// to a max-reduce before compressing. `None` for one-phase compressors.
    fn local_scalar(&self, _input: &[f32]) -> Option<f32> {
        None
    }

    /// Compresses `input` into `out`, reusing `out`'s buffers.
    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message);

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

impl<C: Compressor + ?Sized> Compressor for Box<C> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn combine(&self) -> Combine {
        (**self).combine()
    }
    fn local_scalar(&self, input: &[f32]) -> Option<f32> {
        (**self).local_scalar(input)
    }
    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        (**self).compress(input, ctx, out)
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
