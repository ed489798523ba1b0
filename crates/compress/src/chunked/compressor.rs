//! [`ChunkedTopK`]: the compressor behind `sparseloco` and `dct-topk`.

use crate::compressor::{Combine, Compressor, UnitContext};
use crate::message::{ChunkedMessage, Message};
use crate::method::{check, InvalidOption};

use super::dct;
use super::scatter::Bases;
use super::tiles::Tiles;
use super::values::{self, ValueCoding};

/// What a chunked compressor is built from (its method's options).
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkedOptions {
    pub name: &'static str,
    /// Tile side per matrix dimension, and a vector's run ([`Tiles::new`]).
    pub chunk: usize,
    pub vector_chunk: usize,
    /// Entries kept per tile.
    pub k: usize,
    /// Whether tiles are sent as their 2-D DCT's coefficients.
    pub dct: bool,
    pub values: ValueCoding,
    /// Whether the aggregate first clips each worker's values to the median norm.
    pub clip: bool,
}

/// The options every chunked method checks alike; errors name the key.
pub(crate) fn check_options(o: &ChunkedOptions, decay: f32) -> Result<(), InvalidOption> {
    let (k, chunk, vector_chunk) = (o.k, o.chunk, o.vector_chunk);
    check(k >= 1, "k", || format!("{k} must be at least 1 (entries kept per tile; SparseLoCo keeps 64)"))?;
    check((1..=256).contains(&chunk), "chunk", || {
        format!("{chunk} is not in 1..=256 (a tile side; 64 is the references')")
    })?;
    // A DCT tile's side is at most dct::MAX_SIDE (its basis is side², and receivers refuse more).
    let longest = if o.dct { super::dct::MAX_SIDE } else { super::tiles::MAX_TILE };
    check((1..=longest).contains(&vector_chunk), "vector_chunk", || {
        format!("{vector_chunk} is not in 1..={longest} (a vector's run)")
    })?;
    check((0.0..=1.0).contains(&decay), "decay", || {
        format!("{decay} is not in [0, 1] (error feedback's decay)")
    })
}

/// The [`Method`](crate::method::Method) of a chunked method's configuration
/// (its `options()` and `decay`): error feedback with that decay by default,
/// a [`ChunkedTopK`] per unit.
macro_rules! chunked_method {
    ($config:ty) => {
        impl $crate::method::Method for $config {
            fn validate(&self) -> Result<(), $crate::method::InvalidOption> {
                $crate::chunked::compressor::check_options(&self.options(), self.decay)
            }
            fn default_memory(&self) -> $crate::memory::MemoryKind {
                $crate::memory::MemoryKind::ErrorFeedback
            }
            fn memory_decay(&self) -> f32 {
                self.decay
            }
            fn build(&self, shape: &[usize]) -> Box<dyn $crate::Compressor> {
                Box::new($crate::chunked::ChunkedTopK::new(self.options(), shape))
            }
        }
    };
}
pub(crate) use chunked_method;

/// Chunked top-k with its scratch (no allocation once grown).
pub struct ChunkedTopK {
    opts: ChunkedOptions,
    shape: Vec<usize>,
    tile: Vec<f32>,
    tmp: Vec<f32>,
    keys: Vec<u32>,
    picked: Vec<f32>,
}

impl ChunkedTopK {
    /// The compressor of a unit of `shape` (empty: a vector of the input's length).
    pub fn new(opts: ChunkedOptions, shape: &[usize]) -> Self {
        let shape = shape.to_vec();
        ChunkedTopK { opts, shape, tile: Vec::new(), tmp: Vec::new(), keys: Vec::new(), picked: Vec::new() }
    }

    /// Fills `self.tile` with tile (`r0`, `c0`, `h`, `w`) of `input`: its
    /// values, or (given the tiling's `bases`) its DCT coefficients.
    fn load_tile(
        &mut self,
        input: &[f32],
        cols: usize,
        (r0, c0, h, w): (usize, usize, usize, usize),
        bases: Option<&Bases>,
    ) {
        self.tile.clear();
        let Some(bases) = bases else {
            for i in 0..h {
                self.tile.extend_from_slice(&input[(r0 + i) * cols + c0..][..w]);
            }
            return;
        };
        self.tile.resize(h * w, 0.0);
        self.tmp.resize(h * w, 0.0);
        let (ch, cwt) = (&bases.of(h).c, &bases.of(w).t);
        dct::forward(input, cols, (r0, c0, h, w), ch, cwt, &mut self.tmp, &mut self.tile);
    }
}

/// The tiling of a unit of `shape` (ignored unless it holds `len` elements)
/// under `opts`.
pub fn tiles_for(shape: &[usize], len: usize, opts: &ChunkedOptions) -> Tiles {
    let shape = if shape.iter().product::<usize>() == len { shape } else { &[] };
    Tiles::new(shape, len, opts.chunk, opts.vector_chunk)
}

/// Starts `out` as a chunked message of `tiles` under `opts`: its header
/// fields set, its entries cleared; returns it and the k per tile (the
/// option, at most a full tile: beyond one, the whole tile).
pub fn start_message<'a>(
    out: &'a mut Message,
    tiles: Tiles,
    opts: &ChunkedOptions,
) -> (&'a mut ChunkedMessage, usize) {
    let k = opts.k.clamp(1, (tiles.tile_rows * tiles.tile_cols).max(1));
    let m = out.chunked_mut();
    m.tiles = tiles;
    m.k = k as u32;
    m.dct = opts.dct;
    m.value_bits = opts.values.bits();
    m.positions.clear();
    m.codes.clear();
    m.values.clear();
    m.codebook.clear();
    (m, k)
}

/// Writes the kept values `picked` (in entry order) into `m` as `coding` sends them.
pub fn finish_values(m: &mut ChunkedMessage, coding: ValueCoding, picked: &[f32]) {
    match coding {
        ValueCoding::F32 => m.values.extend_from_slice(picked),
        coding => values::quantize(picked, coding, &mut m.codes, &mut m.codebook),
    }
}

/// Calls `keep(p, v)` for the `k` largest magnitudes of `x` in ascending
/// position, ties going to the lower positions, exactly `k` of them
/// (`1 ≤ k ≤ x.len()`) whatever the values (a NaN ranks above infinity).
/// Magnitudes compare as their f32 bits, which order like the values.
fn top_k(x: &[f32], k: usize, keys: &mut Vec<u32>, mut keep: impl FnMut(usize, f32)) {
    if k >= x.len() {
        x.iter().enumerate().for_each(|(p, &v)| keep(p, v));
        return;
    }
    keys.clear();
    keys.extend(x.iter().map(|v| v.to_bits() & 0x7fff_ffff));
    let n = keys.len();
    let (_, &mut thr, above) = keys.select_nth_unstable(n - k);
    let mut ties = k - above.iter().filter(|&&a| a > thr).count();
    for (p, &v) in x.iter().enumerate() {
        let a = v.to_bits() & 0x7fff_ffff;
        if a > thr || (a == thr && ties > 0) {
            if a == thr {
                ties -= 1;
            }
            keep(p, v);
        }
    }
}

impl Compressor for ChunkedTopK {
    fn name(&self) -> &'static str {
        self.opts.name
    }

    fn combine(&self) -> Combine {
        Combine::SenderMean { clip: self.opts.clip }
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        let tiles = tiles_for(&self.shape, input.len(), &self.opts);
        let (m, k) = start_message(out, tiles, &self.opts);
        m.positions.reserve(tiles.entries(k));
        self.picked.clear();
        let bases = self.opts.dct.then(|| Bases::new(&tiles));
        for t in 0..tiles.count() {
            let (r0, c0, h, w) = tiles.tile(t);
            self.load_tile(input, tiles.cols, (r0, c0, h, w), bases.as_ref());
            let (positions, picked) = (&mut m.positions, &mut self.picked);
            top_k(&self.tile, tiles.k_of(t, k), &mut self.keys, |p, v| {
                positions.push(p as u16);
                picked.push(v);
            });
        }
        finish_values(m, self.opts.values, &self.picked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_exactly_k_in_position_order_ties_low() {
        let mut got = Vec::new();
        top_k(&[1.0, -3.0, 3.0, 0.5, 3.0, f32::NAN], 3, &mut Vec::new(), |p, _| got.push(p));
        assert_eq!(got, [1, 2, 5], "NaN ranks highest; of the tied 3s the lower positions");
        got.clear();
        top_k(&[2.0; 7], 4, &mut Vec::new(), |p, _| got.push(p));
        assert_eq!(got, [0, 1, 2, 3]);
    }
}
