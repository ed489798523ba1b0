//! Natural compression (Horváth et al., 2019; ALGORITHMS.md §9.4): each
//! element rounded stochastically to one of the two powers of two around
//! it, `2^e` or `2^(e+1)` for `2^e ≤ |x| < 2^(e+1)`, up with probability
//! `|x|/2^e − 1`, so `E[C(x)] = x` and `E‖C(x) − x‖² ≤ ‖x‖²/8`. One byte per
//! element ([`NaturalMessage`](crate::message::NaturalMessage)): the sign
//! and a 7-bit exponent covering 2^−108 … 2^18, the codes of GRACE's
//! `NaturalCompressor` (code = e + 109). Below 2^−108 an element rounds to
//! 0 or 2^−108, still unbiased (GRACE's rounds to 0 or 2^−108 by its
//! mantissa, biased); from 2^18 up it saturates at 2^18, as GRACE's does, the
//! only biased case (a gradient element past 262,144).

use serde::{Deserialize, Serialize};

use crate::codebook::{EXPONENT_BIAS, MAX_EXPONENT, MIN_EXPONENT, NEGATIVE};
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::Method;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NaturalConfig {}

#[derive(Clone, Debug, Default)]
pub struct Natural;

/// The code for |x| given 23 uniform random bits `r` (and a uniform
/// `u ∈ [0, 1)` for the range below 2^−108).
pub fn natural_code(x: f32, r: u32, u: f32) -> u8 {
    let a = x.abs();
    let sign = if x.is_sign_negative() { NEGATIVE } else { 0 };
    let bits = a.to_bits();
    let e = (bits >> 23) as i32 - 127;
    let k = if a.is_nan() || a == 0.0 {
        0
    } else if e > MAX_EXPONENT || (e == MAX_EXPONENT && bits & 0x7f_ffff != 0) {
        127
    } else if e < MIN_EXPONENT {
        // a < 2^−108: 2^−108 with probability a·2^108 (exact: a power-of-two scale).
        let p = a * f32::from_bits(((-MIN_EXPONENT + 127) as u32) << 23);
        if u < p {
            1
        } else {
            0
        }
    } else {
        // Up with probability mantissa / 2^23, exactly.
        let up = i32::from(r < bits & 0x7f_ffff);
        (e + up + EXPONENT_BIAS).min(127)
    };
    if k == 0 {
        0
    } else {
        sign | k as u8
    }
}

impl Compressor for Natural {
    fn name(&self) -> &'static str {
        "natural"
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        let m = out.natural_mut();
        m.codes.clear();
        m.codes.reserve(input.len());
        let mut rng = ctx.key.rng();
        m.codes.extend(input.iter().map(|&x| {
            let r = rng.next_u64();
            // 23 bits for the mantissa test, 24 for the small-value uniform.
            natural_code(x, (r & 0x7f_ffff) as u32, (r >> 40) as f32 * (1.0 / (1u64 << 24) as f32))
        }));
    }
}

impl Method for NaturalConfig {
    fn draws_random(&self) -> bool {
        true
    }
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(Natural)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebook::natural_value;

    #[test]
    fn powers_of_two_are_exact_and_neighbours_bracket_the_rest() {
        for x in [1.0f32, -0.5, 2f32.powi(18), 2f32.powi(-108), 0.0] {
            for r in [0, 0x7f_ffff] {
                assert_eq!(natural_value(natural_code(x, r, 0.5)), x, "{x}");
            }
        }
        // 3 = 2 + 1: down to 2 when r ≥ the mantissa (2^22), up to 4 below it.
        assert_eq!(natural_value(natural_code(3.0, 1 << 22, 0.0)), 2.0);
        assert_eq!(natural_value(natural_code(3.0, (1 << 22) - 1, 0.0)), 4.0);
        assert_eq!(natural_value(natural_code(-1e30, 0, 0.0)), -(2f32.powi(18)));
        assert_eq!(natural_value(natural_code(1e-40, 0, 0.0)), 2f32.powi(-108));
        assert_eq!(natural_value(natural_code(1e-40, 0, 0.999)), 0.0);
    }
}
