//! 8-bit quantization (Dettmers, "8-Bit Approximations for Parallelism in
//! Deep Learning", ICLR 2016; ALGORITHMS.md §9.5): every element divided by
//! its block's largest magnitude and rounded to the nearest of the 256
//! values of the dynamic tree data type (a sign, an exponent of ten in
//! unary, and a linear fraction in the remaining bits), one byte each. The
//! blockwise form and the codebook are those of the author's bitsandbytes
//! (`quantize_blockwise` with `create_dynamic_map`); GRACE's TensorFlow
//! `u8bit` is an approximation of the same data type with one scale per
//! tensor. Rounding to nearest is biased: the default memory is error
//! feedback.

use serde::{Deserialize, Serialize};

use crate::codebook::nearest_code;
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::{check, Method};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EightBitConfig {
    /// Elements per scale (bitsandbytes' default 4096).
    pub block: usize,
}

impl Default for EightBitConfig {
    fn default() -> Self {
        Self { block: 4096 }
    }
}

#[derive(Clone, Debug)]
pub struct EightBit {
    block: usize,
}

impl EightBit {
    pub fn new(cfg: &EightBitConfig) -> Self {
        Self { block: cfg.block.max(1) }
    }
}

impl Compressor for EightBit {
    fn name(&self) -> &'static str {
        "eightbit"
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        let m = out.eight_bit_mut();
        m.block = self.block as u32;
        m.absmax.clear();
        m.codes.clear();
        m.codes.reserve(input.len());
        for chunk in input.chunks(self.block) {
            let absmax = chunk.iter().fold(0.0f32, |a, x| a.max(x.abs()));
            m.absmax.push(absmax);
            // x·(1/absmax), as bitsandbytes scales, kept finite for a subnormal
            // block maximum; a zero block is all zeros (0's code).
            let (pre, inv) = if absmax > 0.0 { super::ratio_factors(1.0, absmax) } else { (1.0, 0.0) };
            m.codes.extend(chunk.iter().map(|&x| nearest_code(((x * pre) * inv).clamp(-1.0, 1.0))));
        }
    }
}

impl Method for EightBitConfig {
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check(self.block >= 1 && self.block <= u32::MAX as usize, "block", || {
            format!("{} must be at least 1 (bitsandbytes' default is 4096)", self.block)
        })
    }
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::ErrorFeedback
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(EightBit::new(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebook::dynamic_codebook;

    #[test]
    fn the_codebook_ascends_from_its_negative_end_to_one_with_one_zero() {
        let c = dynamic_codebook();
        assert!(c.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((c[127], c[255]), (0.0, 1.0));
        assert!((c[0] + 0.992_968_75).abs() < 1e-7);
        assert!((c[128] - 5.5e-7).abs() < 1e-12);
    }

    #[test]
    fn each_element_decodes_to_its_nearest_value_times_the_block_max() {
        let x = [4.0f32, -2.0, 0.0, 1.0, 1e-9];
        let mut msg = Message::default();
        EightBit::new(&EightBitConfig { block: 4 }).compress(&x, &UnitContext::default(), &mut msg);
        let mut out = vec![0.0; x.len()];
        msg.add_to(1.0, &mut out);
        assert_eq!(out[0], 4.0);
        assert_eq!(out[2], 0.0);
        // The second block's max is its one element, 1e-9 → code 1.0.
        assert_eq!(out[4], 1e-9);
        for (&o, &v) in out.iter().zip(&x).take(4) {
            assert!((o - v).abs() <= 0.0071 * 4.0, "{v} → {o}");
        }
    }
}
