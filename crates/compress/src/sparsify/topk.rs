//! Exact Top-k (ALGORITHMS.md §3.1): the k largest |acc|.

use serde::{Deserialize, Serialize};

use super::select::select_top_k;
use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::message::{SparseMessage, SparseWire};
use crate::method::error_feedback_sparsifier;

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

error_feedback_sparsifier!(TopKConfig => TopK {});

#[cfg(test)]
mod tests {
    use super::{TopK, TopKConfig};
    use crate::memory::{ErrorFeedback, Memory, ResidualForm};
    use crate::message::{Message, SparseWire, ValueEncoding};
    use crate::{codec, Compressor, UnitContext};

    /// Past f16's range the wire saturates at 65504 (never ±inf) and error
    /// feedback keeps the clipped amount.
    #[test]
    fn the_f16_wire_saturates_and_error_feedback_keeps_the_rest() {
        let wire = SparseWire { values: ValueEncoding::F16, ..Default::default() };
        let mut c = TopK::compressor(&TopKConfig { density: 0.5, wire });
        let mut ef = ErrorFeedback::new(ResidualForm::Raw);
        let g = [70_000.0f32, -1e30, 0.5, 0.25];
        let acc = ef.compensate(&g, 1.0).to_vec();
        let mut msg = Message::default();
        c.compress(&acc, &UnitContext::default(), &mut msg);
        ef.update(&msg);
        let Message::Sparse(m) = &msg else { panic!("sparse") };
        assert_eq!(m.values, [65504.0, -65504.0]);
        assert_eq!(ef.residual(), [70_000.0 - 65504.0, -1e30 + 65504.0, 0.5, 0.25]);
        let mut bytes = Vec::new();
        codec::encode(&msg, 0, &mut bytes);
        let mut out = vec![0.0; 4];
        codec::accumulate(&bytes, 1.0, &mut out).unwrap();
        assert!(out.iter().all(|v| v.is_finite()), "{out:?}");
    }
}
