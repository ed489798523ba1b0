//! Exact Top-k (ALGORITHMS.md §3.1): the k largest |acc|.

use serde::{Deserialize, Serialize};

use super::select::select_top_k;
use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::message::{SparseMessage, SparseWire};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopKConfig {
    /// Density ρ: k = max(1, floor(ρ·d)).
    pub density: f64,
    pub wire: SparseWire,
}

impl Default for TopKConfig {
    fn default() -> Self {
        Self { density: 0.001, wire: SparseWire::default() }
    }
}

/// The exact Top-k selector; keeps its magnitude scratch between calls.
#[derive(Clone, Debug, Default)]
pub struct TopK {
    scratch: Vec<f32>,
}

impl TopK {
    pub fn compressor(config: &TopKConfig) -> Sparsifier<TopK> {
        Sparsifier::new(TopK::default(), config.density, config.wire)
    }
}

impl Selector for TopK {
    fn name(&self) -> &'static str {
        "topk"
    }

    fn select(&mut self, x: &[f32], k: usize, _ctx: &UnitContext, out: &mut SparseMessage) {
        select_top_k(x, k, &mut self.scratch, out);
    }
}
