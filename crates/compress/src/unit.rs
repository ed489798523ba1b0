//! [`CompressionUnit`]: one unit's compressor and memory, and the protocol
//! over them ([`crate::compressor`]'s module doc: compensate → exchange
//! rounds → compress → update), written once. The exchange drives it with
//! the workers' combined round values; the performance model, the bytes API
//! and the sole-worker tools drive it through [`CompressionUnit::step_alone`].

use crate::compressor::{agree_alone, Compressor, ReduceOp, UnitContext};
use crate::memory::{Memory, NoMemory};
use crate::message::Message;

/// A compression unit's compressor and its memory (error feedback, DGC
/// momentum, or none).
pub struct CompressionUnit {
    compressor: Box<dyn Compressor>,
    memory: Box<dyn Memory>,
    /// Whether `memory` holds the compensated input; without one the input
    /// is the gradient itself.
    has_memory: bool,
    /// One round's values, when the unit runs its rounds alone.
    scratch: Vec<f32>,
}

impl CompressionUnit {
    /// `compressor` with `memory` (`None`: the gradient is compressed as it is).
    pub fn new(compressor: Box<dyn Compressor>, memory: Option<Box<dyn Memory>>) -> Self {
        let has_memory = memory.is_some();
        let memory = memory.unwrap_or_else(|| Box::new(NoMemory));
        CompressionUnit { compressor, memory, has_memory, scratch: Vec::new() }
    }

    pub fn compressor(&self) -> &dyn Compressor {
        &*self.compressor
    }

    pub fn compressor_mut(&mut self) -> &mut dyn Compressor {
        &mut *self.compressor
    }

    pub fn memory(&self) -> &dyn Memory {
        &*self.memory
    }

    pub fn memory_mut(&mut self) -> &mut dyn Memory {
        &mut *self.memory
    }

    /// 1. Folds this step's gradient `grad` (the unit's slice) into the
    ///    memory at learning rate `lr` (lr-scaled residuals read it).
    pub fn compensate(&mut self, grad: &[f32], lr: f32) {
        if self.has_memory {
            self.memory.compensate(grad, lr);
        }
    }

    /// The buffer the compressor reads: the memory's compensated gradient,
    /// or `grad` itself for a unit without a memory.
    pub fn input<'a>(&'a self, grad: &'a [f32]) -> &'a [f32] {
        input(self.has_memory, &*self.memory, grad)
    }

    /// The compressor's exchange rounds (0: none).
    pub fn rounds(&self) -> usize {
        self.compressor.rounds()
    }

    /// 2. This worker's contribution to round `round`, appended to `out`,
    ///    and how the workers' values combine (`None`: no part in it).
    pub fn contribute(
        &mut self,
        round: usize,
        grad: &[f32],
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Option<ReduceOp> {
        let x = input(self.has_memory, &*self.memory, grad);
        self.compressor.round_contribution(round, x, ctx, out)
    }

    /// The values of round `round` combined over `workers` workers.
    pub fn round_result(&mut self, round: usize, values: &[f32], workers: usize) {
        self.compressor.round_result(round, values, workers);
    }

    /// 3. Compresses the unit's input (after its rounds) into `msg`.
    pub fn compress(&mut self, grad: &[f32], ctx: &UnitContext, msg: &mut Message) {
        let x = input(self.has_memory, &*self.memory, grad);
        self.compressor.compress(x, ctx, msg);
    }

    /// 3, for one part: compresses the values `range` of the unit's input
    /// into `msg` (a reduce-scatter's shard; the compressor must keep no
    /// state across calls of its own).
    pub fn compress_part(
        &mut self,
        grad: &[f32],
        range: std::ops::Range<usize>,
        ctx: &UnitContext,
        msg: &mut Message,
    ) {
        let x = input(self.has_memory, &*self.memory, grad);
        self.compressor.compress(&x[range], ctx, msg);
    }

    /// 4. The memory keeps what `msg` did not send.
    pub fn update(&mut self, msg: &Message) {
        self.memory.update(msg);
    }

    /// The whole protocol as the only worker: compensate, each round with
    /// this worker's own values as the combined ones (shown to `seen` as
    /// (round, values)), compress into `msg`, update the memory.
    pub fn step_alone(
        &mut self,
        grad: &[f32],
        lr: f32,
        ctx: &UnitContext,
        msg: &mut Message,
        seen: impl FnMut(usize, &[f32]),
    ) {
        self.compensate(grad, lr);
        let x = input(self.has_memory, &*self.memory, grad);
        agree_alone(&mut *self.compressor, x, ctx, &mut self.scratch, seen);
        self.compress(grad, ctx, msg);
        self.update(msg);
    }
}

/// [`CompressionUnit::input`] from the fields it reads, so that methods
/// holding the compressor mutably can borrow the memory beside it.
fn input<'a>(has_memory: bool, memory: &'a dyn Memory, grad: &'a [f32]) -> &'a [f32] {
    if has_memory {
        memory.residual()
    } else {
        grad
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{ErrorFeedback, ResidualForm};
    use crate::rng::RngKey;
    use crate::CompressorConfig;

    fn ctx(step: u64) -> UnitContext {
        UnitContext { key: RngKey::new(5, 0, step, 0), ..Default::default() }
    }

    #[test]
    fn a_sole_worker_step_is_the_protocol_by_hand() {
        let g: Vec<f32> = (0..64).map(|i| ((i * 37) % 23) as f32 - 11.0).collect();
        for cfg in [CompressorConfig::topk(0.1), CompressorConfig::terngrad(), CompressorConfig::powersgd(1)]
        {
            let shape = [8, 8];
            let memory = || Some(Box::new(ErrorFeedback::new(ResidualForm::Raw)) as Box<dyn Memory>);
            let mut unit = CompressionUnit::new(cfg.build_for(&shape), memory());
            let (mut c, mut m) = (cfg.build_for(&shape), ErrorFeedback::new(ResidualForm::Raw));
            let (mut got, mut want) = (Message::default(), Message::default());
            for step in 0..3 {
                let mut rounds = 0;
                unit.step_alone(&g, 1.0, &ctx(step), &mut got, |_, _| rounds += 1);
                let acc = m.compensate(&g, 1.0).to_vec();
                crate::compress_as_sole_worker(&mut *c, &acc, &ctx(step), &mut want);
                m.update(&want);
                assert_eq!(got, want, "{} step {step}", cfg.name());
                assert_eq!(unit.memory().residual(), m.residual());
                // Top-k has none, TernGrad its scaler's; PowerSGD's warm-up
                // steps run round 0 alone (the plain average).
                assert!(
                    rounds <= c.rounds() && (rounds > 0) == (c.rounds() > 0),
                    "{} step {step}",
                    cfg.name()
                );
            }
        }
    }

    #[test]
    fn without_a_memory_the_input_is_the_gradient() {
        let g = [1.0f32, -2.0, 3.0];
        let mut unit = CompressionUnit::new(CompressorConfig::dense().build(), None);
        unit.compensate(&g, 1.0);
        assert_eq!(unit.input(&g), g);
        let mut msg = Message::default();
        unit.compress(&g, &ctx(0), &mut msg);
        let mut out = [0.0f32; 3];
        msg.decompress_into(&mut out);
        assert_eq!(out, g);
    }
}
