//! Trimmed top-k (RedSync, Fang et al. 2019; ALGORITHMS.md §3.4): a threshold
//! between the mean and the max of |acc|, lowered until at least k pass, then
//! an exact top-k among those, so exactly k are sent.

use serde::{Deserialize, Serialize};

use super::select::{keep_top_k, select_top_k};
use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::message::{SparseMessage, SparseWire};
use crate::method::error_feedback_sparsifier;
use crate::reduce;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrimmedKConfig {
    pub density: f64,
    pub wire: SparseWire,
}

impl Default for TrimmedKConfig {
    fn default() -> Self {
        Self { density: 0.001, wire: SparseWire::default() }
    }
}

#[derive(Clone, Debug, Default)]
pub struct TrimmedK {
    scratch: Vec<f32>,
}

impl TrimmedK {
    pub fn compressor(config: &TrimmedKConfig) -> Sparsifier<TrimmedK> {
        Sparsifier::new(TrimmedK::default(), config.density, config.wire)
    }
}

/// r in `thr = mean + r·(max − mean)`, from 0.8 down by 0.2.
const RATIOS: [f32; 5] = [0.8, 0.6, 0.4, 0.2, 0.0];

impl Selector for TrimmedK {
    fn name(&self) -> &'static str {
        "trimmedk"
    }

    fn select(&mut self, x: &[f32], k: usize, _ctx: &UnitContext, out: &mut SparseMessage) {
        if k == 0 || x.is_empty() {
            return;
        }
        let (abs_sum, max) = reduce::abs_sum_and_max(x);
        let mean = (abs_sum / x.len() as f64) as f32;
        for r in RATIOS {
            let thr = mean + r * (max - mean);
            if reduce::count_abs_above(x, thr) >= k {
                reduce::collect_abs_above(x, thr, false, usize::MAX, &mut out.indices, &mut out.values);
                keep_top_k(out, k, &mut self.scratch);
                return;
            }
        }
        // Fewer than k exceed the mean (k > about d/2): plain exact top-k.
        select_top_k(x, k, &mut self.scratch, out);
    }
}

error_feedback_sparsifier!(TrimmedKConfig => TrimmedK {});
