//! Sign messages on the device: 1-bit SGD (ALGORITHMS.md §5: a sign bit per
//! element and the means of the non-negative and of the negative elements),
//! signSGD's and Signum's ±1, and EF-SignSGD's ±‖g‖₁/d (§9).
//!
//! The means are bit-identical to the CPU's, not just close: the CPU sums
//! each block of 1024 elements in 8 f32 lanes (lane = index mod 8) and folds
//! the lanes into f64 block by block. Here one unit owns one (block, lane)
//! pair and adds its 128 elements in the same order, and the host folds the
//! partials in the CPU's order. Bits are packed 32 to a word in a second,
//! fully coalesced pass.

use cubecl::prelude::*;
use gradcomp_compress::quantize::efsignsgd::scaled_sign;
use gradcomp_compress::quantize::onebit::sign_means;
use gradcomp_compress::Message;

use crate::buffer::{f32_arg, read_f32s, read_prefix, read_u32s, u32_arg, DeviceF32, KernelError};
use crate::form::{stateless, DeviceForm};
use crate::grid;
use gradcomp_compress::quantize::{EfSignSgdConfig, OneBitConfig, SignSgdConfig};
use gradcomp_compress::CompressorConfig;

/// Elements per block of the CPU's sums, and lanes per block.
const BLOCK: usize = 1024;
const LANES: usize = 8;

/// Word `w` holds the sign bits of elements `32w..32w+32`, element `i` in bit
/// `i mod 32` (so its little-endian bytes are the CPU's byte layout): 1 for
/// `x ≥ 0`, 0 for negative and NaN.
// The bounds test stays a separate `if`: the DSL's `&&` does not short-circuit,
// so a merged condition would read past the end.
#[allow(clippy::collapsible_if)]
#[cube(launch)]
fn pack_signs(x: &[f32], words: &mut [u32]) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut w = ABSOLUTE_POS;
    while w < words.len() {
        let mut word = 0u32;
        #[unroll]
        for j in 0..32u32 {
            let i = w * 32 + j as usize;
            if i < n {
                if x[i] >= 0.0f32 {
                    word |= 1u32 << j;
                }
            }
        }
        words[w] = word;
        w += stride;
    }
}

/// Per (block, lane), unit `t` = block·8 + lane: the f32 sum of the lane's
/// non-negative elements, of its negative ones, and the count of
/// non-negatives, each added in index order as the CPU adds them.
#[cube(launch)]
fn lane_sums(x: &[f32], pos: &mut [f32], neg: &mut [f32], n_pos: &mut [u32]) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut t = ABSOLUTE_POS;
    while t < pos.len() {
        // BLOCK = 1024 elements, LANES = 8 (the DSL takes literals here).
        let block_start = (t / 8) * 1024;
        let mut end = block_start + 1024;
        if end > n {
            end = n;
        }
        let mut p = 0.0f32;
        let mut q = 0.0f32;
        let mut c = 0u32;
        let mut i = block_start + t % 8;
        while i < end {
            let v = x[i];
            if v >= 0.0f32 {
                p += v;
                c += 1u32;
            } else {
                q += v;
            }
            i += 8;
        }
        pos[t] = p;
        neg[t] = q;
        n_pos[t] = c;
        t += stride;
    }
}

/// `g`'s sign bits in the message's byte layout (a zero-length `g` has none).
fn signs_of(client: &Client, g: &DeviceF32) -> Result<Vec<u8>, KernelError> {
    if g.len == 0 {
        return Ok(Vec::new());
    }
    let n_words = g.len.div_ceil(32);
    let words = client.empty(n_words * 4);
    let (cubes, dim) = grid(n_words, 1);
    pack_signs::launch(client, cubes, dim, g.arg(), u32_arg(&words, n_words));
    read_prefix(client, &words, g.len.div_ceil(8))
}

/// The CPU's `sign_bits` sums: (Σ of the non-negatives, their count, Σ of
/// the negatives), folded in the CPU's order.
fn sums_of(client: &Client, g: &DeviceF32) -> Result<(f64, usize, f64), KernelError> {
    if g.len == 0 {
        return Ok((0.0, 0, 0.0));
    }
    let units = g.len.div_ceil(BLOCK) * LANES;
    let (pos, neg, cnt) = (client.empty(units * 4), client.empty(units * 4), client.empty(units * 4));
    let (cubes, dim) = grid(units, 1);
    lane_sums::launch(
        client,
        cubes,
        dim,
        g.arg(),
        f32_arg(&pos, units),
        f32_arg(&neg, units),
        u32_arg(&cnt, units),
    );
    let (p, q, c) =
        (read_f32s(client, &pos, units)?, read_f32s(client, &neg, units)?, read_u32s(client, &cnt, units)?);
    // The CPU's fold: per block, the 8 lanes summed in f64, then added.
    let (mut pos_sum, mut neg_sum) = (0.0f64, 0.0f64);
    for (pb, qb) in p.chunks_exact(LANES).zip(q.chunks_exact(LANES)) {
        pos_sum += pb.iter().map(|&v| f64::from(v)).sum::<f64>();
        neg_sum += qb.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    Ok((pos_sum, c.iter().map(|&v| v as usize).sum(), neg_sum))
}

/// How a sign message's two values are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignValues {
    /// 1-bit SGD: the means of the non-negative and of the negative elements.
    Means,
    /// signSGD and Signum: ±1.
    Unit,
    /// EF-SignSGD: ±‖g‖₁/d.
    Scaled,
}

/// The sign message of `g` ([`Message::Sign`]) with `values`, as the CPU's
/// 1-bit, signSGD and EF-SignSGD compressors make it, bit for bit.
pub fn compress(
    client: &Client,
    g: &DeviceF32,
    values: SignValues,
    out: &mut Message,
) -> Result<(), KernelError> {
    let bits = signs_of(client, g)?;
    let (positive, negative) = match values {
        SignValues::Unit => (1.0, -1.0),
        SignValues::Means => {
            let (pos, pos_n, neg) = sums_of(client, g)?;
            sign_means(pos, pos_n, neg, g.len - pos_n)
        }
        SignValues::Scaled => {
            let (pos, _, neg) = sums_of(client, g)?;
            let s = scaled_sign(pos, neg, g.len);
            (s, -s)
        }
    };
    let m = out.sign_mut();
    m.len = g.len;
    m.bits = bits;
    (m.positive, m.negative) = (positive, negative);
    Ok(())
}

/// The registry's line for `onebit`: the means of the two signs' elements.
pub(crate) fn onebit_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Onebit(c) = config else { return None };
    stateless(c, |client, g, _: &OneBitConfig, _, out| compress(client, g, SignValues::Means, out))
}

/// The registry's line for `signsgd`: ±1.
pub(crate) fn signsgd_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Signsgd(c) = config else { return None };
    stateless(c, |client, g, _: &SignSgdConfig, _, out| compress(client, g, SignValues::Unit, out))
}

/// The registry's line for `efsignsgd`: ±‖g‖₁/d.
pub(crate) fn efsignsgd_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Efsignsgd(c) = config else { return None };
    stateless(c, |client, g, _: &EfSignSgdConfig, _, out| compress(client, g, SignValues::Scaled, out))
}
