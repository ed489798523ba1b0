//! Moments of a device vector: count, mean, M2 = Σ(x − mean)² and max |x|,
//! the same [`Moments`] as the CPU's `reduce::moments`.
//!
//! Each cube makes three grid-strided loops over its share: max |x| (folded
//! in shared memory into a power-of-two scale, `pow2_scale`, so no square
//! overflows or underflows f32), Σ x·scale (folded into a pivot, the cube's
//! own mean), then Σ d and Σ d² of the deviations `d = x·scale − pivot`, which
//! do not cancel when |mean| ≫ σ. Five floats per cube cross to the host,
//! which merges the cubes in f64 (Chan et al.'s pairwise update). The CPU
//! computes the same quantities per cache-resident block, so the two agree to
//! f32 rounding at every magnitude.

use cubecl::prelude::*;
use gradcomp_compress::reduce::Moments;

use crate::buffer::{f32_arg, read_f32s, DeviceF32, KernelError};
use crate::{cubes_for, grid, CUBE_UNITS};

/// The CPU's `reduce::pow2_scale`: `2^-e` bringing `max` into [0.5, 1),
/// exponent clamped to ±126.
#[cube]
pub(crate) fn pow2_scale(max: f32) -> f32 {
    let e = (u32::reinterpret(max) >> 23u32) & 0xffu32;
    let mut biased = 1u32;
    if e < 252u32 {
        biased = 253u32 - e;
    }
    f32::reinterpret(biased << 23u32)
}

/// Unit `u`'s largest |x[i]| over `i = start + u, start + u + CUBE_DIM, …`
/// below `end` (0 if none; NaN ignored): its share of a block's maximum.
#[cube]
pub(crate) fn strided_abs_max(x: &[f32], start: usize, end: usize, u: usize) -> f32 {
    let mut m = 0.0f32;
    let mut i = start + u;
    while i < end {
        let a = f32::reinterpret(u32::reinterpret(x[i]) & 0x7fff_ffffu32);
        if a > m {
            m = a;
        }
        i += CUBE_DIM as usize;
    }
    m
}

/// Folds `sh[0..256]` into `sh[0]` by sums (`max = false`) or maxima.
#[cube]
pub(crate) fn fold_shared(sh: &mut Shared<[f32]>, u: usize, #[comptime] max: bool) {
    #[unroll]
    for level in 0..8u32 {
        let half = comptime!(128usize >> level);
        if u < half {
            if comptime!(max) {
                let other = sh[u + half];
                if other > sh[u] {
                    sh[u] = other;
                }
            } else {
                sh[u] += sh[u + half];
            }
        }
        sync_cube();
    }
}

/// `partials[c]` = Σ x·scale over cube `c`'s grid-strided share.
#[cube(launch)]
fn block_sum(x: &[f32], partials: &mut [f32], scale: f32) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let u = UNIT_POS as usize;
    let mut sh = Shared::<[f32]>::new_slice(256usize);
    let mut s = 0.0f32;
    let mut i = ABSOLUTE_POS;
    while i < n {
        s += x[i] * scale;
        i += stride;
    }
    sh[u] = s;
    sync_cube();
    fold_shared(&mut sh, u, false);
    if u == 0 {
        partials[CUBE_POS] = sh[0];
    }
}

fn scaled_sum(client: &Client, x: &DeviceF32, scale: f32) -> Result<f64, KernelError> {
    if x.len == 0 {
        return Ok(0.0);
    }
    let (cubes, dim) = grid(x.len, 16);
    let n_cubes = cubes_for(x.len, 16) as usize;
    let partials = client.empty(n_cubes * 4);
    block_sum::launch(client, cubes, dim, x.arg(), f32_arg(&partials, n_cubes), scale);
    Ok(read_f32s(client, &partials, n_cubes)?.iter().map(|&v| f64::from(v)).sum())
}

/// Σ x, one pass: the device's read pass, the floor the benchmarks compare with.
pub fn sum(client: &Client, x: &DeviceF32) -> Result<f64, KernelError> {
    scaled_sum(client, x, 1.0)
}

/// Whether every element is finite, in one pass: Σ x·2^-64 cannot overflow
/// (|x·2^-64| < 2^65, and f32 sums of fewer than 2^60 of them stay finite),
/// while an infinite or NaN element makes it inf or NaN.
pub fn all_finite(client: &Client, x: &DeviceF32) -> Result<bool, KernelError> {
    Ok(scaled_sum(client, x, 1.0 / 18_446_744_073_709_551_616.0)?.is_finite())
}

#[cube(launch)]
fn block_moments(x: &[f32], partials: &mut [f32]) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let u = UNIT_POS as usize;
    let mut sh_a = Shared::<[f32]>::new_slice(256usize);
    let mut sh_b = Shared::<[f32]>::new_slice(256usize);

    // max |x|; NaN compares false and is skipped.
    let mut m = 0.0f32;
    let mut i = ABSOLUTE_POS;
    while i < n {
        let a = f32::reinterpret(u32::reinterpret(x[i]) & 0x7fff_ffffu32);
        if a > m {
            m = a;
        }
        i += stride;
    }
    sh_a[u] = m;
    sync_cube();
    fold_shared(&mut sh_a, u, true);
    let max = sh_a[0];
    let scale = pow2_scale(max);
    sync_cube();

    // The pivot: this cube's mean, in scaled units.
    let mut s = 0.0f32;
    let mut c = 0.0f32;
    i = ABSOLUTE_POS;
    while i < n {
        s += x[i] * scale;
        c += 1.0f32;
        i += stride;
    }
    sh_a[u] = s;
    sh_b[u] = c;
    sync_cube();
    fold_shared(&mut sh_a, u, false);
    fold_shared(&mut sh_b, u, false);
    let mut pivot = 0.0f32;
    if sh_b[0] > 0.0f32 {
        pivot = sh_a[0] / sh_b[0];
    }
    sync_cube();

    let mut ds = 0.0f32;
    let mut dq = 0.0f32;
    i = ABSOLUTE_POS;
    while i < n {
        let d = x[i] * scale - pivot;
        ds += d;
        dq += d * d;
        i += stride;
    }
    sh_a[u] = ds;
    sh_b[u] = dq;
    sync_cube();
    fold_shared(&mut sh_a, u, false);
    fold_shared(&mut sh_b, u, false);
    if u == 0 {
        let o = CUBE_POS * 5;
        partials[o] = scale;
        partials[o + 1] = pivot;
        partials[o + 2] = sh_a[0];
        partials[o + 3] = sh_b[0];
        partials[o + 4] = max;
    }
}

/// The [`Moments`] of `x`.
pub fn moments(client: &Client, x: &DeviceF32) -> Result<Moments, KernelError> {
    if x.len == 0 {
        return Ok(Moments::default());
    }
    let (cubes, dim) = grid(x.len, 16);
    // One partial per cube: the count the geometry just chose.
    let n_cubes = cubes_for(x.len, 16) as usize;
    let partials = client.empty(n_cubes * 5 * 4);
    block_moments::launch(client, cubes, dim, x.arg(), f32_arg(&partials, n_cubes * 5));
    // Unit a (of `stride` in all) visits a, a + stride, …: ⌊n/stride⌋ elements,
    // one more when a < n mod stride.
    let units = CUBE_UNITS as usize;
    let stride = n_cubes * units;
    let (q, r) = (x.len / stride, x.len % stride);
    let mut total = Moments::default();
    for (c, p) in read_f32s(client, &partials, n_cubes * 5)?.chunks_exact(5).enumerate() {
        let n = units * q + r.saturating_sub(c * units).min(units);
        if n == 0 {
            continue;
        }
        let (inv, nf) = (1.0 / f64::from(p[0]), n as f64);
        let (d_sum, d_sq) = (f64::from(p[2]), f64::from(p[3]));
        let m2 = d_sq - d_sum * d_sum / nf;
        total = total.merge(Moments {
            n,
            mean: (f64::from(p[1]) + d_sum / nf) * inv,
            // Rounding can leave a hair below 0; NaN stays NaN.
            m2: if m2 < 0.0 { 0.0 } else { m2 } * inv * inv,
            max_abs: p[4],
        });
    }
    Ok(total)
}
