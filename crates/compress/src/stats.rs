//! Statistics the papers monitor on real gradients.

use crate::message::Message;
use crate::reduce;

/// `r = ‖u − C(u)‖² / ‖u‖²` for the message `sent` compressed from `u`
/// (ALGORITHMS.md §3.2); 0 for a zero `u`. `scratch` is reused.
pub fn contraction_ratio(u: &[f32], sent: &Message, scratch: &mut Vec<f32>) -> f64 {
    let norm = reduce::sum_of_squares(u);
    if norm == 0.0 {
        return 0.0;
    }
    let err = match sent {
        // ‖u − C(u)‖² = Σ_{j∉I} u_j² + Σ_{j∈I} (u_j − v_j)², without a dense copy.
        Message::Sparse(m) => {
            let mut err = norm;
            for (&i, &v) in m.indices.iter().zip(&m.values) {
                let x = f64::from(u[i as usize]);
                err += (x - f64::from(v)).powi(2) - x * x;
            }
            err.max(0.0)
        }
        _ => {
            scratch.clear();
            scratch.extend_from_slice(u);
            sent.add_to(-1.0, scratch);
            reduce::sum_of_squares(scratch)
        }
    };
    err / norm
}

/// The two contraction bounds for keeping k of d elements: the classic
/// `1 − k/d` (met by Rand-k in expectation) and the tighter `(1 − k/d)²` that
/// Top-k meets on bell-shaped data (Shi et al. 2019).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContractionBounds {
    pub classic: f64,
    pub tight: f64,
}

impl ContractionBounds {
    pub fn new(k: usize, d: usize) -> Self {
        let q = if d == 0 { 0.0 } else { 1.0 - k as f64 / d as f64 };
        Self { classic: q, tight: q * q }
    }
}

/// TernGrad's bound ratio `‖g‖∞·‖g‖₁ / ‖g‖₂²` (ALGORITHMS.md §1.3): ≥ 1, and
/// the closer to 1 the closer TernGrad's variance bound is to SGD's. 0 for g = 0.
pub fn terngrad_bound_ratio(g: &[f32]) -> f64 {
    let (l1, linf) = reduce::abs_sum_and_max(g);
    let l2 = reduce::sum_of_squares(g);
    if l2 == 0.0 {
        0.0
    } else {
        f64::from(linf) * l1 / l2
    }
}

/// A fixed-range histogram of values.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub lo: f32,
    pub hi: f32,
    pub counts: Vec<u64>,
    /// Values below `lo`, above `hi`, and NaN.
    pub below: u64,
    pub above: u64,
    pub nan: u64,
}

impl Histogram {
    /// `bins` equal bins over `[lo, hi]` (`hi > lo`, `bins ≥ 1`).
    pub fn new(lo: f32, hi: f32, bins: usize) -> Self {
        assert!(hi > lo && bins >= 1, "histogram needs hi > lo and at least one bin");
        Self { lo, hi, counts: vec![0; bins], below: 0, above: 0, nan: 0 }
    }

    /// A histogram symmetric around 0 spanning the largest |value|.
    pub fn symmetric(values: &[f32], bins: usize) -> Self {
        let m = reduce::max_abs(values).max(f32::MIN_POSITIVE);
        let mut h = Self::new(-m, m, bins);
        h.add(values);
        h
    }

    pub fn add(&mut self, values: &[f32]) {
        let bins = self.counts.len();
        let scale = bins as f32 / (self.hi - self.lo);
        for &v in values {
            if v.is_nan() {
                self.nan += 1;
            } else if v < self.lo {
                self.below += 1;
            } else if v > self.hi {
                self.above += 1;
            } else {
                let b = (((v - self.lo) * scale) as usize).min(bins - 1);
                self.counts[b] += 1;
            }
        }
    }

    /// The bin edges, `bins + 1` of them.
    pub fn edges(&self) -> Vec<f32> {
        let n = self.counts.len();
        (0..=n).map(|i| self.lo + (self.hi - self.lo) * i as f32 / n as f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::SparseMessage;

    #[test]
    fn contraction_of_sparse_matches_dense_formula() {
        let u = [3.0f32, -1.0, 0.5, 2.0];
        let m = Message::Sparse(SparseMessage {
            len: 4,
            indices: vec![0, 3],
            values: vec![3.0, 2.0],
            ..Default::default()
        });
        let r = contraction_ratio(&u, &m, &mut Vec::new());
        assert!((r - (1.0 + 0.25) / (9.0 + 1.0 + 0.25 + 4.0)).abs() < 1e-12);
        let b = ContractionBounds::new(2, 4);
        assert_eq!((b.classic, b.tight), (0.5, 0.25));
        let dense = Message::Dense(crate::message::DenseMessage { values: u.to_vec() });
        assert_eq!(contraction_ratio(&u, &dense, &mut Vec::new()), 0.0);
    }

    #[test]
    fn bound_ratio_extremes() {
        // One nonzero: ‖g‖∞‖g‖₁ = ‖g‖² -> 1.
        assert_eq!(terngrad_bound_ratio(&[0.0, 2.0, 0.0]), 1.0);
        // Equal magnitudes: a·(d·a) / (d·a²) = 1; unequal ones push it above 1.
        assert_eq!(terngrad_bound_ratio(&[1.0, -1.0, 1.0]), 1.0);
        assert!((terngrad_bound_ratio(&[1.0, 0.1]) - 1.1 / 1.01).abs() < 1e-6);
        assert_eq!(terngrad_bound_ratio(&[0.0; 3]), 0.0);
    }

    #[test]
    fn histogram_counts_everything_once() {
        let v = [-1.0, -0.5, 0.0, 0.49, 0.5, 1.0, 2.0, f32::NAN];
        let mut h = Histogram::new(-1.0, 1.0, 4);
        h.add(&v);
        assert_eq!(h.counts, [1, 1, 2, 2]);
        assert_eq!((h.below, h.above, h.nan), (0, 1, 1));
        assert_eq!(h.edges(), [-1.0, -0.5, 0.0, 0.5, 1.0]);
    }
}
