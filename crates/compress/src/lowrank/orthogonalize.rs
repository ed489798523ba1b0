//! Orthonormal columns for PowerSGD's factors, as PyTorch's hook makes them:
//! Gram–Schmidt for rank ≤ 2, a QR factorization beyond.

/// Makes the `rank` columns of the `rows × rank` row-major matrix `m`
/// orthonormal, in place.
///
/// Rank ≤ 2: Gram–Schmidt as PyTorch's `_orthogonalize_gram_schmidt`: each
/// column in turn is divided by its norm (plus `epsilon`), then its
/// projection is removed from every later column. A zero column (a vanishing
/// gradient, with `epsilon = 0`) becomes zeros, which PyTorch means to do
/// and which keeps NaN out of the exchange.
///
/// Rank > 2: the Q of a QR factorization, computed by Gram–Schmidt run
/// twice (the second pass removes what rounding left of the first), so the
/// diagonal of R is positive. PyTorch calls LAPACK's Householder QR, whose
/// Q may differ from this one in the sign of a column; the product P Qᵀ
/// PowerSGD applies does not see the sign.
pub fn orthogonalize(m: &mut [f32], rows: usize, rank: usize, epsilon: f32) {
    let passes = if rank <= 2 { 1 } else { 2 };
    for pass in 0..passes {
        for i in 0..rank {
            if pass == 0 || rank > 2 {
                normalize_column(m, rows, rank, i, epsilon);
            }
            for j in i + 1..rank {
                let dot: f32 = (0..rows).map(|r| m[r * rank + i] * m[r * rank + j]).sum();
                for r in 0..rows {
                    m[r * rank + j] -= dot * m[r * rank + i];
                }
            }
        }
    }
}

/// Divides column `i` by its norm (+ `epsilon`); a zero column stays zero.
fn normalize_column(m: &mut [f32], rows: usize, rank: usize, i: usize, epsilon: f32) {
    let norm = (0..rows).map(|r| m[r * rank + i] * m[r * rank + i]).sum::<f32>().sqrt();
    let d = norm + epsilon;
    let inv = if d > 0.0 && d.is_finite() { 1.0 / d } else { 0.0 };
    for r in 0..rows {
        m[r * rank + i] *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column_dots(m: &[f32], rows: usize, rank: usize) -> Vec<f32> {
        let mut out = Vec::new();
        for i in 0..rank {
            for j in 0..rank {
                out.push((0..rows).map(|r| m[r * rank + i] * m[r * rank + j]).sum());
            }
        }
        out
    }

    #[test]
    fn columns_come_out_orthonormal_at_every_rank() {
        for rank in [1, 2, 3, 4] {
            let rows = 9;
            let mut m: Vec<f32> = (0..rows * rank).map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0).collect();
            orthogonalize(&mut m, rows, rank, 0.0);
            let dots = column_dots(&m, rows, rank);
            for i in 0..rank {
                for j in 0..rank {
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!(
                        (dots[i * rank + j] - want).abs() < 1e-5,
                        "rank {rank}: <{i},{j}> = {}",
                        dots[i * rank + j]
                    );
                }
            }
        }
    }

    #[test]
    fn a_zero_column_stays_zero_instead_of_nan() {
        let mut m = vec![0.0f32; 8];
        orthogonalize(&mut m, 4, 2, 0.0);
        assert!(m.iter().all(|&v| v == 0.0));
        // With epsilon, a tiny column is scaled by 1/(norm + ε), finite.
        let mut m = vec![1e-30f32, 0.0, 0.0, 0.0];
        orthogonalize(&mut m, 4, 1, 1e-8);
        assert!(m.iter().all(|v| v.is_finite()));
    }
}
