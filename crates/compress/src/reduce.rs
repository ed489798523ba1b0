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

/// (Σ x, Σ x²) of one block.
#[inline(always)]
fn block_sums(block: &[f32]) -> (f64, f64) {
    // Two loops over the block (it is in L1 for the second): fused, LLVM
    // pairs (sum, square) per lane instead of vectorizing across lanes.
    let (acc, rem) = lanes_fold(block, |a, c| {
        for l in 0..LANES {
            a[l] += c[l];
        }
    });
    let (sq, _) = lanes_fold(block, |a, c| {
        for l in 0..LANES {
            a[l] += c[l] * c[l];
        }
    });
    let mut s: f64 = acc.iter().map(|&v| f64::from(v)).sum();
    let mut q: f64 = sq.iter().map(|&v| f64::from(v)).sum();
    for &v in rem {
        s += f64::from(v);
        q += f64::from(v) * f64::from(v);
    }
    (s, q)
}

multiversion! {
/// (Σ x, Σ x²) in one pass.
pub fn sum_and_squares(x: &[f32]) -> (f64, f64) {
    x.chunks(BLOCK).map(block_sums).fold((0.0, 0.0), |(s, q), (bs, bq)| (s + bs, q + bq))
}
}

/// Σ x².
pub fn sum_of_squares(x: &[f32]) -> f64 {
    sum_and_squares(x).1
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
}

/// Mean and population standard deviation `sqrt(mean((x - mean)^2))`.
pub fn mean_and_population_std(x: &[f32]) -> (f64, f64) {
    let (s, q) = sum_and_squares(x);
    mean_and_std_from_sums(s, q, x.len(), 0)
}

/// Mean and unbiased (n − 1) standard deviation.
pub fn mean_and_sample_std(x: &[f32]) -> (f64, f64) {
    let (s, q) = sum_and_squares(x);
    mean_and_std_from_sums(s, q, x.len(), 1)
}

/// Mean and standard deviation from Σx and Σx² of `n` values, dividing the
/// squared deviations by `n − ddof` (0 when there are too few values).
pub fn mean_and_std_from_sums(s: f64, q: f64, n: usize, ddof: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = s / n as f64;
    if n <= ddof {
        return (mean, 0.0);
    }
    let var = (q - n as f64 * mean * mean) / (n - ddof) as f64;
    (mean, var.max(0.0).sqrt())
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
/// [`sum_and_squares`] and [`collect_abs_above`] (exclusive) fused into one
/// pass over memory: each block is summed and screened while it is in cache.
/// Returns (Σ x, Σ x², count), where count is exact when it is at most `cap`;
/// past `cap` the screening stops (the caller only needs to know the list
/// overflowed) and count is some value above `cap`.
pub fn sum_squares_and_collect(
    x: &[f32],
    thr: f32,
    cap: usize,
    out: &mut Vec<u32>,
    values: &mut Vec<f32>,
) -> (f64, f64, usize) {
    let limit = out.len().saturating_add(cap);
    let (mut s, mut q, mut count) = (0.0, 0.0, 0);
    for (b, block) in x.chunks(BLOCK).enumerate() {
        let (bs, bq) = block_sums(block);
        s += bs;
        q += bq;
        if count <= cap {
            collect_block(block, b * BLOCK, thr, false, limit, &mut count, out, values);
        }
    }
    (s, q, count)
}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0).collect()
    }

    #[test]
    fn reductions_match_naive_on_odd_lengths() {
        for n in [0, 1, 7, 8, 9, 1023, 1024, 1025, 5000] {
            let x = data(n);
            let naive: f64 = x.iter().map(|&v| f64::from(v)).sum();
            let scale: f64 = x.iter().map(|&v| f64::from(v.abs())).sum();
            assert!((sum(&x) - naive).abs() <= 1e-6 * scale.max(1.0), "n={n}");
            let sq: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            assert!((sum_of_squares(&x) - sq).abs() / sq.max(1.0) < 1e-6);
            let mx = x.iter().fold(0.0f32, |a, &b| a.max(b.abs()));
            assert_eq!(max_abs(&x), mx);
            let (abs_s, abs_m) = abs_sum_and_max(&x);
            assert_eq!(abs_m, mx);
            let abs_naive: f64 = x.iter().map(|&v| f64::from(v.abs())).sum();
            assert!((abs_s - abs_naive).abs() <= 1e-6 * abs_naive.max(1.0));
            for thr in [0.0, 1.5, 4.99] {
                let want: Vec<u32> = (0..n as u32).filter(|&j| x[j as usize].abs() > thr).collect();
                assert_eq!(count_abs_above(&x, thr), want.len());
                let (mut got, mut vals) = (Vec::new(), Vec::new());
                assert_eq!(collect_abs_above(&x, thr, false, usize::MAX, &mut got, &mut vals), want.len());
                assert_eq!(got, want);
                assert!(got.iter().zip(&vals).all(|(&i, &v)| x[i as usize] == v));
                let (mut capped, mut vals) = (Vec::new(), Vec::new());
                assert_eq!(collect_abs_above(&x, thr, false, 3, &mut capped, &mut vals), want.len());
                assert_eq!(capped, want[..want.len().min(3)]);
                assert_eq!(vals.len(), capped.len());
                let mut fused = Vec::new();
                let mut fused_values = Vec::new();
                let (fs, fq, fc) = sum_squares_and_collect(&x, thr, 5, &mut fused, &mut fused_values);
                if want.len() <= 5 {
                    assert_eq!(fc, want.len());
                } else {
                    assert!(fc > 5);
                }
                assert_eq!(&fused[..], &want[..want.len().min(5)]);
                assert!(fused.iter().zip(&fused_values).all(|(&i, &v)| x[i as usize] == v));
                assert_eq!((fs, fq), sum_and_squares(&x));
                let mut incl = Vec::new();
                collect_abs_above(&x, thr, true, usize::MAX, &mut incl, &mut Vec::new());
                assert_eq!(incl.len(), x.iter().filter(|v| v.abs() >= thr).count());
            }
        }
    }

    #[test]
    fn finiteness() {
        let mut x = data(1000);
        assert!(all_finite(&x));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0, 500, 999] {
                let keep = x[at];
                x[at] = bad;
                assert!(!all_finite(&x), "{bad} at {at}");
                x[at] = keep;
            }
        }
        assert!(all_finite(&[]));
        assert!(all_finite(&[f32::MAX, f32::MAX, -f32::MAX]));
    }

    #[test]
    fn std_forms() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let (m, p) = mean_and_population_std(&x);
        assert!((m - 2.5).abs() < 1e-12);
        assert!((p - 1.25f64.sqrt()).abs() < 1e-9);
        let (_, s) = mean_and_sample_std(&x);
        assert!((s - (5.0f64 / 3.0).sqrt()).abs() < 1e-9);
    }
}
