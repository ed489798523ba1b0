//! DeMo's DCT top-k (Peng, Quesnelle and Kingma, arXiv 2411.19870;
//! `demo.py`): per 64×64 tile the 2-D DCT-II of the error-compensated
//! gradient, its 32 largest coefficients sent (as signs with their two
//! means by default, or 8-bit or f32 values) and removed from the memory,
//! which decays by 0.999; the aggregate averages every coefficient over the
//! workers that sent it and decodes by the inverse DCT. ALGORITHMS.md §9.9.

use serde::{Deserialize, Serialize};

use super::compressor::ChunkedOptions;
use super::values::ValueCoding;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DctTopKConfig {
    /// Coefficients kept per tile (`compression_topk`).
    pub k: usize,
    /// Tile side per matrix dimension (`compression_chunk`).
    pub chunk: usize,
    /// A vector's run length (DeMo chunks a vector like a matrix dimension).
    pub vector_chunk: usize,
    pub values: ValueCoding,
    /// The memory's decay β (`compression_decay`).
    pub decay: f32,
}

impl Default for DctTopKConfig {
    fn default() -> Self {
        DctTopKConfig { k: 32, chunk: 64, vector_chunk: 64, values: ValueCoding::Sign, decay: 0.999 }
    }
}

impl DctTopKConfig {
    /// The chunked compressor's options these stand for.
    pub fn options(&self) -> ChunkedOptions {
        ChunkedOptions {
            name: "dct-topk",
            chunk: self.chunk,
            vector_chunk: self.vector_chunk,
            k: self.k,
            dct: true,
            values: self.values,
            clip: false,
        }
    }
}

super::compressor::chunked_method!(DctTopKConfig);
