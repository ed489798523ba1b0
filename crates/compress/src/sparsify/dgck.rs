//! DGC's sampled top-k (Lin et al. 2018; ALGORITHMS.md §3.4): estimate the
//! threshold on a strided sample, adapt it up to 10 times, and finish with an
//! exact top-k when it over-selects. Pair it with
//! [`DgcMomentum`](crate::memory::DgcMomentum) for momentum correction.

use serde::{Deserialize, Serialize};

use super::select::{keep_top_k, select_top_k};
use super::{Selector, Sparsifier};
use crate::compressor::UnitContext;
use crate::memory::MemoryKind;
use crate::message::{SparseMessage, SparseWire};
use crate::method::{check, check_density, density_option, Method};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DgcKConfig {
    pub density: f64,
    /// Fraction of the buffer sampled to estimate the threshold (DGC: 1%);
    /// at least `2/ρ` elements are sampled.
    pub sample_fraction: f64,
    pub wire: SparseWire,
}

impl Default for DgcKConfig {
    fn default() -> Self {
        Self { density: 0.001, sample_fraction: 0.01, wire: SparseWire::default() }
    }
}

#[derive(Clone, Debug, Default)]
pub struct DgcK {
    pub sample_fraction: f64,
    samples: Vec<f32>,
    scratch: Vec<f32>,
}

impl DgcK {
    pub fn compressor(config: &DgcKConfig) -> Sparsifier<DgcK> {
        let selector = DgcK { sample_fraction: config.sample_fraction, ..Default::default() };
        Sparsifier::new(selector, config.density, config.wire)
    }
}

/// Adaptation rounds before the threshold is accepted as it is (the device
/// kernel runs the same rounds).
pub const MAX_ADAPT: usize = 10;

impl Selector for DgcK {
    fn name(&self) -> &'static str {
        "dgck"
    }

    fn select(&mut self, x: &[f32], k: usize, ctx: &UnitContext, out: &mut SparseMessage) {
        let d = x.len();
        if k == 0 || d == 0 {
            return;
        }
        let rho = k as f64 / d as f64;
        let wanted = (self.sample_fraction * d as f64).max(2.0 / rho).ceil() as usize;
        let n_samples = wanted.clamp(1, d);
        let stride = d / n_samples;
        let start = ctx.key.rng().below(stride as u64) as usize;
        self.samples.clear();
        self.samples.extend(x[start..].iter().step_by(stride).map(|v| v.abs()));
        let n = self.samples.len();
        let top = ((n as f64 * rho).ceil() as usize).clamp(1, n);
        let (_, &mut mut thr, _) = self.samples.select_nth_unstable_by(n - top, f32::total_cmp);

        let (low, high) = (0.8 * k as f64, 1.3 * k as f64);
        // Collect up to 4k candidates; beyond that an exact top-k over the
        // whole buffer is cheaper than materializing the candidates.
        let cap = 4 * k;
        for _ in 0..MAX_ADAPT {
            out.indices.clear();
            out.values.clear();
            let count =
                crate::reduce::collect_abs_above(x, thr, true, cap, &mut out.indices, &mut out.values);
            if count as f64 > high {
                if count <= cap {
                    keep_top_k(out, k, &mut self.scratch);
                } else {
                    select_top_k(x, k, &mut self.scratch, out);
                }
                return;
            }
            if count as f64 >= low {
                return;
            }
            thr *= 0.8;
        }
    }
}

impl Method for DgcKConfig {
    fn draws_random(&self) -> bool {
        true
    }
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check_density(self.density)?;
        check(self.sample_fraction > 0.0 && self.sample_fraction <= 1.0, "sample_fraction", || {
            format!("{} is not in (0, 1]", self.sample_fraction)
        })
    }
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::DgcMomentum
    }
    density_option!();
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(DgcK::compressor(self))
    }
}
