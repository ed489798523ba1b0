//! Gaussian-k (Shi et al. 2019, ALGORITHMS.md §3.3): estimate the top-k
//! threshold from the mean and standard deviation as if the buffer were
//! Gaussian, then correct it at most twice. No sort: two streaming passes in
//! the common case (statistics, then one fused count-and-collect).

use serde::{Deserialize, Serialize};

use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::message::{SparseMessage, SparseWire};
use crate::method::error_feedback_sparsifier;
use crate::reduce;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GaussianKConfig {
    pub density: f64,
    pub wire: SparseWire,
    /// Gaussian-k refined (a gradcomp variant, not in the paper; the name
    /// `gaussiank-refined`): the provisional bound is the sample's own order
    /// statistic instead of its Gaussian fit, and when the one pass collected
    /// at least k candidates the exact k largest of them are sent (else the
    /// paper's rounds run). Lands on k wherever
    /// the buffer's shape makes the Gaussian estimate collapse or over-send
    /// (issue #13). `false` is the paper's rule, exactly.
    pub refine: bool,
}

impl Default for GaussianKConfig {
    fn default() -> Self {
        Self { density: 0.001, wire: SparseWire::default(), refine: false }
    }
}

#[derive(Clone, Debug, Default)]
pub struct GaussianK {
    refine: bool,
    sample: Vec<f32>,
    /// Elements above the provisional bound, found during the statistics pass.
    candidates: SparseMessage,
    /// Positions in `candidates`, ordered for the refined selection.
    order: Vec<u32>,
}

impl GaussianK {
    pub fn compressor(config: &GaussianKConfig) -> Sparsifier<GaussianK> {
        Sparsifier::new(
            GaussianK { refine: config.refine, ..Default::default() },
            config.density,
            config.wire,
        )
    }

    /// The refined variant's bound and how many elements are expected above
    /// it: the `m`-th largest |x| of the sample with `m = max(16, 2ρ·n)`, so
    /// about 2k elements of the buffer (never fewer than 16 of the sample's
    /// share) lie above it whatever its distribution, the sample being strided
    /// across all of it. Reorders `sample`.
    fn sample_order_bound(sample: &mut [f32], k: usize, d: usize) -> (f64, usize) {
        let n = sample.len();
        if n == 0 {
            return (0.0, d);
        }
        let m = (2 * k * n).div_ceil(d.max(1)).max(16).min(n);
        for v in sample.iter_mut() {
            *v = v.abs();
        }
        let (_, nth, _) = sample.select_nth_unstable_by(m - 1, |a, b| b.total_cmp(a));
        (f64::from(*nth), (m * d).div_ceil(n))
    }

    /// The k largest candidates by magnitude, ascending by index, into `out`.
    fn exact_k_of_candidates(&mut self, k: usize, out: &mut SparseMessage) {
        let c = &self.candidates;
        self.order.clear();
        self.order.extend(0..c.values.len() as u32);
        let mag = |i: &u32| c.values[*i as usize].abs();
        if k < self.order.len() {
            self.order.select_nth_unstable_by(k - 1, |a, b| mag(b).total_cmp(&mag(a)));
            self.order.truncate(k);
        }
        // Candidate positions ascend with their indices into x.
        self.order.sort_unstable();
        for &p in &self.order {
            out.indices.push(c.indices[p as usize]);
            out.values.push(c.values[p as usize]);
        }
    }

    /// The paper's correction rounds from threshold `thr`: the set above it
    /// goes into `out` once its size is within `[2k/3, 4k/3]`, else the
    /// threshold is halved or raised by half, and the third round's set is
    /// final. While `thr ≥ bound` and the candidate list is `complete`, a
    /// round filters the candidates instead of passing over `x`.
    fn correct(
        &self,
        x: &[f32],
        k: usize,
        mut thr: f32,
        bound: f32,
        complete: bool,
        out: &mut SparseMessage,
    ) {
        let (low, high) = (2.0 * k as f64 / 3.0, 4.0 * k as f64 / 3.0);
        // Rounds 0 and 1 may move the threshold; round 2's set is final.
        for round in 0..3 {
            out.indices.clear();
            out.values.clear();
            let last = round == 2;
            let count = if complete && thr >= bound {
                // Every element above thr is a candidate: filter the list.
                let c = &self.candidates;
                let cap = if last { usize::MAX } else { high as usize + 1 };
                let n =
                    reduce::collect_abs_above(&c.values, thr, false, cap, &mut out.indices, &mut out.values);
                // Positions in the candidate list -> indices into x.
                for i in &mut out.indices {
                    *i = c.indices[*i as usize];
                }
                n as f64
            } else {
                // A full pass. Count first (vectorized); collect only the set that is kept.
                let n = reduce::count_abs_above(x, thr) as f64;
                if last || (n >= low && n <= high) {
                    reduce::collect_abs_above(x, thr, false, usize::MAX, &mut out.indices, &mut out.values);
                }
                n
            };
            if last {
                break;
            }
            if count < low {
                thr *= 0.5;
            } else if count > high {
                thr *= 1.5;
            } else {
                break;
            }
        }
    }
}

/// Elements in the strided sample that sets the provisional bound.
const SAMPLE: usize = 4096;
/// The provisional bound is this fraction of the sample's threshold estimate:
/// far enough below it that the exact threshold almost never falls under it.
const BOUND_MARGIN: f64 = 0.9;

impl Selector for GaussianK {
    fn name(&self) -> &'static str {
        if self.refine {
            "gaussiank-refined"
        } else {
            "gaussiank"
        }
    }

    /// The rule of ALGORITHMS.md §3.3, in one pass over `x` in the common case.
    ///
    /// The exact mean and deviation need a full pass before any threshold is
    /// known. To avoid a second pass, a strided sample first gives a
    /// provisional bound `L` below the threshold to come, and the statistics
    /// pass also collects the (few) elements above `L`. Every mask evaluation
    /// at a threshold `t ≥ L` is then a filter of those candidates, which gives
    /// exactly the set `{|x| > t}`; a threshold below `L` (the correction
    /// halved it) or an overflowing candidate list falls back to a full pass.
    fn select(&mut self, x: &[f32], k: usize, _ctx: &UnitContext, out: &mut SparseMessage) {
        let d = x.len();
        if d == 0 {
            return;
        }
        let z = normal_quantile(1.0 - k as f64 / d as f64 / 2.0);
        let stride = (d / SAMPLE).max(1);
        self.sample.clear();
        if self.refine && stride > 1 {
            // One element at a hashed offset in each window of `stride`: a
            // fixed stride aliases with periodic buffers (a layer of 3×3
            // kernels, every 7th element scaled), and the order statistic
            // would then describe one phase of the period only.
            self.sample
                .extend((0..d / stride).map(|w| x[w * stride + (mix(w as u64) % stride as u64) as usize]));
        } else {
            self.sample.extend(x.iter().step_by(stride));
        }
        let sample = reduce::moments(&self.sample);
        let (mu_s, sd_s) = (sample.mean, sample.sample_std());
        let mut bound = BOUND_MARGIN * (mu_s + z * sd_s);
        let mut cap = 4 * k + 64;
        if self.refine {
            // The sample's own order statistic, not the Gaussian fit, which is
            // what misleads the paper's rule; room for three times the
            // expected candidates (an order statistic of 16+ sample elements
            // is rarely that far off).
            let (order, expected) = Self::sample_order_bound(&mut self.sample, k, d);
            bound = order;
            cap = cap.max(3 * expected + 64);
        }
        let bound = bound.max(0.0) as f32;

        let c = &mut self.candidates;
        c.indices.clear();
        c.values.clear();
        let (m, n_cand) = reduce::moments_and_collect(x, bound, cap, &mut c.indices, &mut c.values);
        let complete = n_cand <= cap;
        if self.refine && complete && n_cand >= k {
            self.exact_k_of_candidates(k, out);
            return;
        }
        let (mu, sd) = (m.mean, m.sample_std());
        let thr = (mu + z * sd) as f32;
        self.correct(x, k, thr, bound, complete, out);
    }
}

/// SplitMix64's output function: a fixed, well-spread hash of `i`.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Φ⁻¹(p), the standard normal quantile, for p in (0, 1); ±∞ at the ends.
/// Acklam's rational approximation, relative error below 1.15e-9: far finer
/// than the threshold heuristic it feeds.
pub fn normal_quantile(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    const P_LOW: f64 = 0.02425;
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < P_LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - P_LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

error_feedback_sparsifier!(GaussianKConfig => GaussianK {
    fn variant_name(&self) -> Option<&'static str> {
        self.refine.then_some("gaussiank-refined")
    }
    fn variant(name: &str) -> Option<Self> {
        (name == "gaussiank-refined").then(|| GaussianKConfig { refine: true, ..Default::default() })
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::UnitRng;

    /// ALGORITHMS.md §3.3 written out directly, one full mask pass per round.
    fn reference(x: &[f32], k: usize) -> Vec<u32> {
        let rho = k as f64 / x.len() as f64;
        let m = reduce::moments(x);
        let (mu, sd) = (m.mean, m.sample_std());
        let mut thr = (mu + normal_quantile(1.0 - rho / 2.0) * sd) as f32;
        let mut set = Vec::new();
        for round in 0..3 {
            set = (0..x.len() as u32).filter(|&j| x[j as usize].abs() > thr).collect();
            let c = set.len() as f64;
            if round == 2 {
                break;
            }
            if c < 2.0 * k as f64 / 3.0 {
                thr *= 0.5;
            } else if c > 4.0 * k as f64 / 3.0 {
                thr *= 1.5;
            } else {
                break;
            }
        }
        set
    }

    #[test]
    fn one_pass_form_selects_exactly_the_reference_set() {
        let mut r = UnitRng::from_parts(&[99]);
        let n = 50_000;
        let gaussian: Vec<f32> = (0..n).map(|_| r.next_gaussian() as f32).collect();
        let uniform: Vec<f32> = (0..n).map(|_| r.next_f32() - 0.5).collect();
        let heavy: Vec<f32> = (0..n).map(|_| (r.next_gaussian().powi(3)) as f32).collect();
        let mut spikes = vec![0.0f32; n];
        for j in (0..n).step_by(97) {
            spikes[j] = 1.0 + j as f32;
        }
        let shifted: Vec<f32> = gaussian.iter().map(|v| v + 3.0).collect();
        let constant = vec![1.0f32; n];
        for x in [&gaussian, &uniform, &heavy, &spikes, &shifted, &constant] {
            for rho in [0.0005, 0.001, 0.01, 0.1, 0.5] {
                let k = crate::k_for(rho, n);
                let mut got = SparseMessage::default();
                GaussianK::default().select(x, k, &UnitContext::default(), &mut got);
                assert_eq!(got.indices, reference(x, k), "rho={rho}");
                assert!(got.indices.iter().zip(&got.values).all(|(&i, &v)| x[i as usize] == v));
            }
        }
    }

    /// The refined variant sends exactly the k largest whenever its pass
    /// collected enough candidates: on Gaussian data, on the shapes where the
    /// Gaussian estimate is far off (uniform, heavy tails, a residual with
    /// many exact zeros, spikes, an offset), at every density.
    #[test]
    fn the_refined_variant_sends_the_exact_top_k() {
        let mut r = UnitRng::from_parts(&[7]);
        let n = 60_000;
        let gaussian: Vec<f32> = (0..n).map(|_| r.next_gaussian() as f32).collect();
        let uniform: Vec<f32> = (0..n).map(|_| r.next_f32() - 0.5).collect();
        let heavy: Vec<f32> = (0..n).map(|_| (r.next_gaussian().powi(3)) as f32).collect();
        // An error-feedback buffer: 16% exact zeros (pixels at 0 after p/255).
        let zeros: Vec<f32> = (0..n)
            .map(|i| if i % 6 == 0 { 0.0 } else { (r.next_gaussian() * (1.0 + (i % 7) as f64)) as f32 })
            .collect();
        let shifted: Vec<f32> = gaussian.iter().map(|v| v + 3.0).collect();
        let mut refined = GaussianK { refine: true, ..Default::default() };
        for (name, x) in [
            ("gaussian", &gaussian),
            ("uniform", &uniform),
            ("heavy", &heavy),
            ("zeros", &zeros),
            ("shifted", &shifted),
        ] {
            let mut by_mag: Vec<u32> = (0..n as u32).collect();
            by_mag.sort_by(|&a, &b| x[b as usize].abs().total_cmp(&x[a as usize].abs()));
            for rho in [0.0005, 0.001, 0.01, 0.1] {
                let k = crate::k_for(rho, n);
                let mut want = by_mag[..k].to_vec();
                want.sort_unstable();
                let mut got = SparseMessage::default();
                refined.select(x, k, &UnitContext::default(), &mut got);
                assert_eq!(got.indices, want, "{name} at rho={rho}");
                assert!(got.indices.iter().zip(&got.values).all(|(&i, &v)| x[i as usize] == v));
                // The paper's rule on the same input is off k on the skewed shapes.
                let mut plain = SparseMessage::default();
                GaussianK::default().select(x, k, &UnitContext::default(), &mut plain);
                assert_eq!(plain.indices, reference(x, k));
            }
        }
    }

    /// Where the pass cannot collect k candidates (ties at the bound, a
    /// constant buffer) the refined variant falls back to the paper's rounds.
    #[test]
    fn the_refined_variant_falls_back_when_candidates_run_short() {
        let mut refined = GaussianK { refine: true, ..Default::default() };
        for x in [vec![1.0f32; 10_000], vec![0.0f32; 10_000]] {
            let k = crate::k_for(0.01, x.len());
            let mut got = SparseMessage::default();
            refined.select(&x, k, &UnitContext::default(), &mut got);
            assert_eq!(got.indices, reference(&x, k));
        }
    }

    #[test]
    fn quantiles_match_tables() {
        let cases = [
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054),
            (0.9995, 3.290_526_731_491_926),
            (0.841_344_746_068_542_9, 1.0),
            (0.001, -3.090_232_306_167_813_6),
            (1e-10, -6.361_340_902_404_056),
        ];
        for (p, want) in cases {
            let got = normal_quantile(p);
            assert!((got - want).abs() <= 2e-9 * want.abs().max(1.0), "Φ⁻¹({p}) = {got}, want {want}");
        }
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
    }
}
