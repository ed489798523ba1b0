//! Gaussian-k (Shi et al. 2019, ALGORITHMS.md §3.3): estimate the top-k
//! threshold from the mean and standard deviation as if the buffer were
//! Gaussian, then correct it at most twice. No sort: two streaming passes in
//! the common case (statistics, then one fused count-and-collect).

use serde::{Deserialize, Serialize};

use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::message::{SparseMessage, SparseWire};
use crate::reduce;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GaussianKConfig {
    pub density: f64,
    pub wire: SparseWire,
}

impl Default for GaussianKConfig {
    fn default() -> Self {
        Self { density: 0.001, wire: SparseWire::default() }
    }
}

#[derive(Clone, Debug, Default)]
pub struct GaussianK {
    sample: Vec<f32>,
    /// Elements above the provisional bound, found during the statistics pass.
    candidates: SparseMessage,
}

impl GaussianK {
    pub fn compressor(config: &GaussianKConfig) -> Sparsifier<GaussianK> {
        Sparsifier::new(GaussianK::default(), config.density, config.wire)
    }
}

/// Elements in the strided sample that sets the provisional bound.
const SAMPLE: usize = 4096;
/// The provisional bound is this fraction of the sample's threshold estimate:
/// far enough below it that the exact threshold almost never falls under it.
const BOUND_MARGIN: f64 = 0.9;

impl Selector for GaussianK {
    fn name(&self) -> &'static str {
        "gaussiank"
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
        self.sample.extend(x.iter().step_by(stride));
        let sample = reduce::moments(&self.sample);
        let (mu_s, sd_s) = (sample.mean, sample.sample_std());
        let bound = (BOUND_MARGIN * (mu_s + z * sd_s)).max(0.0) as f32;

        let cap = 4 * k + 64;
        let c = &mut self.candidates;
        c.indices.clear();
        c.values.clear();
        let (m, n_cand) = reduce::moments_and_collect(x, bound, cap, &mut c.indices, &mut c.values);
        let complete = n_cand <= cap;
        let (mu, sd) = (m.mean, m.sample_std());
        let mut thr = (mu + z * sd) as f32;

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
