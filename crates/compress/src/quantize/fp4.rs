//! 4-bit floats with one scale per block (ALGORITHMS.md §9.7): each element
//! divided by its block's largest magnitude and rounded to a 4-bit float,
//! two codes per byte. Streaming DiLoCo (Douillard et al., 2025) sends its
//! outer gradients in 4 bits (E3M0, its format) with no loss of quality;
//! OCP's E2M1 (the MX formats' element type) is the option `format = "e2m1"`.
//! A bit width of the 8-bit blockwise family: the same message (a codebook
//! id in its header), compressor and decoder, with a 16-value table.

use serde::{Deserialize, Serialize};

use super::blockwise::{Blockwise, Rounding};
use crate::codebook::BlockCodebook;
use crate::memory::MemoryKind;
use crate::method::{check, Method};

/// Which 4-bit float.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp4Format {
    /// Sign and 3 exponent bits: magnitudes 0 and 2^−6 … 2^0 of the block maximum.
    #[default]
    E3m0,
    /// OCP E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (6 = the block maximum).
    E2m1,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fp4Config {
    /// Elements per scale (the MX formats' 32).
    pub block: usize,
    pub format: Fp4Format,
    pub rounding: Rounding,
}

impl Default for Fp4Config {
    fn default() -> Self {
        Self { block: 32, format: Fp4Format::default(), rounding: Rounding::Nearest }
    }
}

impl Fp4Config {
    /// The table of this format.
    pub fn codebook(&self) -> BlockCodebook {
        match self.format {
            Fp4Format::E3m0 => BlockCodebook::E3m0,
            Fp4Format::E2m1 => BlockCodebook::E2m1,
        }
    }
}

impl Method for Fp4Config {
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check(self.block >= 1 && self.block <= u32::MAX as usize, "block", || {
            format!("{} must be at least 1 (the MX formats use 32)", self.block)
        })
    }
    /// Nearest rounding is biased (error feedback keeps what it drops);
    /// stochastic rounding is unbiased and needs none.
    fn default_memory(&self) -> MemoryKind {
        match self.rounding {
            Rounding::Nearest => MemoryKind::ErrorFeedback,
            Rounding::Stochastic => MemoryKind::None,
        }
    }
    fn draws_random(&self) -> bool {
        self.rounding == Rounding::Stochastic
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(Blockwise::new(self.codebook(), self.block, self.rounding))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compressor::UnitContext;
    use crate::message::Message;
    use crate::RngKey;

    fn decoded(cfg: &Fp4Config, x: &[f32], seed: u64) -> Vec<f32> {
        let mut msg = Message::default();
        let ctx = UnitContext { key: RngKey::new(seed, 0, 1, 0), loss: None };
        cfg.build(&[]).compress(x, &ctx, &mut msg);
        let mut out = vec![0.0; x.len()];
        msg.decompress_into(&mut out);
        out
    }

    #[test]
    fn e2m1_values_are_exact_at_their_grid_and_nearest_between() {
        let cfg = Fp4Config { block: 8, format: Fp4Format::E2m1, ..Default::default() };
        let x = [6.0f32, -3.0, 0.5, 1.5, 2.4, -2.6, 0.2, 0.0];
        assert_eq!(decoded(&cfg, &x, 0), [6.0, -3.0, 0.5, 1.5, 2.0, -3.0, 0.0, 0.0]);
        let e3m0 = Fp4Config { block: 8, ..Default::default() };
        let x = [-8.0f32, 4.0, 2.0, 1.0, 0.125, 0.1, 3.1, 0.0];
        assert_eq!(decoded(&e3m0, &x, 0), [-8.0, 4.0, 2.0, 1.0, 0.125, 0.125, 4.0, 0.0]);
    }

    #[test]
    fn stochastic_rounding_is_unbiased() {
        let cfg = Fp4Config { block: 4, format: Fp4Format::E2m1, rounding: Rounding::Stochastic };
        let x = [6.0f32, 2.5, -0.8, 0.1];
        let trials = 20_000;
        let mut mean = [0.0f64; 4];
        for seed in 0..trials {
            for (m, v) in mean.iter_mut().zip(decoded(&cfg, &x, seed)) {
                *m += f64::from(v) / trials as f64;
            }
        }
        for (m, &v) in mean.iter().zip(&x) {
            // One draw's deviation is at most half a grid step (0.5 here): σ/√n ≈ 0.0035.
            assert!((m - f64::from(v)).abs() < 0.02, "{v}: mean {m}");
        }
    }
}
