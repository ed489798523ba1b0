//! Exact selection kernels shared by the sparsifiers: O(d) expected time by
//! introselect (`select_nth_unstable`), never a full sort of the buffer.

use crate::message::SparseMessage;

/// A predicate that keeps the k largest magnitudes: everything above the
/// k-th largest, and of the elements equal to it only as many as fit, in the
/// order offered (ascending index, so ties go to the lowest indices).
/// `mags` is scratch holding the candidate magnitudes; `1 ≤ k ≤ mags.len()`.
fn keeper(mags: &mut [f32], k: usize) -> impl FnMut(f32) -> bool {
    let n = mags.len();
    let (_, &mut thr, above) = mags.select_nth_unstable_by(n - k, f32::total_cmp);
    // `above` holds the k−1 magnitudes ranked over the threshold; some may tie with it.
    let mut ties = 1 + above.iter().filter(|&&v| v == thr).count();
    move |v: f32| {
        let a = v.abs();
        if a > thr {
            true
        } else if a == thr && ties > 0 {
            ties -= 1;
            true
        } else {
            // NaN magnitudes land here: the selection is then short rather
            // than wrong. Finite input always yields exactly k.
            false
        }
    }
}

/// Writes to `out` (cleared first) the `k` largest `|x_j|` with their indices,
/// ascending. `scratch` holds the magnitudes (grown to `x.len()`).
pub fn select_top_k(x: &[f32], k: usize, scratch: &mut Vec<f32>, out: &mut SparseMessage) {
    out.indices.clear();
    out.values.clear();
    if k == 0 {
        return;
    }
    if k >= x.len() {
        out.indices.extend(0..x.len() as u32);
        out.values.extend_from_slice(x);
        return;
    }
    scratch.clear();
    scratch.extend(x.iter().map(|v| v.abs()));
    let mut keep = keeper(scratch, k);
    out.indices.reserve(k);
    out.values.reserve(k);
    for (j, &v) in x.iter().enumerate() {
        if keep(v) {
            out.indices.push(j as u32);
            out.values.push(v);
        }
    }
}

/// Keeps, of the selected entries in `out`, the `k` with the largest |value|
/// (ties to the lower index), still ascending. Compacts in place.
pub fn keep_top_k(out: &mut SparseMessage, k: usize, scratch: &mut Vec<f32>) {
    let n = out.indices.len();
    if n <= k {
        return;
    }
    scratch.clear();
    scratch.extend(out.values.iter().map(|v| v.abs()));
    if k == 0 {
        out.indices.clear();
        out.values.clear();
        return;
    }
    let mut keep = keeper(scratch, k);
    let mut w = 0;
    for r in 0..n {
        let v = out.values[r];
        if keep(v) {
            out.indices[w] = out.indices[r];
            out.values[w] = v;
            w += 1;
        }
    }
    out.indices.truncate(w);
    out.values.truncate(w);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_sort(x: &[f32], k: usize) -> Vec<u32> {
        let mut idx: Vec<u32> = (0..x.len() as u32).collect();
        idx.sort_by(|&a, &b| x[b as usize].abs().total_cmp(&x[a as usize].abs()).then(a.cmp(&b)));
        idx.truncate(k);
        idx.sort_unstable();
        idx
    }

    #[test]
    fn ties_resolve_to_lowest_indices() {
        let x = [1.0, -2.0, 2.0, 0.5, -2.0, 3.0];
        let mut out = SparseMessage::default();
        select_top_k(&x, 3, &mut Vec::new(), &mut out);
        assert_eq!(out.indices, [1, 2, 5]);
        assert_eq!(out.values, [-2.0, 2.0, 3.0]);
        assert_eq!(out.indices, by_sort(&x, 3));
        let mut all = SparseMessage { indices: (0..6).collect(), values: x.to_vec(), ..Default::default() };
        keep_top_k(&mut all, 3, &mut Vec::new());
        assert_eq!(all.indices, [1, 2, 5]);
        assert_eq!(all.values, [-2.0, 2.0, 3.0]);
    }

    #[test]
    fn all_equal_and_edge_k() {
        let x = [1.0f32; 10];
        let mut out = SparseMessage::default();
        select_top_k(&x, 4, &mut Vec::new(), &mut out);
        assert_eq!(out.indices, [0, 1, 2, 3]);
        select_top_k(&x, 0, &mut Vec::new(), &mut out);
        assert!(out.indices.is_empty());
        select_top_k(&x, 20, &mut Vec::new(), &mut out);
        assert_eq!(out.indices.len(), 10);
        keep_top_k(&mut out, 0, &mut Vec::new());
        assert!(out.indices.is_empty() && out.values.is_empty());
    }
}
