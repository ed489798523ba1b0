//! Sparsifiers: a [`Selector`] picks indices, [`Sparsifier`] turns them into a
//! [`SparseMessage`](crate::message::SparseMessage). Every selector writes
//! indices in ascending order, which the varint wire format needs and the
//! decoder checks.

pub mod dgck;
pub mod esgd;
pub mod gaussiank;
pub mod randk;
pub mod select;
pub mod threshold;
pub mod topk;
pub mod trimmedk;

pub use dgck::{DgcK, DgcKConfig};
pub use esgd::{Esgd, EsgdConfig, Importance};
pub use gaussiank::{GaussianK, GaussianKConfig};
pub use randk::{RandK, RandKConfig};
pub use threshold::{Threshold, ThresholdConfig};
pub use topk::{TopK, TopKConfig};
pub use trimmedk::{TrimmedK, TrimmedKConfig};

use crate::compressor::{k_for, Combine, Compressor, UnitContext};
use crate::message::{Message, SparseMessage, SparseWire};

/// Chooses which coordinates of a buffer to send.
pub trait Selector: Send {
    /// The configuration name.
    fn name(&self) -> &'static str;

    /// Writes the chosen indices of `x`, strictly ascending, and `x`'s values
    /// at them into `out` (whose `indices` and `values` are empty on entry);
    /// `k` is the target count from the density (a selector may send more or
    /// fewer where its algorithm says so). Selectors that scan `x` record each
    /// value as they find it, so no second, cache-missing gather is needed.
    /// Must not allocate once `out` and the selector's scratch buffers reached
    /// steady-state size.
    fn select(&mut self, x: &[f32], k: usize, ctx: &UnitContext, out: &mut SparseMessage);

    /// The factor the kept values are multiplied by (Rand-k's `d/k` when unbiased).
    fn value_scale(&self, _k: usize, _d: usize) -> f32 {
        1.0
    }

    /// Whether the selector uses the density at all (fixed thresholds do not).
    fn uses_density(&self) -> bool {
        true
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }
}

/// A [`Compressor`] from a [`Selector`], a density and the wire options.
#[derive(Clone, Debug)]
pub struct Sparsifier<S> {
    pub selector: S,
    pub density: f64,
    pub wire: SparseWire,
}

impl<S: Selector> Sparsifier<S> {
    pub fn new(selector: S, density: f64, wire: SparseWire) -> Self {
        Self { selector, density, wire }
    }
}

impl<S: Selector> Compressor for Sparsifier<S> {
    fn name(&self) -> &'static str {
        self.selector.name()
    }

    fn combine(&self) -> Combine {
        self.selector.combine()
    }

    fn compress(&mut self, input: &[f32], ctx: &UnitContext, out: &mut Message) {
        let k = k_for(self.density, input.len());
        let m = out.sparse_mut();
        m.len = input.len();
        m.wire = self.wire;
        m.indices.clear();
        m.values.clear();
        self.selector.select(input, k, ctx, m);
        debug_assert_eq!(m.indices.len(), m.values.len());
        let scale = self.selector.value_scale(k, input.len());
        if scale != 1.0 {
            m.values.iter_mut().for_each(|v| *v *= scale);
        }
        m.round_to_wire();
    }

    fn set_density(&mut self, density: f64) {
        self.density = density;
    }

    fn density(&self) -> Option<f64> {
        self.selector.uses_density().then_some(self.density)
    }
}
