//! Streaming reductions over `&[f32]`, written so the compiler vectorizes
//! them: 8 independent accumulator lanes over `chunks_exact(8)`, folded into
//! f64 every block so long sums stay accurate. Every compressor's first pass
//! (a scaler, a mean and deviation, a threshold count) is one of these.

const LANES: usize = 8;
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

/// (Σ x, Σ x²) in one pass.
pub fn sum_and_squares(x: &[f32]) -> (f64, f64) {
    let (mut s, mut q) = (0.0f64, 0.0f64);
    for block in x.chunks(BLOCK) {
        let mut sq = [0.0f32; LANES];
        let (acc, rem) = lanes_fold(block, |a, c| {
            for l in 0..LANES {
                a[l] += c[l];
                sq[l] += c[l] * c[l];
            }
        });
        s += acc.iter().map(|&v| f64::from(v)).sum::<f64>();
        q += sq.iter().map(|&v| f64::from(v)).sum::<f64>();
        for &v in rem {
            s += f64::from(v);
            q += f64::from(v) * f64::from(v);
        }
    }
    (s, q)
}

/// Σ x².
pub fn sum_of_squares(x: &[f32]) -> f64 {
    sum_and_squares(x).1
}

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

/// max |x| (0 for an empty slice). NaN elements are ignored.
pub fn max_abs(x: &[f32]) -> f32 {
    let mut mx = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            let v = c[l].abs();
            mx[l] = if v > mx[l] { v } else { mx[l] };
        }
    }
    let m = mx.iter().fold(0.0f32, |a, &b| a.max(b));
    rem.iter().fold(m, |a, &b| a.max(b.abs()))
}

/// Mean and population standard deviation `sqrt(mean((x - mean)^2))`.
pub fn mean_and_population_std(x: &[f32]) -> (f64, f64) {
    if x.is_empty() {
        return (0.0, 0.0);
    }
    let n = x.len() as f64;
    let (s, q) = sum_and_squares(x);
    let mean = s / n;
    (mean, (q / n - mean * mean).max(0.0).sqrt())
}

/// Mean and unbiased (n − 1) standard deviation.
pub fn mean_and_sample_std(x: &[f32]) -> (f64, f64) {
    if x.len() < 2 {
        return (x.first().map_or(0.0, |&v| f64::from(v)), 0.0);
    }
    let n = x.len() as f64;
    let (s, q) = sum_and_squares(x);
    let mean = s / n;
    (mean, ((q - n * mean * mean) / (n - 1.0)).max(0.0).sqrt())
}

/// How many elements have `|x| > thr`.
pub fn count_abs_above(x: &[f32], thr: f32) -> usize {
    let mut total = 0usize;
    for block in x.chunks(BLOCK) {
        let mut cnt = [0u32; LANES];
        let chunks = block.chunks_exact(LANES);
        let rem = chunks.remainder();
        for c in chunks {
            for l in 0..LANES {
                cnt[l] += u32::from(c[l].abs() > thr);
            }
        }
        total += cnt.iter().map(|&c| c as usize).sum::<usize>();
        total += rem.iter().filter(|v| v.abs() > thr).count();
    }
    total
}

/// Appends to `out` the indices `j` with `|x_j| > thr` (or `>= thr` when
/// `inclusive`), ascending, at most `cap` of them, and returns how many
/// elements qualify in all (which may exceed `cap`: the caller can tell an
/// over-selection without materializing it). Blocks of 16 are screened with a
/// vectorized compare first, so the scalar loop runs only where something is
/// selected.
pub fn collect_abs_above(x: &[f32], thr: f32, inclusive: bool, cap: usize, out: &mut Vec<u32>) -> usize {
    const SCREEN: usize = 16;
    let limit = out.len().saturating_add(cap);
    let mut count = 0usize;
    let hit = |v: f32| if inclusive { v.abs() >= thr } else { v.abs() > thr };
    let mut visit = |base: usize, c: &[f32], out: &mut Vec<u32>| {
        for (j, &v) in c.iter().enumerate() {
            if hit(v) {
                count += 1;
                if out.len() < limit {
                    out.push((base + j) as u32);
                }
            }
        }
    };
    let chunks = x.chunks_exact(SCREEN);
    let tail_start = x.len() - chunks.remainder().len();
    for (ci, c) in chunks.enumerate() {
        let mut any = false;
        for &v in c {
            any |= hit(v);
        }
        if any {
            visit(ci * SCREEN, c, out);
        }
    }
    visit(tail_start, &x[tail_start..], out);
    count
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
                let mut got = Vec::new();
                assert_eq!(collect_abs_above(&x, thr, false, usize::MAX, &mut got), want.len());
                assert_eq!(got, want);
                let mut capped = Vec::new();
                assert_eq!(collect_abs_above(&x, thr, false, 3, &mut capped), want.len());
                assert_eq!(capped, want[..want.len().min(3)]);
                let mut incl = Vec::new();
                collect_abs_above(&x, thr, true, usize::MAX, &mut incl);
                assert_eq!(incl.len(), x.iter().filter(|v| v.abs() >= thr).count());
            }
        }
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
