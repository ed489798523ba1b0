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
            let (fm, fc) = moments_and_collect(&x, thr, 5, &mut fused, &mut fused_values);
            if want.len() <= 5 {
                assert_eq!(fc, want.len());
            } else {
                assert!(fc > 5);
            }
            assert_eq!(&fused[..], &want[..want.len().min(5)]);
            assert!(fused.iter().zip(&fused_values).all(|(&i, &v)| x[i as usize] == v));
            assert_eq!(fm, moments(&x));
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
            assert_eq!(first_nonfinite(&x), Some(at), "{bad} at {at}");
            x[at] = keep;
        }
    }
    assert_eq!(first_nonfinite(&x), None);
    assert!(all_finite(&[]));
    assert!(all_finite(&[f32::MAX, f32::MAX, -f32::MAX]));
}

#[test]
fn std_forms() {
    let m = moments(&[1.0f32, 2.0, 3.0, 4.0]);
    assert!((m.mean - 2.5).abs() < 1e-12);
    assert!((m.population_std() - 1.25f64.sqrt()).abs() < 1e-9);
    assert!((m.sample_std() - (5.0f64 / 3.0).sqrt()).abs() < 1e-9);
    assert_eq!(moments(&[]), Moments::default());
    assert_eq!(moments(&[7.0]).sample_std(), 0.0);
}

/// Exact reference moments in f64 (two passes; f64 holds the square of
/// every f32 and sums of millions of them without overflow).
fn reference(x: &[f32]) -> (f64, f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let m2: f64 = x.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum();
    let sq: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum();
    (mean, m2, sq)
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want.abs() || got == want
}

proptest::proptest! {
    /// Issue #12: sums of squares accumulated in f32 overflowed above
    /// ~1.8e19 and lost everything below ~1e-19 (QSGD's norm and
    /// TernGrad's scaler became inf or 0), and the one-pass variance
    /// `q − n·mean²` was 5% off at mean = 10⁴σ. Every magnitude f32
    /// holds, offset means and lengths across block boundaries.
    #[test]
    fn moments_hold_at_every_magnitude(
        exp in -149i32..=127,
        offset in proptest::prop_oneof![proptest::strategy::Just(0.0f64), 1.0f64..1e6],
        n in 1usize..3000,
        seed in 0u64..1000,
    ) {
        let mut r = crate::UnitRng::from_parts(&[seed]);
        // Values σ·(offset + N(0, 1)) with σ = 2^exp, kept finite.
        let sigma = 2f64.powi(exp);
        let x: Vec<f32> = (0..n)
            .map(|_| (sigma * (offset + r.next_gaussian())).clamp(-f64::from(f32::MAX), f64::from(f32::MAX)) as f32)
            .collect();
        let m = moments(&x);
        let (mean, m2, sq) = reference(&x);
        proptest::prop_assert!(m.m2.is_finite() && m.mean.is_finite());
        // Subnormal inputs carry few significant bits of their own; the
        // reductions must still not lose what is there.
        let tol = if exp < -120 { 1e-3 } else { 1e-5 };
        proptest::prop_assert!(close(m.sum_of_squares(), sq, tol), "Σx² {} vs {}", m.sum_of_squares(), sq);
        proptest::prop_assert!(close(sum_of_squares(&x), sq, tol), "sum_of_squares {} vs {}", sum_of_squares(&x), sq);
        // The mean is judged against the spread (a zero-mean vector's mean is noise).
        let rms = (sq / n as f64).sqrt();
        proptest::prop_assert!((m.mean - mean).abs() <= tol * rms, "mean {} vs {}", m.mean, mean);
        proptest::prop_assert!(close(m.m2.sqrt(), m2.sqrt(), tol.max(1e-4)), "σ {} vs {}", m.m2.sqrt(), m2.sqrt());
        let want_max = x.iter().fold(0.0f32, |a, &b| a.max(b.abs()));
        proptest::prop_assert_eq!(m.max_abs, want_max);
    }
}

proptest::proptest! {
    /// A global unit concatenates layers whose gradients differ by many
    /// orders of magnitude and in mean: blocks after a jump re-scale and
    /// re-pivot, and the merged moments stay exact to f32 rounding.
    #[test]
    fn moments_across_layers_of_any_scale(
        layers in proptest::collection::vec((-100i32..100, -1e4f64..1e4, 1usize..2500), 1..5),
        seed in 0u64..1000,
    ) {
        let mut r = crate::UnitRng::from_parts(&[seed]);
        let mut x = Vec::new();
        for &(exp, offset, len) in &layers {
            let sigma = 2f64.powi(exp);
            x.extend((0..len).map(|_| (sigma * (offset + r.next_gaussian())) as f32));
        }
        let m = moments(&x);
        let (mean, m2, sq) = reference(&x);
        let rms = (sq / x.len() as f64).sqrt();
        proptest::prop_assert!(close(m.sum_of_squares(), sq, 1e-5), "Σx² {} vs {}", m.sum_of_squares(), sq);
        proptest::prop_assert!((m.mean - mean).abs() <= 1e-5 * rms, "mean {} vs {}", m.mean, mean);
        proptest::prop_assert!(close(m.m2.sqrt(), m2.sqrt(), 1e-4), "σ {} vs {}", m.m2.sqrt(), m2.sqrt());
    }
}

#[test]
fn sum_of_squares_scales_exactly_with_a_power_of_two() {
    // The case CI found through QSGD (e = -61): every e keeping x normal.
    let mut r = crate::UnitRng::from_parts(&[195]);
    let x: Vec<f32> = (0..1500).map(|_| r.next_gaussian() as f32).collect();
    for e in -90..=90 {
        let s = 2f32.powi(e);
        let y: Vec<f32> = x.iter().map(|&v| v * s).collect();
        // Per QSGD block (512) and whole.
        for (a, b) in x.chunks(512).chain([&x[..]]).zip(y.chunks(512).chain([&y[..]])) {
            assert_eq!(sum_of_squares(b), sum_of_squares(a) * f64::from(s) * f64::from(s), "2^{e}");
        }
    }
}

#[test]
fn the_issues_cases() {
    // Values past 1.8e19 (their squares overflow f32) and below 1e-19.
    for v in [3e19f32, 1e30, f32::MAX, 1e-20, 1e-30, 1e-38, 1e-44] {
        let x = vec![v; 3000];
        let m = moments(&x);
        let want = f64::from(v).powi(2) * 3000.0;
        assert!(close(m.sum_of_squares(), want, 1e-6), "{v}: {} vs {want}", m.sum_of_squares());
        assert!(close(sum_of_squares(&x), want, 1e-6), "{v}: {} vs {want}", sum_of_squares(&x));
        assert_eq!(m.m2, 0.0, "{v}: constant input has no spread");
    }
    // A mean 10⁴ σ away from zero: σ exact to 1e-5, not 5% off.
    let mut r = crate::UnitRng::from_parts(&[5]);
    let x: Vec<f32> = (0..100_000).map(|_| (1e4 + r.next_gaussian()) as f32).collect();
    let (_, m2, _) = reference(&x);
    assert!(close(moments(&x).m2, m2, 1e-5));
    // NaN and inf propagate into the sums (callers test finiteness).
    assert!(moments(&[1.0, f32::NAN, 2.0]).m2.is_nan());
    assert!(!moments(&[1.0, f32::INFINITY]).sum_of_squares().is_finite());
}
