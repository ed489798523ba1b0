//! Streaming reductions over `&[f32]`, written so the compiler vectorizes
//! them: 16 independent accumulator lanes over `chunks_exact(16)`, folded into
//! f64 every block so long sums stay accurate. Every compressor's first pass
//! (a scaler, a mean and deviation, a threshold count) is one of these.

const LANES: usize = 16;
/// Elements per block folded into the f64 total: short enough that f32 lane
/// sums of N(0, 1)-sized values keep ~6 significant digits.
const BLOCK: usize = 1024;

#[inline(always)]
fn lanes_fold(block: &[f32], mut f: impl FnMut(&mut [f32; LANES], &[f32; LANES])) -> ([f32; LANES], &[f32]) {
    let mut acc = [0.0f32; LANES];
    let chunks = block.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        let c: &[f32; LANES] = c.try_into().expect("chunks_exact yields LANES");
        f(&mut acc, c);
    }
    (acc, rem)
}

multiversion! {
/// Σ x (the benchmark's "read pass": the cost floor of touching every element once).
pub fn sum(x: &[f32]) -> f64 {
    let mut total = 0.0f64;
    for block in x.chunks(BLOCK) {
        let (acc, rem) = lanes_fold(block, |a, c| {
            for l in 0..LANES {
                a[l] += c[l];
            }
        });
        total += acc.iter().map(|&v| f64::from(v)).sum::<f64>();
        total += rem.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    total
}
}

/// A power of two `2^-e` that brings `max` into [0.5, 1): a vector scaled by
/// it has squares (and squared deviations, at most `(2·max)²`) that neither
/// overflow nor underflow f32, whatever its magnitude, as BLAS `nrm2` scales.
/// Multiplying by a power of two is exact, so undoing it is too. The exponent
/// is clamped to ±126 (a zero, subnormal, infinite or NaN `max` gets a
/// representable scale; the sums then carry the NaN or inf). The device
/// kernels compute the same scale (`gradcomp_kernels::reduce`).
#[inline(always)]
pub fn pow2_scale(max: f32) -> f32 {
    let e = (max.to_bits() >> 23) & 0xff;
    f32::from_bits(if e >= 252 { 1 } else { 253 - e } << 23)
}

/// One fused vectorized loop over a cache-resident block: max |x| and, in f32
/// lanes, Σ d and Σ d² of `d = x·scale − pivot` (Σ d² lanes first, then the
/// remainder in f64). Shared by [`moments`] and [`sum_of_squares`].
#[inline(always)]
fn lane_sums(block: &[f32], scale: f32, pivot: f32) -> (f32, f64, f64) {
    let mut mx = [0.0f32; LANES];
    let mut dev = [0.0f32; LANES];
    let mut sq = [0.0f32; LANES];
    let chunks = block.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        let c: &[f32; LANES] = c.try_into().expect("chunks_exact yields LANES");
        for l in 0..LANES {
            let v = c[l].abs();
            mx[l] = if v > mx[l] { v } else { mx[l] };
            let d = c[l] * scale - pivot;
            dev[l] += d;
            sq[l] += d * d;
        }
    }
    let max = rem.iter().fold(mx.iter().fold(0.0f32, |a, &b| a.max(b)), |a, &b| a.max(b.abs()));
    let mut d_sum: f64 = dev.iter().map(|&v| f64::from(v)).sum();
    let mut d_sq: f64 = sq.iter().map(|&v| f64::from(v)).sum();
    for &v in rem {
        let d = f64::from(v * scale) - f64::from(pivot);
        d_sum += d;
        d_sq += d * d;
    }
    (max, d_sum, d_sq)
}

/// The moments of one block from [`lane_sums`]. Deviations from a pivot near
/// the mean do not cancel the way `Σx² − n·mean²` does when |mean| ≫ σ, and
/// the power-of-two scale keeps every lane sum finite and normal. Returns
/// the moments and `max |x|·scale`, which tells the caller whether the scale
/// suited the block.
#[inline(always)]
fn block_moments_at(block: &[f32], scale: f32, pivot: f32) -> (Moments, f32) {
    let (max, d_sum, d_sq) = lane_sums(block, scale, pivot);
    let inv = 1.0 / f64::from(scale);
    let nf = block.len() as f64;
    let m = Moments {
        n: block.len(),
        mean: (f64::from(pivot) + d_sum / nf) * inv,
        // Rounding can leave a hair below 0; NaN must stay NaN (`f64::max` would drop it).
        m2: non_negative(d_sq - d_sum * d_sum / nf) * inv * inv,
        max_abs: max,
    };
    (m, max * scale)
}

/// The moments of the next block of a vector whose earlier blocks have the
/// moments `before`. The scale comes from the running max and the pivot
/// from the running mean, so ordinary data take one fused loop per block. A
/// block whose max lands outside [2^-30, 2^30] at that scale (its squared
/// deviations could overflow or go subnormal), and the first block, take
/// two more loops: a scale from their own max, and their own mean as the
/// pivot.
///
/// Accuracy: the cancellation error of a pivot `p` is about
/// `ε·n_b·(p − mean_b)²` (ε: f32 rounding over a lane's 64 additions). With
/// the running mean as the pivot that is at most `2ε` of the merged M2, since
/// the merge adds at least `(p − mean_b)²·n_b/2` to it.
#[inline(always)]
fn next_block_moments(block: &[f32], before: &Moments) -> Moments {
    const WINDOW: f32 = 1_073_741_824.0; // 2^30
    if before.n > 0 {
        let scale = pow2_scale(before.max_abs);
        let (m, scaled_max) = block_moments_at(block, scale, (before.mean * f64::from(scale)) as f32);
        if (1.0 / WINDOW..=WINDOW).contains(&scaled_max) || m.max_abs == 0.0 {
            return m;
        }
    }
    let scale = pow2_scale(max_abs_lanes(block));
    let (acc, rem) = lanes_fold(block, |a, c| {
        for l in 0..LANES {
            a[l] += c[l] * scale;
        }
    });
    let scaled_sum: f64 = acc.iter().map(|&v| f64::from(v)).sum::<f64>()
        + rem.iter().map(|&v| f64::from(v * scale)).sum::<f64>();
    block_moments_at(block, scale, (scaled_sum / block.len() as f64) as f32).0
}

/// `v`, or 0 when it is negative; NaN stays NaN.
#[inline(always)]
fn non_negative(v: f64) -> f64 {
    if v < 0.0 {
        0.0
    } else {
        v
    }
}

/// Count, mean, sum of squared deviations `M2 = Σ (x − mean)²` and max |x| of
/// a vector: every scaler a compressor needs (σ, ‖x‖₂, max |x|), accurate at
/// any magnitude f32 holds and when |mean| ≫ σ. Blocks are merged with Chan
/// et al.'s pairwise update, in f64.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    pub n: usize,
    pub mean: f64,
    pub m2: f64,
    /// max |x| over the non-NaN elements (0 when empty).
    pub max_abs: f32,
}

impl Moments {
    /// The moments of the union of two disjoint sets.
    pub fn merge(self, other: Moments) -> Moments {
        if self.n == 0 {
            return other;
        }
        if other.n == 0 {
            return self;
        }
        let (na, nb) = (self.n as f64, other.n as f64);
        let n = na + nb;
        let delta = other.mean - self.mean;
        Moments {
            n: self.n + other.n,
            mean: self.mean + delta * (nb / n),
            m2: self.m2 + other.m2 + delta * delta * (na * nb / n),
            max_abs: self.max_abs.max(other.max_abs),
        }
    }

    /// Σ x.
    pub fn sum(&self) -> f64 {
        self.mean * self.n as f64
    }

    /// Σ x² = M2 + n·mean²: two non-negative terms, so nothing cancels.
    pub fn sum_of_squares(&self) -> f64 {
        self.m2 + self.n as f64 * self.mean * self.mean
    }

    /// The standard deviation dividing by `n − ddof` (0 when there are too few values).
    pub fn std(&self, ddof: usize) -> f64 {
        if self.n <= ddof {
            return 0.0;
        }
        (self.m2 / (self.n - ddof) as f64).sqrt()
    }

    /// `sqrt(mean((x − mean)²))`.
    pub fn population_std(&self) -> f64 {
        self.std(0)
    }

    /// The unbiased (n − 1) standard deviation.
    pub fn sample_std(&self) -> f64 {
        self.std(1)
    }
}

multiversion! {
/// The [`Moments`] of `x` in one pass over memory.
pub fn moments(x: &[f32]) -> Moments {
    // A plain loop, not a fold: a closure would not inherit the AVX2 target.
    let mut m = Moments::default();
    for block in x.chunks(BLOCK) {
        m = m.merge(next_block_moments(block, &m));
    }
    m
}
}

multiversion! {
/// Σ x², accurate at any magnitude. One fused loop per block (max |x| and
/// Σ x² in f32 lanes) whose result is kept when the block's max lies in
/// [2^-30, 2^60]: then no square or lane sum (64 squares ≤ 2^126) overflows,
/// and only elements below 2^-33 of the max have subnormal squares, at most
/// 2^-66 of the sum. Other blocks are summed again scaled by [`pow2_scale`].
/// So scaling `x` by a power of two scales the sum exactly while both stay
/// normal (a lower bound of 2^-60 left squares of a max's eighth subnormal,
/// rounded differently at different scales: QSGD's norm was off by an ulp).
/// (QSGD calls this per 512-element block, where the pivot and merge of
/// [`moments`] would cost 15%.)
pub fn sum_of_squares(x: &[f32]) -> f64 {
    const LOW: f32 = 9.313_226e-10; // 2^-30
    const HIGH: f32 = 1.152_921_5e18; // 2^60
    let mut total = 0.0f64;
    for block in x.chunks(BLOCK) {
        let (max, _, sq) = lane_sums(block, 1.0, 0.0);
        total += if (LOW..=HIGH).contains(&max) || max == 0.0 {
            sq
        } else {
            let scale = pow2_scale(max);
            let inv = 1.0 / f64::from(scale);
            lane_sums(block, scale, 0.0).2 * inv * inv
        };
    }
    total
}
}

/// max |x| by 16 lanes, inlined into the caller's vectorized context.
#[inline(always)]
fn max_abs_lanes(x: &[f32]) -> f32 {
    let mut mx = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        let c: &[f32; LANES] = c.try_into().expect("chunks_exact yields LANES");
        for l in 0..LANES {
            let v = c[l].abs();
            mx[l] = if v > mx[l] { v } else { mx[l] };
        }
    }
    let m = mx.iter().fold(0.0f32, |a, &b| a.max(b));
    rem.iter().fold(m, |a, &b| a.max(b.abs()))
}

multiversion! {
/// Σ |x| and max |x| in one pass.
pub fn abs_sum_and_max(x: &[f32]) -> (f64, f32) {
    let mut s = 0.0f64;
    let mut mx = [0.0f32; LANES];
    for block in x.chunks(BLOCK) {
        let (acc, rem) = lanes_fold(block, |a, c| {
            for l in 0..LANES {
                let v = c[l].abs();
                a[l] += v;
                mx[l] = if v > mx[l] { v } else { mx[l] };
            }
        });
        s += acc.iter().map(|&v| f64::from(v)).sum::<f64>();
        for &v in rem {
            s += f64::from(v.abs());
            mx[0] = mx[0].max(v.abs());
        }
    }
    (s, mx.iter().fold(0.0f32, |a, &b| a.max(b)))
}
}

multiversion! {
/// Whether every element is finite: a value is infinite or NaN exactly when
/// its exponent bits are all ones, and an integer max over the exponents
/// vectorizes where an early-exit search does not.
pub fn all_finite(x: &[f32]) -> bool {
    const EXP: u32 = 0x7f80_0000;
    let mut mx = [0u32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            mx[l] = mx[l].max(c[l].to_bits() & EXP);
        }
    }
    mx.iter().copied().chain(rem.iter().map(|v| v.to_bits() & EXP)).all(|e| e != EXP)
}
}

multiversion! {
/// max |x| (0 for an empty slice). NaN elements are ignored.
pub fn max_abs(x: &[f32]) -> f32 {
    max_abs_lanes(x)
}
}

multiversion! {
/// How many elements have `|x| > thr`.
pub fn count_abs_above(x: &[f32], thr: f32) -> usize {
    let mut total = 0usize;
    for block in x.chunks(BLOCK) {
        let mut cnt = [0u32; LANES];
        let chunks = block.chunks_exact(LANES);
        let rem = chunks.remainder();
        for c in chunks {
            let c: &[f32; LANES] = c.try_into().expect("chunks_exact yields LANES");
            for l in 0..LANES {
                cnt[l] += u32::from(c[l].abs() > thr);
            }
        }
        total += cnt.iter().map(|&c| c as usize).sum::<usize>();
        total += rem.iter().filter(|v| v.abs() > thr).count();
    }
    total
}
}

/// Collects from `x` (whose first element has index `base`) the indices and
/// values with `|x_j| > thr` (`>=` when `inclusive`) while `out` is shorter
/// than `limit`, counting all of them in `count`. Groups of 16 are screened with a
/// vectorized compare first, so the scalar loop runs only where something is
/// selected.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn collect_block(
    x: &[f32],
    base: usize,
    thr: f32,
    inclusive: bool,
    limit: usize,
    count: &mut usize,
    out: &mut Vec<u32>,
    values: &mut Vec<f32>,
) {
    const SCREEN: usize = 16;
    let hit = |v: f32| {
        if inclusive {
            v.abs() >= thr
        } else {
            v.abs() > thr
        }
    };
    let mut visit = |base: usize, c: &[f32], out: &mut Vec<u32>, values: &mut Vec<f32>| {
        for (j, &v) in c.iter().enumerate() {
            if hit(v) {
                *count += 1;
                if out.len() < limit {
                    out.push((base + j) as u32);
                    values.push(v);
                }
            }
        }
    };
    // The screen compares the largest |x| bit pattern of a group with the
    // threshold's: for non-negative floats the bit order is the numeric order,
    // and an integer max vectorizes where a float compare-and-or did not.
    // (NaN patterns exceed every finite one, so NaN groups reach `hit`, which
    // rejects them.) A negative or NaN threshold disables the screen.
    let screen = thr >= 0.0;
    let thr_bits = thr.to_bits();
    let chunks = x.chunks_exact(SCREEN);
    let tail_start = x.len() - chunks.remainder().len();
    for (ci, c) in chunks.enumerate() {
        let c: &[f32; SCREEN] = c.try_into().expect("chunks_exact yields SCREEN");
        let mut max_bits = 0u32;
        for v in c {
            max_bits = max_bits.max(v.to_bits() & 0x7fff_ffff);
        }
        let any = !screen || if inclusive { max_bits >= thr_bits } else { max_bits > thr_bits };
        if any {
            visit(base + ci * SCREEN, c, out, values);
        }
    }
    visit(base + tail_start, &x[tail_start..], out, values);
}

multiversion! {
/// Appends to `out` the indices `j` with `|x_j| > thr` (or `>= thr` when
/// `inclusive`), ascending, and to `values` the `x_j`, at most `cap` of them;
/// returns how many elements qualify in all (which may exceed `cap`: the
/// caller can tell an over-selection without materializing it).
pub fn collect_abs_above(
    x: &[f32],
    thr: f32,
    inclusive: bool,
    cap: usize,
    out: &mut Vec<u32>,
    values: &mut Vec<f32>,
) -> usize {
    let mut count = 0;
    let limit = out.len().saturating_add(cap);
    collect_block(x, 0, thr, inclusive, limit, &mut count, out, values);
    count
}
}

multiversion! {
/// [`moments`] and [`collect_abs_above`] (exclusive) fused into one pass over
/// memory: each block is summed and screened while it is in cache. Returns
/// the moments and a count that is exact when it is at most `cap`; past `cap`
/// the screening stops (the caller only needs to know the list overflowed)
/// and count is some value above `cap`.
pub fn moments_and_collect(
    x: &[f32],
    thr: f32,
    cap: usize,
    out: &mut Vec<u32>,
    values: &mut Vec<f32>,
) -> (Moments, usize) {
    let limit = out.len().saturating_add(cap);
    let (mut m, mut count) = (Moments::default(), 0);
    for (b, block) in x.chunks(BLOCK).enumerate() {
        m = m.merge(next_block_moments(block, &m));
        if count <= cap {
            collect_block(block, b * BLOCK, thr, false, limit, &mut count, out, values);
        }
    }
    (m, count)
}
}

/// The index of the first non-finite element, if any: [`all_finite`]'s
/// vectorized pass first, the search only when it found one.
pub fn first_nonfinite(x: &[f32]) -> Option<usize> {
    if all_finite(x) {
        None
    } else {
        x.iter().position(|v| !v.is_finite())
    }
}

#[cfg(test)]
mod tests;
