//! Threshold SGD (Strom 2015; eSGD's comparator, ALGORITHMS.md §3.4): send
//! every element with |acc| > τ. The count is whatever the data gives.

use serde::{Deserialize, Serialize};

use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::memory::MemoryKind;
use crate::message::{SparseMessage, SparseWire};
use crate::method::{check, Method};
use crate::reduce;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThresholdConfig {
    /// τ, in gradient units.
    pub threshold: f32,
    pub wire: SparseWire,
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        Self { threshold: 0.01, wire: SparseWire::default() }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Threshold {
    pub threshold: f32,
}

impl Threshold {
    pub fn compressor(config: &ThresholdConfig) -> Sparsifier<Threshold> {
        Sparsifier::new(Threshold { threshold: config.threshold }, 1.0, config.wire)
    }
}

impl Selector for Threshold {
    fn name(&self) -> &'static str {
        "threshold"
    }

    fn select(&mut self, x: &[f32], _k: usize, _ctx: &UnitContext, out: &mut SparseMessage) {
        reduce::collect_abs_above(x, self.threshold, false, usize::MAX, &mut out.indices, &mut out.values);
    }

    fn uses_density(&self) -> bool {
        false
    }
}

impl Method for ThresholdConfig {
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check(self.threshold >= 0.0 && self.threshold.is_finite(), "threshold", || {
            format!("{} must be a finite number ≥ 0", self.threshold)
        })
    }
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::ErrorFeedback
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(Threshold::compressor(self))
    }
}
