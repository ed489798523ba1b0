//! SparseLoCo (Sarfi et al., arXiv 2508.15706; Templar's `tplr/compress.py`
//! and `neurons.py` at v2.1.3): per 64×64 tile the 64 largest magnitudes of
//! the error-compensated change, positions in 12 bits, values in 2
//! bits (Templar's statistical quantizer), error feedback decaying by 0.95,
//! and an aggregate that clips each worker to the median norm and averages
//! every position over the workers that sent it. Defaults are Templar's
//! production hyper-parameters (`hparams.json`). ALGORITHMS.md §9.8.

use serde::{Deserialize, Serialize};

use super::compressor::ChunkedOptions;
use super::values::ValueCoding;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SparseLocoConfig {
    /// Entries kept per tile (`topk_compression`).
    pub k: usize,
    /// Tile side per matrix dimension (`target_chunk`): the largest divisor
    /// of the dimension up to it ([`chunk_for`](super::tiles::chunk_for)).
    pub chunk: usize,
    /// A vector's (or a flattened unit's) run length; Templar chunks a
    /// vector like a matrix dimension, so its default is `chunk`'s.
    pub vector_chunk: usize,
    /// How values travel (`quantization_bins = 4`: 2 bits).
    pub values: ValueCoding,
    /// Error feedback's decay β (`momentum_decay`): `e ← β·e + Δ`.
    pub decay: f32,
    /// Clip each worker's values to the median of their norms before
    /// averaging (Templar's `outer_step`).
    pub clip: bool,
}

impl Default for SparseLocoConfig {
    fn default() -> Self {
        SparseLocoConfig {
            k: 64,
            chunk: 64,
            vector_chunk: 64,
            values: ValueCoding::Bits2,
            decay: 0.95,
            clip: true,
        }
    }
}

impl SparseLocoConfig {
    /// The chunked compressor's options these stand for.
    pub fn options(&self) -> ChunkedOptions {
        ChunkedOptions {
            name: "sparseloco",
            chunk: self.chunk,
            vector_chunk: self.vector_chunk,
            k: self.k,
            dct: false,
            values: self.values,
            clip: self.clip,
        }
    }
}

super::compressor::chunked_method!(SparseLocoConfig);
