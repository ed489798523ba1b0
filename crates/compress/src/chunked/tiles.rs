//! How a chunked message cuts its unit into tiles (SparseLoCo's and DeMo's
//! chunks): a `rows × cols` matrix (a vector is one row) in tiles of
//! `tile_rows × tile_cols`, numbered row-major, the last tile of a row or
//! column shorter where the size does not divide. A position inside a tile
//! is `i·w + j` for row `i` and column `j` of the tile (`w` its width).
//! A leaf: the message, the codec and the compressors read it.

/// The tiling of one unit. See the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tiles {
    pub rows: usize,
    pub cols: usize,
    pub tile_rows: usize,
    pub tile_cols: usize,
}

/// The most elements a tile may hold: its positions travel in at most 16 bits.
pub const MAX_TILE: usize = 1 << 16;

/// The chunk length of a dimension of `size` for a target of `target`: the
/// size itself when it is at most the target; else its largest divisor not
/// above the target, as Templar's and DeMo's code choose (`_get_smaller_split`:
/// no remainder, 70 → 35); and where that divisor is below a quarter of the target
/// (a prime, say, where their code fails or sends every element), the
/// target itself, with a shorter last chunk.
pub fn chunk_for(size: usize, target: usize) -> usize {
    let target = target.max(1);
    if size <= target {
        return size.max(1);
    }
    let divisor = (1..=target).rev().find(|d| size.is_multiple_of(*d)).unwrap_or(1);
    if 4 * divisor >= target {
        divisor
    } else {
        target
    }
}

impl Tiles {
    /// The tiling of a unit of `len` elements and `shape`: a matrix (the
    /// first dimension its rows, the rest folded into columns, as PowerSGD
    /// views a convolution) in chunks of `chunk` per dimension; anything else
    /// as one row in runs of `vector_chunk`.
    pub fn new(shape: &[usize], len: usize, chunk: usize, vector_chunk: usize) -> Tiles {
        let rows = shape.first().copied().unwrap_or(1);
        if shape.len() >= 2 && rows > 1 && len.is_multiple_of(rows) && len > rows {
            let cols = len / rows;
            Tiles { rows, cols, tile_rows: chunk_for(rows, chunk), tile_cols: chunk_for(cols, chunk) }
        } else {
            Tiles { rows: 1, cols: len, tile_rows: 1, tile_cols: chunk_for(len, vector_chunk) }
        }
    }

    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tiles down and across.
    pub fn grid(&self) -> (usize, usize) {
        (self.rows.div_ceil(self.tile_rows.max(1)), self.cols.div_ceil(self.tile_cols.max(1)))
    }

    pub fn count(&self) -> usize {
        let (down, across) = self.grid();
        down * across
    }

    /// Tile `t`'s first row and column, height and width.
    pub fn tile(&self, t: usize) -> (usize, usize, usize, usize) {
        let across = self.grid().1.max(1);
        let (r0, c0) = ((t / across) * self.tile_rows, (t % across) * self.tile_cols);
        (r0, c0, self.tile_rows.min(self.rows - r0), self.tile_cols.min(self.cols - c0))
    }

    /// The entries tile `t` sends for `k` per tile: all of a smaller tile.
    pub fn k_of(&self, t: usize, k: usize) -> usize {
        let (_, _, h, w) = self.tile(t);
        k.min(h * w)
    }

    /// The entries all tiles send for `k` per tile (four tile sizes at most).
    pub fn entries(&self, k: usize) -> usize {
        let (down, across) = self.grid();
        if down == 0 || across == 0 {
            return 0;
        }
        let edge = |n: usize, t: usize| if n.is_multiple_of(t) { t } else { n % t };
        let (full_r, full_c) = (self.rows / self.tile_rows, self.cols / self.tile_cols);
        let (er, ec) = (edge(self.rows, self.tile_rows), edge(self.cols, self.tile_cols));
        let (nr, nc) = (down - full_r, across - full_c); // 0 or 1 edge tiles each way
        let per = |h: usize, w: usize| k.min(h * w);
        full_r * full_c * per(self.tile_rows, self.tile_cols)
            + full_r * nc * per(self.tile_rows, ec)
            + nr * full_c * per(er, self.tile_cols)
            + nr * nc * per(er, ec)
    }

    /// Bits per in-tile position: enough for a full tile's last position.
    pub fn position_bits(&self) -> u32 {
        let top = (self.tile_rows * self.tile_cols).saturating_sub(1) as u32;
        (32 - top.leading_zeros()).max(1)
    }

    /// The flat index in the unit of position `p` of tile `t` of width `w`
    /// starting at (`r0`, `c0`).
    #[inline]
    pub fn flat(&self, (r0, c0, w): (usize, usize, usize), p: usize) -> usize {
        (r0 + p / w) * self.cols + c0 + p % w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_the_references_divisors_and_fall_back_for_primes() {
        for (size, target, want) in [(70, 64, 35), (130, 64, 26), (13, 64, 13), (5000, 64, 50), (100, 64, 50)]
        {
            assert_eq!(chunk_for(size, target), want, "{size}");
        }
        assert_eq!(chunk_for(4096, 64), 64);
        assert_eq!(chunk_for(130, 16), 13);
        assert_eq!(chunk_for(67, 64), 64, "a prime: the target, with a shorter last chunk");
        assert_eq!(chunk_for(4099, 4096), 4096);
    }

    #[test]
    fn entries_count_every_tile_once() {
        for (rows, cols, tr, tc, k) in
            [(70, 13, 35, 13, 64), (67, 130, 64, 26, 5), (1, 4099, 1, 4096, 64), (5, 5, 2, 3, 4)]
        {
            let t = Tiles { rows, cols, tile_rows: tr, tile_cols: tc };
            let brute: usize = (0..t.count()).map(|i| t.k_of(i, k)).sum();
            assert_eq!(t.entries(k), brute, "{t:?}");
            let cells: usize = (0..t.count()).map(|i| t.tile(i).2 * t.tile(i).3).sum();
            assert_eq!(cells, rows * cols);
        }
        assert_eq!(
            Tiles::new(&[70, 13], 910, 64, 64),
            Tiles { rows: 70, cols: 13, tile_rows: 35, tile_cols: 13 }
        );
        assert_eq!(
            Tiles::new(&[100], 100, 64, 64),
            Tiles { rows: 1, cols: 100, tile_rows: 1, tile_cols: 50 }
        );
        assert_eq!(Tiles::new(&[], 10_000, 64, 4096).tile_cols, 2500);
    }
}
