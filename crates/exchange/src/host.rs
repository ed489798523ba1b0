//! [`HostCompression`]: the units' memories and compressors in host memory,
//! working on the flat gradient.

use gradcomp_compress::{CompressionUnit, Message, UnitContext};

use super::gradient_side::{GradientSide, ReduceOp};
use super::plan::Plan;
use super::recipe::Recipe;
use super::stats::measure;
use crate::error::ExchangeError;

/// Every unit's compressor and memory on the host, one
/// [`CompressionUnit`] each (the protocol is written there once).
pub(crate) struct HostCompression {
    pub units: Vec<CompressionUnit>,
    scratch: Vec<f32>,
}

impl HostCompression {
    pub(crate) fn new(plan: &Plan, recipe: &Recipe) -> Self {
        let units = plan
            .units
            .iter()
            .map(|u| {
                CompressionUnit::new(
                    recipe.compressor(&u.shape),
                    if u.has_memory { recipe.memory() } else { None },
                )
            })
            .collect();
        HostCompression { units, scratch: Vec::new() }
    }
}

/// Unit `u`'s slice of the flat gradient.
fn slice<'a>(plan: &Plan, u: usize, grad: &'a [f32]) -> &'a [f32] {
    let unit = &plan.units[u];
    &grad[unit.offset..unit.offset + unit.len]
}

impl GradientSide for HostCompression {
    /// The compressors' rounds: PowerSGD's two, TernGrad's shared scaler's one.
    fn rounds(&self) -> usize {
        self.units.iter().map(CompressionUnit::rounds).max().unwrap_or(0)
    }

    fn compensate(&mut self, plan: &Plan, u: usize, grad: &[f32], lr: f32) -> Result<(), ExchangeError> {
        self.units[u].compensate(slice(plan, u, grad), lr);
        Ok(())
    }

    fn contribute(
        &mut self,
        plan: &Plan,
        u: usize,
        round: usize,
        grad: &[f32],
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, ExchangeError> {
        if plan.units[u].uncompressed {
            return Ok(None);
        }
        Ok(self.units[u].contribute(round, slice(plan, u, grad), ctx, out))
    }

    fn round_result(&mut self, u: usize, round: usize, values: &[f32], workers: usize) {
        self.units[u].round_result(round, values, workers);
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
        let grad = slice(plan, u, grad);
        self.units[u].compress(grad, ctx, msg);
        Ok(measured.then(|| measure(self.units[u].input(grad), msg, &mut self.scratch)))
    }

    fn uncompressed<'a>(&'a self, plan: &Plan, u: usize, grad: &'a [f32]) -> &'a [f32] {
        slice(plan, u, grad)
    }

    fn update(&mut self, u: usize, msg: &Message) -> Result<(), ExchangeError> {
        self.units[u].update(msg);
        Ok(())
    }

    fn residual_norm(&self) -> Result<f64, ExchangeError> {
        let sq: f64 =
            self.units.iter().map(|c| gradcomp_compress::reduce::sum_of_squares(c.memory().residual())).sum();
        Ok(sq.sqrt())
    }

    fn extra(&self) -> Vec<(&'static str, f64)> {
        self.units.iter().map(|c| c.compressor().stats()).find(|s| !s.is_empty()).unwrap_or_default()
    }
}
