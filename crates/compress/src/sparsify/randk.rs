//! Rand-k (ALGORITHMS.md §3.4): k uniform indices without replacement, by
//! Floyd's algorithm over a reused bitmap (O(k) draws, ascending output from a
//! scan of the bitmap, no sort).

use serde::{Deserialize, Serialize};

use super::{Selector, Sparsifier};
use crate::compressor::{Combine, UnitContext};
use crate::message::{SparseMessage, SparseWire};
use crate::method::error_feedback_sparsifier;
use crate::rng::UnitRng;

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
    pub fn new(config: &RandKConfig) -> Self {
        RandK { same_seed: config.same_seed, unbiased: config.unbiased, bitmap: Vec::new() }
    }

    pub fn compressor(config: &RandKConfig) -> Sparsifier<RandK> {
        Sparsifier::new(RandK::new(config), config.density, config.wire)
    }
}

impl RandK {
    /// The stream the indices come from: shared by every worker with
    /// `same_seed`, this worker's own otherwise.
    pub fn rng(&self, ctx: &UnitContext) -> UnitRng {
        if self.same_seed {
            ctx.key.shared_rng()
        } else {
            ctx.key.rng()
        }
    }
}

/// Appends to `out` `min(k, d)` uniform indices of `0..d` without
/// replacement, ascending: Floyd's algorithm over `bitmap` (scratch), then a
/// scan of it. The one draw of Rand-k, shared by the CPU selector and the
/// device one (which gathers the values on the GPU), so both pick the same
/// indices from the same key.
pub fn draw_indices(d: usize, k: usize, rng: &mut UnitRng, bitmap: &mut Vec<u64>, out: &mut Vec<u32>) {
    let k = k.min(d);
    bitmap.clear();
    bitmap.resize(d.div_ceil(64), 0);
    // Floyd: for j in d−k..d pick t in 0..=j; take t, or j if t was taken.
    for j in d - k..d {
        let t = rng.below(j as u64 + 1) as usize;
        let pick = if bitmap[t / 64] >> (t % 64) & 1 == 1 { j } else { t };
        bitmap[pick / 64] |= 1 << (pick % 64);
    }
    for (w, &word) in bitmap.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            out.push((w * 64 + bits.trailing_zeros() as usize) as u32);
            bits &= bits - 1;
        }
    }
}

impl Selector for RandK {
    fn name(&self) -> &'static str {
        "randk"
    }

    fn select(&mut self, x: &[f32], k: usize, ctx: &UnitContext, out: &mut SparseMessage) {
        draw_indices(x.len(), k, &mut self.rng(ctx), &mut self.bitmap, &mut out.indices);
        out.values.extend(out.indices.iter().map(|&j| x[j as usize]));
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

error_feedback_sparsifier!(RandKConfig => RandK {
    fn draws_random(&self) -> bool {
        true
    }
});
