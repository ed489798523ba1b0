//! signSGD with majority vote (Bernstein et al., ICML 2018; ALGORITHMS.md
//! §9.1): every worker sends the sign of each element (1 bit, ≥ 0 counts as
//! +1), and the aggregate is the sign of the sum of the workers' signs, ties
//! going to +1 ([`Combine::MajorityVote`]), as GRACE's `SignSGDCompressor`
//! votes. The step is ±η per element whatever the gradient's scale, so the
//! learning rate is of the order of 1e-4.

use serde::{Deserialize, Serialize};

use super::onebit::sign_message;
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::Method;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignSgdConfig {}

#[derive(Clone, Debug, Default)]
pub struct SignSgd;

impl Compressor for SignSgd {
    fn name(&self) -> &'static str {
        "signsgd"
    }

    fn combine(&self) -> Combine {
        Combine::MajorityVote
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        unit_signs(input, out);
    }
}

/// `x`'s signs as a sign message of ±1 (NaN counts as negative, as in the
/// 1-bit quantizer, so the pattern stays defined).
pub(crate) fn unit_signs(x: &[f32], out: &mut Message) {
    sign_message(x, out, |_, _, _| (1.0, -1.0));
}

impl Method for SignSgdConfig {
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(SignSgd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_are_plus_and_minus_one_with_zero_positive() {
        let mut msg = Message::default();
        SignSgd.compress(&[0.5, -0.0, 0.0, -3.0, f32::NAN], &UnitContext::default(), &mut msg);
        let mut out = vec![0.0; 5];
        msg.add_to(1.0, &mut out);
        // -0.0 >= 0.0 holds in IEEE arithmetic, as in torch's `tensor >= 0`.
        assert_eq!(out, [1.0, 1.0, 1.0, -1.0, -1.0]);
    }
}
