//! The values of one exchange round, gathered from the units that take
//! part, one buffer per reduce operation, and handed back to them once the
//! collectives have combined them.

use std::ops::Range;

use gradcomp_compress::UnitContext;

use super::gradient_side::{GradientSide, ReduceOp};
use super::plan::Plan;
use super::route::Route;
use crate::error::ExchangeError;

/// One round's values by operation, and where each unit's lie. Reused every
/// round and step.
#[derive(Default)]
pub(crate) struct RoundValues {
    /// Per operation (`REDUCE_OPS` order): the values to reduce.
    values: [Vec<f32>; 2],
    /// Per operation: (unit, its values' range).
    parts: [Vec<(usize, Range<usize>)>; 2],
    /// One unit's contribution.
    unit: Vec<f32>,
}

fn slot(op: ReduceOp) -> usize {
    match op {
        ReduceOp::Max => 0,
        ReduceOp::Sum => 1,
    }
}

impl RoundValues {
    /// Asks units `units` for their contributions to round `round`
    /// (`ctx(u)` is unit u's context); returns how many values came from
    /// units whose rounds are their whole exchange (they count as the
    /// unit's wire bytes).
    pub(crate) fn gather(
        &mut self,
        local: &mut dyn GradientSide,
        plan: &Plan,
        units: Range<usize>,
        round: usize,
        grad: &[f32],
        ctx: &dyn Fn(usize) -> UnitContext,
    ) -> Result<usize, ExchangeError> {
        self.values.iter_mut().for_each(Vec::clear);
        self.parts.iter_mut().for_each(Vec::clear);
        let mut agreed = 0;
        for u in units {
            self.unit.clear();
            if let Some(op) = local.contribute(plan, u, round, grad, &ctx(u), &mut self.unit)? {
                let values = &mut self.values[slot(op)];
                self.parts[slot(op)].push((u, values.len()..values.len() + self.unit.len()));
                values.extend_from_slice(&self.unit);
                if plan.units[u].route == Route::InRounds {
                    agreed += self.unit.len();
                }
            }
        }
        Ok(agreed)
    }

    /// The values of operation `op` to reduce (none: no collective), taken
    /// out to travel to the wire; [`RoundValues::hand_back`] returns them.
    pub(crate) fn take(&mut self, op: ReduceOp) -> Option<Vec<f32>> {
        let values = &mut self.values[slot(op)];
        (!values.is_empty()).then(|| std::mem::take(values))
    }

    /// Gives each unit its part of the reduced `values` of `op`, and keeps
    /// the buffer for the next round.
    pub(crate) fn hand_back(
        &mut self,
        op: ReduceOp,
        values: Vec<f32>,
        local: &mut dyn GradientSide,
        round: usize,
        workers: usize,
    ) {
        for (u, range) in &self.parts[slot(op)] {
            local.round_result(*u, round, &values[range.clone()], workers);
        }
        self.values[slot(op)] = values;
    }
}
