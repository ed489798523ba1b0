//! Rand-k (ALGORITHMS.md §3.4): k uniform indices without replacement, by
//! Floyd's algorithm over a reused bitmap (O(k) draws, ascending output from a
//! scan of the bitmap, no sort).

use serde::{Deserialize, Serialize};

use super::{Selector, Sparsifier};
use crate::compressor::{Combine, UnitContext};
use crate::message::{SparseMessage, SparseWire};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RandKConfig {
    pub density: f64,
    /// Every worker draws the same indices (a stream without the rank), so the
    /// messages are summable: an allreduce of the k values suffices.
    pub same_seed: bool,
    /// Scale kept values by d/k so that E[C(x)] = x. Leave off with error
    /// feedback (then C is the contraction with E‖x − C(x)‖² = (1 − k/d)‖x‖²).
    pub unbiased: bool,
    pub wire: SparseWire,
}

impl Default for RandKConfig {
    fn default() -> Self {
        Self { density: 0.001, same_seed: false, unbiased: false, wire: SparseWire::default() }
    }
}

#[derive(Clone, Debug, Default)]
pub struct RandK {
    pub same_seed: bool,
    pub unbiased: bool,
    bitmap: Vec<u64>,
}

impl RandK {
    pub fn compressor(config: &RandKConfig) -> Sparsifier<RandK> {
        let selector = RandK { same_seed: config.same_seed, unbiased: config.unbiased, bitmap: Vec::new() };
        Sparsifier::new(selector, config.density, config.wire)
    }
}

impl Selector for RandK {
    fn name(&self) -> &'static str {
        "randk"
    }

    fn select(&mut self, x: &[f32], k: usize, ctx: &UnitContext, out: &mut SparseMessage) {
        let d = x.len();
        let k = k.min(d);
        let mut rng = if self.same_seed { ctx.key.shared_rng() } else { ctx.key.rng() };
        self.bitmap.clear();
        self.bitmap.resize(d.div_ceil(64), 0);
        // Floyd: for j in d−k..d pick t in 0..=j; take t, or j if t was taken.
        for j in d - k..d {
            let t = rng.below(j as u64 + 1) as usize;
            let pick = if self.bitmap[t / 64] >> (t % 64) & 1 == 1 { j } else { t };
            self.bitmap[pick / 64] |= 1 << (pick % 64);
        }
        for (w, &word) in self.bitmap.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let j = w * 64 + bits.trailing_zeros() as usize;
                out.indices.push(j as u32);
                out.values.push(x[j]);
                bits &= bits - 1;
            }
        }
    }

    fn value_scale(&self, k: usize, d: usize) -> f32 {
        if self.unbiased && k > 0 {
            d as f32 / k.min(d) as f32
        } else {
            1.0
        }
    }

    fn combine(&self) -> Combine {
        if self.same_seed {
            Combine::SharedIndexSum
        } else {
            Combine::Gather
        }
    }
}
