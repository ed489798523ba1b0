//! Decoding a chunked message's entries into a dense unit: each value added
//! at its tile position, or (DCT messages) as its frequency's basis image
//! over the whole tile. Shared by the message's decoder and the senders'
//! mean of the aggregate.

use std::sync::Arc;

use super::dct;
use super::tiles::Tiles;

/// The DCT matrices of a tiling's (at most two) tile heights and widths.
pub struct Bases {
    sides: [(usize, Arc<dct::Basis>); 4],
}

impl Bases {
    pub fn new(tiles: &Tiles) -> Bases {
        let edge = |n: usize, t: usize| if t == 0 || n.is_multiple_of(t) { t } else { n % t };
        let side = |n: usize| (n, dct::basis(n));
        Bases {
            sides: [
                side(tiles.tile_rows),
                side(edge(tiles.rows, tiles.tile_rows)),
                side(tiles.tile_cols),
                side(edge(tiles.cols, tiles.tile_cols)),
            ],
        }
    }

    /// The basis of a side `n` of this tiling's tiles.
    pub fn of(&self, n: usize) -> &dct::Basis {
        &self.sides.iter().find(|(s, _)| *s == n).expect("a side of the tiling").1
    }
}

/// Calls `f(flat, e)` for every entry `e` of a message of `tiles` with `k`
/// per tile: `flat` is its position's index in the unit.
pub fn for_each_entry(tiles: &Tiles, k: usize, positions: &[u16], mut f: impl FnMut(usize, usize)) {
    let mut e = 0;
    for t in 0..tiles.count() {
        let (r0, c0, _, w) = tiles.tile(t);
        for _ in 0..tiles.k_of(t, k) {
            f(tiles.flat((r0, c0, w), usize::from(positions[e])), e);
            e += 1;
        }
    }
}

/// Adds the coefficients `coef` (a unit laid out like its tiles: the
/// coefficient (b, d) of the tile at (r0, c0) at row r0 + b, column c0 + d)
/// where `keep` holds, through each tile's inverse DCT, into `out`.
pub fn add_inverse(
    tiles: &Tiles,
    bases: &Bases,
    coef: &[f32],
    keep: impl Fn(usize) -> bool,
    out: &mut [f32],
) {
    for t in 0..tiles.count() {
        let (r0, c0, h, w) = tiles.tile(t);
        let mut coefficients = (0..h * w).filter_map(|p| {
            let i = tiles.flat((r0, c0, w), p);
            keep(i).then(|| (p, coef[i]))
        });
        dct::add_coefficients(
            out,
            tiles.cols,
            (r0, c0, h, w),
            &mut coefficients,
            &bases.of(h).c,
            &bases.of(w).c,
        );
    }
}

/// `out += weight · decode(entries)`: tile by tile, `k_of` entries each,
/// `positions[e]` in the tile and value `value(e)` (e counts entries over
/// all tiles). `out` is the unit, `tiles.len()` long.
pub fn add_entries(
    tiles: &Tiles,
    k: usize,
    dct: Option<&Bases>,
    positions: &[u16],
    value: impl Fn(usize) -> f32,
    weight: f32,
    out: &mut [f32],
) {
    let Some(b) = dct else {
        for_each_entry(tiles, k, positions, |i, e| out[i] += weight * value(e));
        return;
    };
    let mut e = 0;
    for t in 0..tiles.count() {
        let (r0, c0, h, w) = tiles.tile(t);
        let n = tiles.k_of(t, k);
        let mut coefficients = (e..e + n).map(|i| (usize::from(positions[i]), weight * value(i)));
        dct::add_coefficients(out, tiles.cols, (r0, c0, h, w), &mut coefficients, &b.of(h).c, &b.of(w).c);
        e += n;
    }
}
