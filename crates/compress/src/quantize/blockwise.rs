//! The blockwise quantizer behind 8-bit quantization and fp4: every element
//! divided by its block's largest magnitude and rounded to a code of a
//! [`BlockCodebook`], to the nearest value or stochastically between the two
//! around it. The methods differ only in their table and defaults, so they
//! share this compressor, one message kind and one decoder.

use serde::{Deserialize, Serialize};

use crate::codebook::BlockCodebook;
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::message::Message;

/// How an element's code is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rounding {
    /// The nearest table value (biased: pair it with error feedback).
    #[default]
    Nearest,
    /// One of the two table values around the element, chosen so that the
    /// expected decode is the element (unbiased within the block's range).
    Stochastic,
}

#[derive(Clone, Debug)]
pub struct Blockwise {
    codebook: BlockCodebook,
    block: usize,
    rounding: Rounding,
}

impl Blockwise {
    pub fn new(codebook: BlockCodebook, block: usize, rounding: Rounding) -> Self {
        Self { codebook, block: block.max(1), rounding }
    }
}

impl Compressor for Blockwise {
    fn name(&self) -> &'static str {
        match self.codebook {
            BlockCodebook::Dynamic => "eightbit",
            BlockCodebook::E2m1 | BlockCodebook::E3m0 => "fp4",
        }
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        let m = out.blockwise_mut();
        m.codebook = self.codebook;
        m.block = self.block as u32;
        m.absmax.clear();
        m.codes.clear();
        m.codes.reserve(input.len());
        let mut rng = ctx.key.rng();
        for chunk in input.chunks(self.block) {
            let absmax = chunk.iter().fold(0.0f32, |a, x| a.max(x.abs()));
            m.absmax.push(absmax);
            // x·(1/absmax), as bitsandbytes scales, kept finite for a subnormal
            // block maximum; a zero block is all zeros (0's code).
            let (pre, inv) = if absmax > 0.0 { super::ratio_factors(1.0, absmax) } else { (1.0, 0.0) };
            let unit = |x: f32| ((x * pre) * inv).clamp(-1.0, 1.0);
            match self.rounding {
                Rounding::Nearest if self.codebook.bits() == 4 => {
                    let (midpoints, codes) = self.codebook.search();
                    let codes = codes.expect("a 4-bit table maps its ascending values to codes");
                    nearest_by_count(chunk, (pre, inv), midpoints, codes, &mut m.codes);
                }
                Rounding::Nearest => m.codes.extend(chunk.iter().map(|&x| self.codebook.nearest(unit(x)))),
                Rounding::Stochastic => m.codes.extend(chunk.iter().map(|&x| {
                    // 24 uniform bits: u in [0, 1).
                    let u = (rng.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32);
                    self.codebook.stochastic(unit(x), u)
                })),
            }
        }
    }
}

crate::multiversion! {
    /// Appends to `out` the code of each x·pre·inv (clamped to [−1, 1]) that
    /// `BlockCodebook::nearest` gives, for a short table: the number of
    /// `midpoints` below it, counted by a comparison per midpoint over a run
    /// of elements (a loop the compiler vectorizes, where a binary search per
    /// element branches), mapped through `codes`.
    fn nearest_by_count(chunk: &[f32], factors: (f32, f32), midpoints: &[f32], codes: &[u8], out: &mut Vec<u8>) {
        const RUN: usize = 64;
        let (pre, inv) = factors;
        for run in chunk.chunks(RUN) {
            let mut v = [0.0f32; RUN];
            for (v, &x) in v.iter_mut().zip(run) {
                *v = ((x * pre) * inv).clamp(-1.0, 1.0);
            }
            let mut count = [0u8; RUN];
            for &b in midpoints {
                for (c, &v) in count.iter_mut().zip(&v) {
                    *c += u8::from(v > b);
                }
            }
            out.extend(count[..run.len()].iter().map(|&c| codes[usize::from(c)]));
        }
    }
}
