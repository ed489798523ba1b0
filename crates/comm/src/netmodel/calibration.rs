//! Fitting the model to a measured link: round curves from allreduce and
//! parameter-server times, α, B and ρ by least squares, and the calibration
//! file that stores the result.

use serde::{Deserialize, Serialize};

use super::{AllreduceAlgorithm, NetworkModel};

impl NetworkModel {
    /// Adds measured round curves over `n` ranks: exchange rounds from
    /// allreduce times (`allreduce` samples: bytes per rank, seconds; only
    /// when the allreduce runs recursive doubling on a power of two, whose
    /// rounds are all exchanges of the whole buffer) and one-way messages from
    /// parameter-server times (`push_pull` samples: upload = download bytes
    /// per worker, seconds; the server's link carries (n−1)·m in, then out).
    pub fn with_curves(mut self, n: usize, allreduce: &[(u64, f64)], push_pull: &[(u64, f64)]) -> Self {
        let rd = allreduce
            .iter()
            .all(|&(b, _)| self.allreduce_algorithm(n, b) == AllreduceAlgorithm::RecursiveDoubling);
        if n >= 2 && n.is_power_of_two() && rd {
            let rounds = (n as f64).log2();
            self.exchange = allreduce.iter().map(|&(b, t)| (b, t / rounds)).collect();
            self.exchange.sort_by_key(|&(b, _)| b);
        }
        if n >= 2 {
            self.send = push_pull.iter().map(|&(b, t)| (b * (n as u64 - 1), t / 2.0)).collect();
            self.send.sort_by_key(|&(b, _)| b);
        }
        self
    }

    /// Fits α, B and ρ to allreduce times measured over `n` ranks with this
    /// model's algorithm: `samples` are (bytes per rank, seconds). Least
    /// squares on the relative error (every size weighs alike), each
    /// coefficient kept non-negative; ρ is only fitted when some sample
    /// leaves the eager range and another stays in it.
    pub fn fit(&self, n: usize, samples: &[(u64, f64)]) -> Result<Self, CalibrationError> {
        if n < 2 || samples.len() < 3 {
            return Err(CalibrationError::TooFewSamples { ranks: n, sizes: samples.len() });
        }
        // Per sample, the coefficients of (α, ρ, 1/B).
        let rows: Vec<([f64; 3], f64)> = samples
            .iter()
            .map(|&(bytes, t)| {
                let mut x = [0.0; 3];
                for (k, s, _) in self.allreduce_rounds(n, bytes) {
                    x[0] += k;
                    x[1] += if s > self.eager_limit as f64 { k } else { 0.0 };
                    x[2] += k * s;
                }
                (x, t)
            })
            .collect();
        let has_rdv = rows.iter().any(|(x, _)| x[1] > 0.0) && rows.iter().any(|(x, _)| x[1] == 0.0);
        let mut active: Vec<usize> = if has_rdv { vec![0, 1, 2] } else { vec![0, 2] };
        loop {
            let coef = least_squares(&rows, &active).ok_or(CalibrationError::Underdetermined)?;
            match active.iter().position(|&j| coef[j] < 0.0 && j != 2) {
                Some(i) => {
                    active.remove(i);
                }
                None => {
                    if coef[2] <= 0.0 {
                        return Err(CalibrationError::NoBandwidth);
                    }
                    let mut fitted = self.clone();
                    (fitted.alpha, fitted.rendezvous, fitted.bandwidth) = (coef[0], coef[1], 1.0 / coef[2]);
                    return Ok(fitted);
                }
            }
        }
    }
}

/// A model fitted to one link by `gradcomp bench comm --calibrate-out`, as
/// stored in its JSON file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// The link's nominal rate in bit/s: the link speed it stands for in a
    /// run's predictions.
    pub link_bps: f64,
    /// The ranks it was measured with.
    pub workers: usize,
    pub model: NetworkModel,
    /// The allreduce samples it was fitted to: (bytes per rank, seconds).
    #[serde(default)]
    pub samples: Vec<(u64, f64)>,
}

impl Calibration {
    /// Reads a calibration file; errors say which file and what is wrong.
    pub fn load(path: &std::path::Path) -> Result<Self, CalibrationError> {
        let file = || path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| CalibrationError::Read { path: file(), problem: e.to_string() })?;
        let c: Calibration = serde_json::from_str(&text)
            .map_err(|e| CalibrationError::NotACalibration { path: file(), problem: e.to_string() })?;
        let m = &c.model;
        let finite = [c.link_bps, m.alpha, m.bandwidth, m.rendezvous].iter().all(|v| v.is_finite());
        if !finite || c.link_bps <= 0.0 || m.alpha < 0.0 || m.bandwidth <= 0.0 || m.rendezvous < 0.0 {
            return Err(CalibrationError::OutOfRange { path: file() });
        }
        Ok(c)
    }
}

/// Why a calibration could not be fitted or read.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum CalibrationError {
    #[error(
        "calibration needs at least two ranks and three message sizes (got {ranks} rank(s), {sizes} size(s))"
    )]
    TooFewSamples { ranks: usize, sizes: usize },
    #[error("the calibration samples do not determine the model (use more distinct sizes)")]
    Underdetermined,
    #[error("the calibration found no bandwidth (times do not grow with size)")]
    NoBandwidth,
    #[error("{path}: {problem}")]
    Read { path: String, problem: String },
    #[error("{path}: not a calibration from `gradcomp bench comm --calibrate-out`: {problem}")]
    NotACalibration { path: String, problem: String },
    #[error("{path}: the link rate and bandwidth must be > 0, α and ρ ≥ 0, all finite")]
    OutOfRange { path: String },
}

/// Weighted least squares for y ≈ Σ_j c_j x_j over the `active` columns,
/// each row weighted by 1/y; inactive coefficients are 0.
fn least_squares(rows: &[([f64; 3], f64)], active: &[usize]) -> Option<[f64; 3]> {
    let k = active.len();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (x, y) in rows {
        let w = 1.0 / (y * y).max(1e-24);
        for (i, &ci) in active.iter().enumerate() {
            for (j, &cj) in active.iter().enumerate() {
                a[i][j] += w * x[ci] * x[cj];
            }
            a[i][k] += w * x[ci] * y;
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..k {
        let piv = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, piv);
        let pivot = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot[col];
                for (x, p) in row[col..].iter_mut().zip(&pivot[col..]) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut out = [0.0; 3];
    for (i, &ci) in active.iter().enumerate() {
        out[ci] = a[i][k] / a[i][i];
    }
    Some(out)
}
