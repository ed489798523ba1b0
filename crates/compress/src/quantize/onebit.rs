//! 1-bit SGD (Seide et al., 2014), ALGORITHMS.md §5: send the sign of every
//! element and two reconstruction values, the mean of the non-negative
//! elements and the mean of the negative ones. Pair it with
//! [`ErrorFeedback`](crate::memory::ErrorFeedback): `e = x − decompress(x)`.

use serde::{Deserialize, Serialize};

use crate::compressor::{Combine, Compressor, UnitContext};
use crate::message::Message;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OneBitConfig {}

#[derive(Clone, Debug, Default)]
pub struct OneBit;

impl Compressor for OneBit {
    fn name(&self) -> &'static str {
        "onebit"
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        let m = out.sign_mut();
        m.len = input.len();
        m.bits.clear();
        m.bits.resize(input.len().div_ceil(8), 0);
        let (mut pos_sum, mut pos_n, mut neg_sum) = (0.0f64, 0usize, 0.0f64);
        for (byte, c) in m.bits.iter_mut().zip(input.chunks(8)) {
            let mut b = 0u8;
            for (j, &x) in c.iter().enumerate() {
                // NaN counts as negative so the bit pattern stays defined.
                let nonneg = x >= 0.0;
                b |= u8::from(nonneg) << j;
                if nonneg {
                    pos_sum += f64::from(x);
                    pos_n += 1;
                } else {
                    neg_sum += f64::from(x);
                }
            }
            *byte = b;
        }
        let neg_n = input.len() - pos_n;
        m.positive = if pos_n > 0 { (pos_sum / pos_n as f64) as f32 } else { 0.0 };
        m.negative = if neg_n > 0 { (neg_sum / neg_n as f64) as f32 } else { 0.0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconstruction_values_are_the_two_means() {
        let g = [1.0, 3.0, -2.0, -4.0, 0.0, -6.0, 2.0, 5.0, -1.0];
        let mut msg = Message::default();
        OneBit.compress(&g, &UnitContext::default(), &mut msg);
        let Message::Sign(m) = &msg else { panic!() };
        assert_eq!(m.positive, (1.0 + 3.0 + 0.0 + 2.0 + 5.0) / 5.0);
        assert_eq!(m.negative, (-2.0 - 4.0 - 6.0 - 1.0) / 4.0);
        let mut out = [0.0; 9];
        msg.decompress_into(&mut out);
        assert_eq!(out[0], m.positive);
        assert_eq!(out[8], m.negative);
        // The decompressed sum equals the input sum: the means preserve mass.
        let s: f32 = out.iter().sum();
        assert!((s - g.iter().sum::<f32>()).abs() < 1e-5);
    }
}
