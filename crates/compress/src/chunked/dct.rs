//! The orthonormal DCT-II of a tile (DeMo's transform), as two small matrix
//! products: `X = C_h · x · C_wᵀ` and back `x = C_hᵀ · X · C_w`, with
//! `C_n[q][j] = s_q cos(π (2j + 1) q / 2n)`, `s_0 = √(1/n)`, `s_q = √(2/n)`.
//! The matrices are computed in f64 from the formula and rounded to f32
//! (DeMo builds them through an f32 FFT; they differ by at most 6e-8).
//! A leaf: the message's decoder and the compressor both use it.

use std::sync::{Arc, Mutex, OnceLock};

/// The largest tile side the transform takes (validation and the decoder
/// refuse more).
pub const MAX_SIDE: usize = 256;

/// `C_n` and its transpose, row-major (`n × n`: row `q` of `c` is frequency `q`).
#[derive(Debug)]
pub struct Basis {
    pub c: Vec<f32>,
    /// `C_nᵀ`: the forward product's second factor reads its rows.
    pub t: Vec<f32>,
}

/// The matrices computed so far, by side.
type Cache = Mutex<Vec<Option<Arc<Basis>>>>;

/// The basis of side `n`, computed once and shared.
pub fn basis(n: usize) -> Arc<Basis> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Cache::default).lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() <= n {
        cache.resize(n + 1, None);
    }
    cache[n]
        .get_or_insert_with(|| {
            let nf = n as f64;
            let c: Vec<f32> = (0..n * n)
                .map(|i| {
                    let (q, j) = ((i / n) as f64, (i % n) as f64);
                    let s = if q == 0.0 { (1.0 / nf).sqrt() } else { (2.0 / nf).sqrt() };
                    (s * (std::f64::consts::PI * (2.0 * j + 1.0) * q / (2.0 * nf)).cos()) as f32
                })
                .collect();
            let t = (0..n * n).map(|i| c[(i % n) * n + i / n]).collect();
            Arc::new(Basis { c, t })
        })
        .clone()
}

/// `dst[..w] += a · src[..w]`: the one inner loop of both directions,
/// over contiguous rows, so it vectorizes (8 lanes where AVX2 is detected).
#[inline(always)]
fn axpy(dst: &mut [f32], a: f32, src: &[f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += a * s;
    }
}

crate::multiversion! {
    /// The DCT of the `h × w` tile at (`r0`, `c0`) of `x` (a matrix `cols`
    /// wide) into `out` (`h × w`, row-major), with `ch = C_h`, `cwt = C_wᵀ`
    /// and `tmp` (`h × w`) for the half-way product `x · C_wᵀ`.
    pub fn forward(x: &[f32], cols: usize, tile: (usize, usize, usize, usize), ch: &[f32], cwt: &[f32], tmp: &mut [f32], out: &mut [f32]) {
        let (r0, c0, h, w) = tile;
        tmp.fill(0.0);
        for i in 0..h {
            let row = &x[(r0 + i) * cols + c0..][..w];
            let t = &mut tmp[i * w..][..w];
            for (j, &v) in row.iter().enumerate() {
                axpy(t, v, &cwt[j * w..][..w]);
            }
        }
        out.fill(0.0);
        for b in 0..h {
            let o = &mut out[b * w..][..w];
            for i in 0..h {
                axpy(o, ch[b * h + i], &tmp[i * w..][..w]);
            }
        }
    }
}

crate::multiversion! {
    /// Adds each coefficient (`p`, `v`) of `coefficients` (`p = b·w + d`, frequency
    /// (`b`, `d`)) to the `h × w` tile at (`r0`, `c0`) of `out` (a matrix `cols`
    /// wide) as its basis image, `v · C_h[b][i] · C_w[d][j]` at (i, j): the
    /// inverse transform of a sparse tile.
    pub fn add_coefficients(out: &mut [f32], cols: usize, tile: (usize, usize, usize, usize), coefficients: &mut dyn Iterator<Item = (usize, f32)>, ch: &[f32], cw: &[f32]) {
        let (r0, c0, h, w) = tile;
        for (p, v) in coefficients {
            let (b, d) = (p / w, p % w);
            let cw_d = &cw[d * w..][..w];
            for i in 0..h {
                axpy(&mut out[(r0 + i) * cols + c0..][..w], v * ch[b * h + i], cw_d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_basis_is_orthonormal_and_the_inverse_undoes_the_forward() {
        for n in [1, 5, 13, 64] {
            let c = &basis(n).c;
            for a in 0..n {
                for b in 0..n {
                    let dot: f64 = (0..n).map(|j| f64::from(c[a * n + j]) * f64::from(c[b * n + j])).sum();
                    assert!((dot - f64::from(u8::from(a == b))).abs() < 1e-6, "{n}: {a}·{b} = {dot}");
                }
            }
        }
        let (h, w, cols) = (5, 7, 9);
        let x: Vec<f32> = (0..6 * cols).map(|i| ((i * 37 % 23) as f32 - 11.0) / 3.0).collect();
        let (bh, bw) = (basis(h), basis(w));
        let (mut tmp, mut coef) = (vec![0.0; h * w], vec![0.0; h * w]);
        forward(&x, cols, (1, 2, h, w), &bh.c, &bw.t, &mut tmp, &mut coef);
        let mut back = vec![0.0; 6 * cols];
        add_coefficients(&mut back, cols, (1, 2, h, w), &mut coef.iter().copied().enumerate(), &bh.c, &bw.c);
        for i in 0..h {
            for j in 0..w {
                let (a, b) = (back[(1 + i) * cols + 2 + j], x[(1 + i) * cols + 2 + j]);
                assert!((a - b).abs() < 1e-5, "({i}, {j}): {a} vs {b}");
            }
        }
        assert_eq!(back[0], 0.0, "outside the tile nothing changes");
    }
}
