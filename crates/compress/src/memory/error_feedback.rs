//! Error feedback (error compensation), ALGORITHMS.md §3.1: the part of the
//! compensated gradient that was not sent is added to the next step's.

use serde::{Deserialize, Serialize};

use super::{remove_sent, Memory};
use crate::message::Message;

/// Where the learning rate enters (ALGORITHMS.md §6.1). Never mix them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResidualForm {
    /// `acc = g + e`: the residual holds raw gradients; lr, momentum and weight
    /// decay are applied after aggregation (the authors' code; default).
    #[default]
    Raw,
    /// `acc = e + η·g` and the update is `x −= G` (the paper's Algorithm 1).
    LrScaled,
}

/// The residual memory `e`: `acc = β·e + g` (β = `decay`, 1 but for the
/// change compressors: SparseLoCo's 0.95, DeMo's 0.999).
#[derive(Clone, Debug)]
pub struct ErrorFeedback {
    pub form: ResidualForm,
    pub decay: f32,
    /// Holds `acc` between `compensate` and `update`, and `e` otherwise.
    residual: Vec<f32>,
}

impl ErrorFeedback {
    pub fn new(form: ResidualForm) -> Self {
        Self::with_decay(form, 1.0)
    }

    pub fn with_decay(form: ResidualForm, decay: f32) -> Self {
        Self { form, decay, residual: Vec::new() }
    }
}

impl Memory for ErrorFeedback {
    fn compensate<'a>(&'a mut self, grad: &'a [f32], lr: f32) -> &'a [f32] {
        if self.residual.len() != grad.len() {
            self.residual.clear();
            self.residual.resize(grad.len(), 0.0);
        }
        let scale = match self.form {
            ResidualForm::Raw => 1.0,
            ResidualForm::LrScaled => lr,
        };
        if self.decay == 1.0 {
            for (e, &g) in self.residual.iter_mut().zip(grad) {
                *e += scale * g;
            }
        } else {
            // Two roundings, as the references' `e.mul_(β); e.add_(g)`.
            let decay = self.decay;
            for (e, &g) in self.residual.iter_mut().zip(grad) {
                *e = *e * decay + scale * g;
            }
        }
        &self.residual
    }

    fn update(&mut self, sent: &Message) {
        remove_sent(&mut self.residual, sent, None);
    }

    fn residual(&self) -> &[f32] {
        &self.residual
    }

    fn state(&self) -> Vec<&[f32]> {
        vec![&self.residual]
    }

    fn restore(&mut self, state: &[Vec<f32>]) -> Result<(), crate::StateError> {
        crate::state::expect_buffers("error feedback", state, 1)?;
        self.residual.clone_from(&state[0]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compressor::{Compressor, UnitContext};
    use crate::sparsify::{TopK, TopKConfig};

    #[test]
    fn residual_is_what_was_not_sent() {
        let mut ef = ErrorFeedback::new(ResidualForm::Raw);
        let mut c = TopK::compressor(&TopKConfig { density: 0.25, ..Default::default() });
        let mut msg = Message::default();
        let g = [1.0, -4.0, 2.0, 0.5];
        let acc = ef.compensate(&g, 0.1).to_vec();
        c.compress(&acc, &UnitContext::default(), &mut msg);
        ef.update(&msg);
        assert_eq!(ef.residual(), &[1.0, 0.0, 2.0, 0.5]);
        let acc = ef.compensate(&g, 0.1).to_vec();
        assert_eq!(acc, [2.0, -4.0, 4.0, 1.0]);
    }

    #[test]
    fn lr_scaled_form_scales_the_gradient() {
        let mut ef = ErrorFeedback::new(ResidualForm::LrScaled);
        assert_eq!(ef.compensate(&[2.0, 4.0], 0.5), &[1.0, 2.0]);
    }
}
