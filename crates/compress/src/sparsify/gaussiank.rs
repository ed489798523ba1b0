//! Gaussian-k (Shi et al. 2019, ALGORITHMS.md §3.3): estimate the top-k
//! threshold from the mean and standard deviation as if the buffer were
//! Gaussian, then correct it at most twice. No sort: two streaming passes in
//! the common case (statistics, then one fused count-and-collect).

use serde::{Deserialize, Serialize};

use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::message::SparseWire;
use crate::reduce;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GaussianKConfig {
    pub density: f64,
    pub wire: SparseWire,
}

impl Default for GaussianKConfig {
    fn default() -> Self {
        Self {
            density: 0.001,
            wire: SparseWire::default(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct GaussianK;

impl GaussianK {
    pub fn compressor(config: &GaussianKConfig) -> Sparsifier<GaussianK> {
        Sparsifier::new(GaussianK, config.density, config.wire)
    }
}

impl Selector for GaussianK {
    fn name(&self) -> &'static str {
        "gaussiank"
    }

    fn select(&mut self, x: &[f32], k: usize, _ctx: &UnitContext, out: &mut Vec<u32>) {
        let d = x.len();
        if d == 0 {
            return;
        }
        let rho = k as f64 / d as f64;
        let (mu, sd) = reduce::mean_and_sample_std(x);
        let mut thr = (mu + normal_quantile(1.0 - rho / 2.0) * sd) as f32;
        let (low, high) = (2.0 * k as f64 / 3.0, 4.0 * k as f64 / 3.0);
        // Rounds 0 and 1 may move the threshold; round 2's set is final.
        for round in 0..3 {
            out.clear();
            let cap = if round == 2 { usize::MAX } else { high as usize + 1 };
            let count = reduce::collect_abs_above(x, thr, false, cap, out) as f64;
            if round == 2 {
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
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
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
