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

use super::blockwise::{Blockwise, Rounding};
use crate::codebook::BlockCodebook;
use crate::memory::MemoryKind;
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
        Box::new(Blockwise::new(BlockCodebook::Dynamic, self.block, Rounding::Nearest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebook::dynamic_codebook;
    use crate::compressor::{Compressor, UnitContext};
    use crate::message::Message;

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
        EightBitConfig { block: 4 }.build(&[]).compress(&x, &UnitContext::default(), &mut msg);
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
