//! EF-SignSGD, the scaled sign with error feedback (Karimireddy et al., ICML
//! 2019; ALGORITHMS.md §9.3): `Δ = (‖x‖₁/d)·sign(x)` of the compensated
//! gradient x, the residual `x − Δ` kept by error feedback (the default
//! memory). Unlike a vote, the workers' Δ are averaged. GRACE's
//! `EFSignSGDCompressor` compresses the same way.

use serde::{Deserialize, Serialize};

use super::onebit::sign_message;
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::Method;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EfSignSgdConfig {}

#[derive(Clone, Debug, Default)]
pub struct EfSignSgd;

impl Compressor for EfSignSgd {
    fn name(&self) -> &'static str {
        "efsignsgd"
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        sign_message(input, out, |pos, _, neg| {
            let scale = scaled_sign(pos, neg, input.len());
            (scale, -scale)
        });
    }
}

/// ‖x‖₁/d from the sums of the non-negative and the negative elements,
/// saturating at f32::MAX (a NaN element makes it NaN, which the exchange's
/// non-finite check catches).
pub fn scaled_sign(pos_sum: f64, neg_sum: f64, d: usize) -> f32 {
    if d == 0 {
        return 0.0;
    }
    (((pos_sum - neg_sum) / d as f64) as f32).min(f32::MAX)
}

impl Method for EfSignSgdConfig {
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::ErrorFeedback
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(EfSignSgd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_becomes_the_mean_magnitude_with_its_sign() {
        let mut msg = Message::default();
        EfSignSgd.compress(&[1.0, -3.0, 0.0, 4.0], &UnitContext::default(), &mut msg);
        let mut out = vec![0.0; 4];
        msg.add_to(1.0, &mut out);
        assert_eq!(out, [2.0, -2.0, 2.0, 2.0]);
    }
}
