//! Exact selection kernels shared by the sparsifiers: O(d) expected time by
//! introselect (`select_nth_unstable`), never a full sort of the buffer.

/// Writes to `out` (cleared first) the indices of the `k` largest `|x_j|`,
/// ascending. Ties at the threshold go to the lowest indices, so the result
/// is deterministic. `scratch` holds the magnitudes (grown to `x.len()`).
pub fn select_top_k(x: &[f32], k: usize, scratch: &mut Vec<f32>, out: &mut Vec<u32>) {
    out.clear();
    let d = x.len();
    if k == 0 {
        return;
    }
    if k >= d {
        out.extend(0..d as u32);
        return;
    }
    scratch.clear();
    scratch.extend(x.iter().map(|v| v.abs()));
    let (_, &mut thr, above) = scratch.select_nth_unstable_by(d - k, f32::total_cmp);
    // `above` holds the k−1 magnitudes ranked over the threshold; some may tie with it.
    let ties_above = above.iter().filter(|&&v| v == thr).count();
    let mut ties = k - (k - 1 - ties_above);
    out.reserve(k);
    for (j, v) in x.iter().enumerate() {
        let a = v.abs();
        if a > thr {
            out.push(j as u32);
        } else if a == thr && ties > 0 {
            out.push(j as u32);
            ties -= 1;
        }
    }
    // NaN magnitudes neither exceed nor equal the threshold: the selection is
    // then short rather than wrong. Finite input always yields exactly k.
    debug_assert!(out.len() <= k);
}

/// Keeps, of the ascending candidate indices, the `k` with the largest `|x_j|`
/// (ties to the lower index), still ascending.
pub fn keep_top_k_of(x: &[f32], candidates: &mut Vec<u32>, k: usize) {
    if candidates.len() <= k {
        return;
    }
    if k == 0 {
        candidates.clear();
        return;
    }
    let key = |&i: &u32| (x[i as usize].abs(), std::cmp::Reverse(i));
    candidates.select_nth_unstable_by(k - 1, |a, b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0).then(kb.1.cmp(&ka.1))
    });
    candidates.truncate(k);
    candidates.sort_unstable();
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
        let mut out = Vec::new();
        select_top_k(&x, 3, &mut Vec::new(), &mut out);
        assert_eq!(out, [1, 2, 5]);
        assert_eq!(out, by_sort(&x, 3));
        let mut c = vec![0, 1, 2, 3, 4, 5];
        keep_top_k_of(&x, &mut c, 3);
        assert_eq!(c, [1, 2, 5]);
    }

    #[test]
    fn all_equal_and_edge_k() {
        let x = [1.0f32; 10];
        let mut out = Vec::new();
        select_top_k(&x, 4, &mut Vec::new(), &mut out);
        assert_eq!(out, [0, 1, 2, 3]);
        select_top_k(&x, 0, &mut Vec::new(), &mut out);
        assert!(out.is_empty());
        select_top_k(&x, 20, &mut Vec::new(), &mut out);
        assert_eq!(out.len(), 10);
    }
}
