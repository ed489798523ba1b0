//! Selection on the device: exact Top-k by radix select, and the ordered
//! compaction every threshold sparsifier shares.
//!
//! **Radix select.** Magnitudes are ranked by their f32 bits with the sign
//! cleared, which orders non-negative floats exactly as `f32::total_cmp` does
//! on `|x|` (the CPU's order). Four passes over 8-bit digits, most significant
//! first, histogram the elements that match the digits fixed so far; the host
//! reads each 256-bin histogram (1 KiB) and fixes the digit where the count
//! from the top crosses k. After the fourth pass the k-th largest key `T` is
//! known exactly, with `need` = how many of the elements equal to `T` belong
//! to the top k.
//!
//! **Ordered compaction.** Each unit owns a contiguous chunk of [`CHUNK`]
//! elements. One pass counts, per chunk, the keys above `T` and equal to it;
//! the host turns those counts into each chunk's output offset and its share
//! of the ties (ties go to the lowest indices, as on the CPU); a second pass
//! writes the pairs in ascending index order.
//!
//! **DGC-k** samples on the device, radix-selects the sample's threshold and
//! then reuses the count and write passes.
//!
//! **Rand-k** needs no pass over the data: the host draws the indices with
//! the CPU's own code and the device gathers their values. The result is the CPU's
//! `SparseMessage`, index for index and bit for bit.

use cubecl::prelude::*;
use gradcomp_compress::message::{SparseMessage, SparseWire};
use gradcomp_compress::sparsify::dgck::{DgcKConfig, MAX_ADAPT};
use gradcomp_compress::sparsify::gaussiank::normal_quantile;
use gradcomp_compress::sparsify::randk::{self, RandK, RandKConfig};
use gradcomp_compress::sparsify::Selector;
use gradcomp_compress::{k_for, Message, UnitContext};

use crate::buffer::{f32_arg, read_f32s, read_u32s, u32_arg, zeros_u32, DeviceF32, KernelError};
use crate::grid;
use crate::reduce;

/// Elements per unit in the compaction passes.
pub const CHUNK: usize = 256;

#[cube(launch)]
fn radix_histogram(x: &[f32], hist: &[Atomic<u32>], prefix: u32, mask: u32, shift: u32) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < n {
        let key = u32::reinterpret(x[i]) & 0x7fff_ffffu32;
        if (key & mask) == prefix {
            hist[((key >> shift) & 255u32) as usize].fetch_add(1u32);
        }
        i += stride;
    }
}

#[cube(launch)]
fn count_chunks(x: &[f32], counts: &mut [u32], thr: u32, #[comptime] chunk: usize) {
    let n = x.len();
    let units = counts.len() / 2;
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut t = ABSOLUTE_POS;
    while t < units {
        let mut gt = 0u32;
        let mut eq = 0u32;
        let start = t * chunk;
        let mut end = start + chunk;
        if end > n {
            end = n;
        }
        for i in start..end {
            let key = u32::reinterpret(x[i]) & 0x7fff_ffffu32;
            // NaN keys (above the infinity key) are never selected.
            if key > thr && key <= 0x7f80_0000u32 {
                gt += 1u32;
            } else if key == thr {
                eq += 1u32;
            }
        }
        counts[2 * t] = gt;
        counts[2 * t + 1] = eq;
        t += stride;
    }
}

/// `plan[2t]` = the chunk's first output slot, `plan[2t+1]` = how many of its
/// ties it keeps.
#[cube(launch)]
fn write_chunks(
    x: &[f32],
    plan: &[u32],
    indices: &mut [u32],
    values: &mut [f32],
    thr: u32,
    #[comptime] chunk: usize,
) {
    let n = x.len();
    let units = plan.len() / 2;
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut t = ABSOLUTE_POS;
    while t < units {
        let mut slot = plan[2 * t] as usize;
        let mut ties = plan[2 * t + 1];
        let start = t * chunk;
        let mut end = start + chunk;
        if end > n {
            end = n;
        }
        for i in start..end {
            let v = x[i];
            let key = u32::reinterpret(v) & 0x7fff_ffffu32;
            let mut take = key > thr && key <= 0x7f80_0000u32;
            if key == thr && ties > 0u32 {
                ties -= 1u32;
                take = true;
            }
            if take {
                indices[slot] = i as u32;
                values[slot] = v;
                slot += 1;
            }
        }
        t += stride;
    }
}

/// The key (magnitude bits) of the k-th largest |x|, and how many elements
/// with exactly that key belong to the top k. `1 ≤ k ≤ x.len`.
pub fn kth_largest_key(client: &Client, x: &DeviceF32, k: usize) -> Result<(u32, usize), KernelError> {
    let mut prefix = 0u32;
    let mut mask = 0u32;
    let mut remaining = k; // rank of the target among the elements matching `prefix`
    for pass in 0..4u32 {
        let shift = 24 - 8 * pass;
        let hist = zeros_u32(client, 256);
        let (cubes, dim) = grid(x.len, 16);
        radix_histogram::launch(
            client,
            cubes,
            dim,
            x.arg(),
            // The 256 counters, allocated just above (atomics take a u32 binding).
            u32_arg(&hist, 256),
            prefix,
            mask,
            shift,
        );
        let h = read_u32s(client, &hist, 256)?;
        // Walk digits from the top until the count covers the target rank.
        let mut digit = 255u32;
        loop {
            let c = h[digit as usize] as usize;
            if c >= remaining || digit == 0 {
                break;
            }
            remaining -= c;
            digit -= 1;
        }
        prefix |= digit << shift;
        mask |= 0xff << shift;
    }
    Ok((prefix, remaining))
}

/// Per-chunk counts of keys above a threshold key and equal to it: what the
/// host needs to size and place the output, and all a threshold search
/// needs to know (`above()` is the CPU's `count_abs_above`).
#[derive(Clone, Debug)]
pub struct ChunkCounts {
    thr: u32,
    counts: Vec<u32>,
}

impl ChunkCounts {
    /// Elements with |x| strictly above the threshold.
    pub fn above(&self) -> usize {
        self.counts.chunks_exact(2).map(|c| c[0] as usize).sum()
    }

    /// Elements with |x| equal to the threshold.
    pub fn equal(&self) -> usize {
        self.counts.chunks_exact(2).map(|c| c[1] as usize).sum()
    }

    /// What [`write`] with this tie allowance selects.
    pub fn selected(&self, ties: usize) -> usize {
        self.above() + self.equal().min(ties)
    }
}

/// Counts, per chunk of [`CHUNK`] elements, the keys above and equal to `thr`.
/// NaN is counted in neither: like the CPU, a selection skips NaN.
pub fn count(client: &Client, x: &DeviceF32, thr: u32) -> Result<ChunkCounts, KernelError> {
    let units = x.len.div_ceil(CHUNK);
    if units == 0 {
        return Ok(ChunkCounts { thr, counts: Vec::new() });
    }
    let counts = client.empty(units * 2 * 4);
    let (cubes, dim) = grid(units, 1);
    count_chunks::launch(client, cubes, dim, x.arg(), u32_arg(&counts, units * 2), thr, CHUNK);
    Ok(ChunkCounts { thr, counts: read_u32s(client, &counts, units * 2)? })
}

/// Writes into `out` (cleared first) the pairs counted above the threshold,
/// plus the first `ties` pairs (lowest indices) equal to it, in ascending
/// index order.
pub fn write(
    client: &Client,
    x: &DeviceF32,
    counts: &ChunkCounts,
    ties: usize,
    out: &mut SparseMessage,
) -> Result<(), KernelError> {
    out.indices.clear();
    out.values.clear();
    let units = counts.counts.len() / 2;
    let mut plan = Vec::with_capacity(units * 2);
    let (mut offset, mut ties_left) = (0usize, ties);
    for c in counts.counts.chunks_exact(2) {
        let take = (c[1] as usize).min(ties_left);
        plan.push(offset as u32);
        plan.push(take as u32);
        ties_left -= take;
        offset += c[0] as usize + take;
    }
    if offset == 0 {
        return Ok(());
    }
    let plan_h = client.create_from_slice(u32::as_bytes(&plan));
    let idx = client.empty(offset * 4);
    let val = client.empty(offset * 4);
    let (cubes, dim) = grid(units, 1);
    write_chunks::launch(
        client,
        cubes,
        dim,
        x.arg(),
        u32_arg(&plan_h, units * 2),
        u32_arg(&idx, offset),
        f32_arg(&val, offset),
        counts.thr,
        CHUNK,
    );
    out.indices.extend(read_u32s(client, &idx, offset)?);
    out.values.extend(read_f32s(client, &val, offset)?);
    Ok(())
}

/// The key threshold and tie allowance that select `{|x| > thr}`, or
/// `{|x| ≥ thr}` when `inclusive` (the CPU's `collect_abs_above` flag): a
/// negative threshold keeps every (non-NaN) element, a NaN one none, as the
/// CPU's comparisons do.
fn key_threshold(thr: f32, inclusive: bool) -> (u32, usize) {
    if thr < 0.0 {
        (0, usize::MAX)
    } else if thr.is_nan() {
        (0x7f80_0000, 0)
    } else {
        (thr.to_bits() & 0x7fff_ffff, if inclusive { usize::MAX } else { 0 })
    }
}

/// The pairs with |x| > `thr`, ascending: the CPU's `collect_abs_above`.
pub fn collect_above(
    client: &Client,
    x: &DeviceF32,
    thr: f32,
    out: &mut SparseMessage,
) -> Result<(), KernelError> {
    let (key, ties) = key_threshold(thr, false);
    write(client, x, &count(client, x, key)?, ties, out)
}

/// Starts a sparse message of `len` elements.
fn sparse(out: &mut Message, len: usize, wire: SparseWire) -> &mut SparseMessage {
    let m = out.sparse_mut();
    m.len = len;
    m.wire = wire;
    m.indices.clear();
    m.values.clear();
    m
}

/// The threshold sparsifier: every |x| > `threshold`.
pub fn threshold(
    client: &Client,
    x: &DeviceF32,
    threshold: f32,
    wire: SparseWire,
    out: &mut Message,
) -> Result<(), KernelError> {
    let m = sparse(out, x.len, wire);
    collect_above(client, x, threshold, m)?;
    // The wire's precision, as the CPU's `Sparsifier` rounds.
    m.round_to_wire();
    Ok(())
}

/// Gaussian-k (ALGORITHMS.md §3.3): the threshold `μ + z·σ` from one
/// statistics pass, then up to two corrections (×0.5 below 2k/3, ×1.5 above
/// 4k/3) each decided by a count pass, and one ordered write. The same rule
/// as the CPU's `GaussianK`; the sums differ from the CPU's in rounding only,
/// so a boundary element can fall the other way in rare cases.
pub fn gaussian_k(
    client: &Client,
    x: &DeviceF32,
    density: f64,
    wire: SparseWire,
    out: &mut Message,
) -> Result<(), KernelError> {
    let d = x.len;
    let k = k_for(density, d);
    let m = sparse(out, d, wire);
    if d == 0 {
        return Ok(());
    }
    let z = normal_quantile(1.0 - k as f64 / d as f64 / 2.0);
    let moments = reduce::moments(client, x)?;
    let (mu, sd) = (moments.mean, moments.sample_std());
    let mut thr = (mu + z * sd) as f32;
    let (low, high) = (2.0 * k as f64 / 3.0, 4.0 * k as f64 / 3.0);
    for round in 0..3 {
        let (key, ties) = key_threshold(thr, false);
        let counts = count(client, x, key)?;
        let n = counts.selected(ties) as f64;
        if round == 2 || (n >= low && n <= high) {
            write(client, x, &counts, ties, m)?;
            break;
        }
        thr *= if n < low { 0.5 } else { 1.5 };
    }
    // The wire's precision, as the CPU's `Sparsifier` rounds.
    m.round_to_wire();
    Ok(())
}

/// Writes the exact top k of `x` (`1 ≤ k < x.len`): radix select, then the
/// ordered write with the k-th key's share of ties.
fn write_top_k(client: &Client, x: &DeviceF32, k: usize, out: &mut SparseMessage) -> Result<(), KernelError> {
    let (thr, ties) = kth_largest_key(client, x, k)?;
    write(client, x, &count(client, x, thr)?, ties, out)
}

/// Exact Top-k of `x` at density `density` as the CPU's `TopK` sparsifier
/// produces it: [`Message::Sparse`] with the k largest |x|, ascending indices.
pub fn top_k(
    client: &Client,
    x: &DeviceF32,
    density: f64,
    wire: SparseWire,
    out: &mut Message,
) -> Result<(), KernelError> {
    let k = k_for(density, x.len);
    let m = sparse(out, x.len, wire);
    if k == 0 {
        return Ok(());
    }
    if k >= x.len {
        // Everything: the CPU copies the buffer.
        m.indices.extend(0..x.len as u32);
        m.values.extend(x.read(client)?);
    } else {
        write_top_k(client, x, k, m)?;
    }
    // The wire's precision, as the CPU's `Sparsifier` rounds.
    m.round_to_wire();
    Ok(())
}

/// `out[j] = x[start + j·step]`. Signs are kept: the radix keys clear them.
#[cube(launch)]
fn strided(x: &[f32], out: &mut [f32], start: u32, step: u32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut j = ABSOLUTE_POS;
    while j < out.len() {
        out[j] = x[start as usize + j * step as usize];
        j += stride;
    }
}

/// DGC's sampled top-k (ALGORITHMS.md §3.4), decision for decision the
/// CPU's `DgcK`: the same strided sample from the same random start, its
/// exact top-ρ threshold (a radix select over the sample, on the device),
/// up to 10 rounds that lower it by 0.8 while fewer than 0.8k elements
/// reach it, and an exact top-k when more than 1.3k do. Every comparison is
/// exact, so the message is the CPU's bit for bit.
pub fn dgc_k(
    client: &Client,
    x: &DeviceF32,
    config: &DgcKConfig,
    ctx: &UnitContext,
    out: &mut Message,
) -> Result<(), KernelError> {
    let d = x.len;
    let k = k_for(config.density, d);
    let m = sparse(out, d, config.wire);
    if k == 0 || d == 0 {
        return Ok(());
    }
    let rho = k as f64 / d as f64;
    let wanted = (config.sample_fraction * d as f64).max(2.0 / rho).ceil() as usize;
    let step = d / wanted.clamp(1, d);
    let start = ctx.key.rng().below(step as u64) as usize;
    let n = (d - start).div_ceil(step);
    let samples = DeviceF32::from_handle(client.empty(n * 4), n);
    let (cubes, dim) = grid(n, 1);
    strided::launch(client, cubes, dim, x.arg(), samples.arg(), start as u32, step as u32);
    let top = ((n as f64 * rho).ceil() as usize).clamp(1, n);
    let mut thr = f32::from_bits(kth_largest_key(client, &samples, top)?.0);

    let (low, high) = (0.8 * k as f64, 1.3 * k as f64);
    for round in 0..MAX_ADAPT {
        let (key, ties) = key_threshold(thr, true);
        let counts = count(client, x, key)?;
        let selected = counts.selected(ties);
        if selected as f64 > high {
            write_top_k(client, x, k, m)?;
            break;
        }
        if selected as f64 >= low || round + 1 == MAX_ADAPT {
            write(client, x, &counts, ties, m)?;
            break;
        }
        thr *= 0.8;
    }
    // The wire's precision, as the CPU's `Sparsifier` rounds.
    m.round_to_wire();
    Ok(())
}

#[cube(launch)]
fn gather(x: &[f32], indices: &[u32], values: &mut [f32]) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut j = ABSOLUTE_POS;
    while j < indices.len() {
        values[j] = x[indices[j] as usize];
        j += stride;
    }
}

/// Rand-k: the indices are drawn on the host by the CPU's own
/// `draw_indices` from the same key (k draws, no pass over the data), and
/// the device gathers their values; so the message is the CPU's, bit for bit.
pub fn rand_k(
    client: &Client,
    x: &DeviceF32,
    config: &RandKConfig,
    ctx: &UnitContext,
    out: &mut Message,
) -> Result<(), KernelError> {
    let selector = RandK::new(config);
    let k = k_for(config.density, x.len);
    let m = sparse(out, x.len, config.wire);
    randk::draw_indices(x.len, k, &mut selector.rng(ctx), &mut Vec::new(), &mut m.indices);
    let kept = m.indices.len();
    if kept > 0 {
        let idx = client.create_from_slice(u32::as_bytes(&m.indices));
        let val = client.empty(kept * 4);
        let (cubes, dim) = grid(kept, 1);
        gather::launch(client, cubes, dim, x.arg(), u32_arg(&idx, kept), f32_arg(&val, kept));
        m.values.extend(read_f32s(client, &val, kept)?);
    }
    let scale = selector.value_scale(k, x.len);
    if scale != 1.0 {
        m.values.iter_mut().for_each(|v| *v *= scale);
    }
    // The wire's precision, as the CPU's `Sparsifier` rounds.
    m.round_to_wire();
    Ok(())
}
