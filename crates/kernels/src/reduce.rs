//! One-pass statistics of a device vector: Σx, Σx² and max |x|.
//!
//! Each unit accumulates a grid-strided share in f32, each cube folds its
//! units in shared memory, and the host adds the cubes' partials in f64: the
//! same scheme as the CPU's `reduce` (f32 within a block, f64 across blocks),
//! so scalers agree to f32 rounding. Only 3 floats per cube cross to the host.

use cubecl::prelude::*;

use crate::buffer::{f32_arg, read_f32s, DeviceF32, KernelError};
use crate::grid;

/// Statistics of one vector.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub len: usize,
    pub sum: f64,
    pub sum_sq: f64,
    /// max |x| over the non-NaN elements (0 when empty).
    pub max_abs: f32,
}

impl Stats {
    pub fn mean(&self) -> f64 {
        if self.len == 0 {
            0.0
        } else {
            self.sum / self.len as f64
        }
    }

    /// Population standard deviation, as the CPU's `mean_and_population_std`.
    pub fn population_std(&self) -> f64 {
        if self.len == 0 {
            return 0.0;
        }
        let n = self.len as f64;
        let mean = self.sum / n;
        (self.sum_sq / n - mean * mean).max(0.0).sqrt()
    }

    pub fn l2_norm(&self) -> f64 {
        self.sum_sq.sqrt()
    }
}

#[cube(launch)]
fn block_stats(x: &[f32], partials: &mut [f32]) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut s = 0.0f32;
    let mut q = 0.0f32;
    let mut m = 0.0f32;
    let mut i = ABSOLUTE_POS;
    while i < n {
        let v = x[i];
        s += v;
        q += v * v;
        let a = f32::reinterpret(u32::reinterpret(v) & 0x7fff_ffffu32);
        if a > m {
            m = a;
        }
        i += stride;
    }
    let mut sh_s = Shared::<[f32]>::new_slice(256usize);
    let mut sh_q = Shared::<[f32]>::new_slice(256usize);
    let mut sh_m = Shared::<[f32]>::new_slice(256usize);
    let u = UNIT_POS as usize;
    sh_s[u] = s;
    sh_q[u] = q;
    sh_m[u] = m;
    sync_cube();
    #[unroll]
    for level in 0..8u32 {
        let half = comptime!(128usize >> level);
        if u < half {
            sh_s[u] += sh_s[u + half];
            sh_q[u] += sh_q[u + half];
            let other = sh_m[u + half];
            if other > sh_m[u] {
                sh_m[u] = other;
            }
        }
        sync_cube();
    }
    if u == 0 {
        let c = CUBE_POS * 3;
        partials[c] = sh_s[0];
        partials[c + 1] = sh_q[0];
        partials[c + 2] = sh_m[0];
    }
}

/// Σx, Σx² and max |x| of `x`.
pub fn stats(client: &Client, x: &DeviceF32) -> Result<Stats, KernelError> {
    if x.len == 0 {
        return Ok(Stats::default());
    }
    let (cubes, dim) = grid(x.len, 16);
    // One partial triple per cube: the count the geometry just chose.
    let n_partials = crate::cubes_for(x.len, 16) as usize * 3;
    let partials = client.empty(n_partials * 4);
    block_stats::launch(client, cubes, dim, x.arg(), f32_arg(&partials, n_partials));
    let mut st = Stats { len: x.len, ..Stats::default() };
    for c in read_f32s(client, &partials, n_partials)?.chunks_exact(3) {
        st.sum += f64::from(c[0]);
        st.sum_sq += f64::from(c[1]);
        st.max_abs = st.max_abs.max(c[2]);
    }
    Ok(st)
}
