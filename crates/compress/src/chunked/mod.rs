//! Chunked top-k for the change: SparseLoCo (Templar's `tplr/compress.py`)
//! and DeMo (`demo.py`), one compressor. A unit is cut into tiles
//! ([`tiles`]), optionally transformed per tile by a 2-D DCT ([`dct`]), the
//! `k` largest magnitudes of each tile kept with their in-tile positions in
//! `⌈log2(tile size)⌉` bits, and their values sent as f32 or as codes of a
//! small codebook ([`values`]). Error feedback with a decay carries what was
//! not sent; workers' messages are averaged per position over the workers
//! that sent it ([`Combine::SenderMean`](crate::Combine::SenderMean)), as
//! both references aggregate. ALGORITHMS.md §9.8–9.9.

pub mod compressor;
pub mod dct;
pub mod dct_topk;
pub mod scatter;
pub mod sparseloco;
pub mod tiles;
pub mod values;

pub use compressor::ChunkedTopK;
pub use dct_topk::DctTopKConfig;
pub use sparseloco::SparseLocoConfig;
pub use tiles::Tiles;
pub use values::ValueCoding;
