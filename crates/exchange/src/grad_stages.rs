//! [`GradStages`]: a worker's gradient as it becomes ready, all at once or
//! stage by stage from a staged backward pass, so the exchange can send the
//! output layers' buckets while the earlier layers' gradients are computed.

use std::ops::Range;

use crate::error::ExchangeError;

/// A worker's flat gradient as it becomes ready: complete from the start
/// ([`CompleteGrad`]), or in stages from a staged backward pass, output
/// layers first.
pub trait GradStages {
    /// The flat gradient as filled so far (zeros where no stage has written).
    fn grad(&self) -> &[f32];
    /// Computes the next stage into the gradient and appends the flat
    /// ranges it filled to `filled`; returns false, filling nothing, when
    /// no stage was left: the gradient is then complete.
    fn next_stage(&mut self, filled: &mut Vec<Range<usize>>) -> Result<bool, ExchangeError>;

    /// Runs every stage left; the gradient is then complete.
    fn complete(&mut self) -> Result<(), ExchangeError> {
        let mut filled = Vec::new();
        while self.next_stage(&mut filled)? {
            filled.clear();
        }
        Ok(())
    }
}

/// A gradient that is complete from the start.
pub struct CompleteGrad<'a>(pub &'a [f32]);

impl GradStages for CompleteGrad<'_> {
    fn grad(&self) -> &[f32] {
        self.0
    }
    fn next_stage(&mut self, _filled: &mut Vec<Range<usize>>) -> Result<bool, ExchangeError> {
        Ok(false)
    }
}
