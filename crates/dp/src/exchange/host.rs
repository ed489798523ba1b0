//! [`HostCompression`]: the units' memories and compressors in host memory,
//! working on the flat gradient.

use gradcomp_compress::memory::Memory;
use gradcomp_compress::{Compressor, Message, UnitContext};

use super::local::{scalar_round, LocalCompression, ReduceOp};
use super::plan::Plan;
use super::recipe::Recipe;
use super::stats::measure;
use crate::error::ExchangeError;

/// Every unit's compressor and memory on the host.
pub(crate) struct HostCompression {
    pub compressors: Vec<Box<dyn Compressor>>,
    pub memories: Vec<Box<dyn Memory>>,
    /// Each unit's shared scalar from the last max round (TernGrad's).
    shared: Vec<Option<f32>>,
    scratch: Vec<f32>,
}

impl HostCompression {
    pub(crate) fn new(plan: &Plan, recipe: &Recipe) -> Self {
        let memories = plan
            .has_memory
            .iter()
            .map(|&m| if m { recipe.memory() } else { Box::new(gradcomp_compress::memory::NoMemory) as _ })
            .collect();
        HostCompression {
            compressors: plan.units.iter().map(|u| recipe.compressor(&u.shape)).collect(),
            memories,
            shared: vec![None; plan.units.len()],
            scratch: Vec::new(),
        }
    }

    /// The buffer unit `u` compresses: its memory's compensated gradient, or
    /// its slice of the gradient.
    fn input<'a>(&'a self, plan: &Plan, u: usize, grad: &'a [f32]) -> &'a [f32] {
        if plan.has_memory[u] {
            self.memories[u].residual()
        } else {
            let unit = &plan.units[u];
            &grad[unit.offset..unit.offset + unit.len]
        }
    }
}

impl LocalCompression for HostCompression {
    /// The compressors' own rounds (PowerSGD's two), or TernGrad's one.
    fn rounds(&self) -> usize {
        self.compressors.iter().map(|c| c.rounds()).max().unwrap_or(0).max(1)
    }

    fn compensate(&mut self, plan: &Plan, u: usize, grad: &[f32], lr: f32) -> Result<(), ExchangeError> {
        self.shared[u] = None;
        if plan.has_memory[u] {
            let unit = &plan.units[u];
            self.memories[u].compensate(&grad[unit.offset..unit.offset + unit.len], lr);
        }
        Ok(())
    }

    /// The compressor's own rounds; for one without, round 0 is its local
    /// scalar, max-reduced (TernGrad's shared scaler, ALGORITHMS.md §1.2).
    fn contribute(
        &mut self,
        plan: &Plan,
        u: usize,
        round: usize,
        grad: &[f32],
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, ExchangeError> {
        if plan.raw[u] {
            return Ok(None);
        }
        if self.compressors[u].rounds() > 0 {
            let x = if plan.has_memory[u] {
                self.memories[u].residual()
            } else {
                let unit = &plan.units[u];
                &grad[unit.offset..unit.offset + unit.len]
            };
            return Ok(self.compressors[u].round_contribution(round, x, ctx, out));
        }
        if round > 0 {
            return Ok(None);
        }
        let scalar = self.compressors[u].local_scalar(self.input(plan, u, grad));
        Ok(scalar_round(scalar, out))
    }

    fn agreed(&mut self, u: usize, round: usize, values: &[f32], workers: usize) {
        if self.compressors[u].rounds() > 0 {
            self.compressors[u].round_result(round, values, workers);
        } else {
            self.shared[u] = values.first().copied();
        }
    }

    fn compress(
        &mut self,
        plan: &Plan,
        u: usize,
        grad: &[f32],
        ctx: &UnitContext,
        msg: &mut Message,
        measured: bool,
    ) -> Result<Option<[f64; 3]>, ExchangeError> {
        let ctx = UnitContext { shared_scalar: self.shared[u], ..*ctx };
        let x = if plan.has_memory[u] {
            self.memories[u].residual()
        } else {
            let unit = &plan.units[u];
            &grad[unit.offset..unit.offset + unit.len]
        };
        self.compressors[u].compress(x, &ctx, msg);
        Ok(measured.then(|| measure(x, msg, &mut self.scratch)))
    }

    fn raw<'a>(&'a self, plan: &Plan, u: usize, grad: &'a [f32]) -> &'a [f32] {
        let unit = &plan.units[u];
        &grad[unit.offset..unit.offset + unit.len]
    }

    fn update(&mut self, u: usize, msg: &Message) -> Result<(), ExchangeError> {
        self.memories[u].update(msg);
        Ok(())
    }

    fn residual_norm(&self) -> Result<f64, ExchangeError> {
        let sq: f64 =
            self.memories.iter().map(|m| gradcomp_compress::reduce::sum_of_squares(m.residual())).sum();
        Ok(sq.sqrt())
    }

    fn extra(&self) -> Vec<(&'static str, f64)> {
        self.compressors.iter().map(|c| c.stats()).find(|s| !s.is_empty()).unwrap_or_default()
    }
}
