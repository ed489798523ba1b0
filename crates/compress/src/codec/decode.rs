//! Reading a message's elements: [`decode`] into a [`Message`], and
//! [`accumulate`], the aggregation fast path that adds a message into a
//! buffer without one.

use super::error::{CodecError, Header};
use super::parse::{
    exactly_one, f32s, for_each_code, for_each_index, nibbles, sparse_values, u16s, ChunkedView, View,
};
use super::{bits, ternary};
use crate::codebook::BlockCodebook;
use crate::message::{
    ChunkedMessage, Message, QsgdMessage, TernaryMessage, TernaryPacking, TernarySumMessage,
};

/// Decodes one message (all of `bytes`) into `msg`, reusing its buffers.
pub fn decode(bytes: &[u8], msg: &mut Message) -> Result<Header, CodecError> {
    let (h, view) = exactly_one(bytes)?;
    let n = h.len as usize;
    match view {
        View::Dense(b) => {
            let m = msg.dense_mut();
            m.values.clear();
            m.values.extend(f32s(b));
        }
        View::Half(b) => {
            let m = msg.half_mut();
            m.values.clear();
            m.values.extend(u16s(b));
        }
        View::Ternary { scale, packing, codes } => {
            decode_ternary(scale, packing, codes, n, msg.ternary_mut())?
        }
        View::TernarySum { scale, workers, packed } => {
            decode_ternary_sum(scale, workers, packed, n, msg.ternary_sum_mut())?
        }
        View::Sparse { wire, count, indices, values } => {
            let m = msg.sparse_mut();
            m.len = n;
            m.wire = wire;
            m.indices.clear();
            m.indices.reserve(count);
            let out = &mut m.indices;
            for_each_index(wire, count, indices, h.len, |i| out.push(i))?;
            m.values.clear();
            m.values.extend(sparse_values(wire, values));
        }
        View::Qsgd { levels, block, norms, packed } => {
            decode_qsgd(levels, block, norms, packed, n, msg.qsgd_mut())?
        }
        View::Sign { positive, negative, bits } => {
            let m = msg.sign_mut();
            m.len = n;
            m.positive = positive;
            m.negative = negative;
            m.bits.clear();
            m.bits.extend_from_slice(bits);
        }
        View::LowRank { rows, cols, rank, p, q } => {
            let m = msg.low_rank_mut();
            (m.rows, m.cols, m.rank) = (rows, cols, rank);
            m.p.clear();
            m.p.extend(f32s(p));
            m.q.clear();
            m.q.extend(f32s(q));
        }
        View::Natural(codes) => {
            let m = msg.natural_mut();
            m.codes.clear();
            m.codes.extend_from_slice(codes);
        }
        View::Chunked(v) => decode_chunked(&v, msg.chunked_mut())?,
        View::Blockwise { codebook, block, absmax, codes } => {
            let m = msg.blockwise_mut();
            m.codebook = codebook;
            m.block = block;
            m.absmax.clear();
            m.absmax.extend(f32s(absmax));
            m.codes.clear();
            m.codes.reserve(n);
            let out = &mut m.codes;
            for_each_code(codebook, codes, n, |c| out.push(c));
        }
    }
    Ok(h)
}

/// Fills `m` with a chunked message's parts, checking its positions.
fn decode_chunked(v: &ChunkedView<'_>, m: &mut ChunkedMessage) -> Result<(), CodecError> {
    (m.tiles, m.k, m.dct, m.value_bits) = (v.tiles, v.k, v.dct, v.value_bits);
    m.codebook.clear();
    m.codebook.extend(f32s(v.codebook));
    m.positions.clear();
    let positions = &mut m.positions;
    v.positions(|p| positions.push(p))?;
    m.codes.clear();
    m.values.clear();
    if v.value_bits == 32 {
        m.values.extend(f32s(v.values));
    } else {
        let codes = &mut m.codes;
        bits::unpack(v.values, v.value_bits, positions.len(), |_, c| {
            codes.push(c as u8);
            Ok(())
        })?;
    }
    Ok(())
}

/// Fills `m` with a ternary message's scale and 2-bit codes (base-3 codes
/// are unpacked to 2-bit), checking the codes.
fn decode_ternary(
    scale: f32,
    packing: TernaryPacking,
    codes: &[u8],
    n: usize,
    m: &mut TernaryMessage,
) -> Result<(), CodecError> {
    m.len = n;
    m.scale = scale;
    m.packing = packing;
    m.packed.clear();
    match packing {
        TernaryPacking::TwoBit => {
            ternary::check_two_bit(codes, n)?;
            m.packed.extend_from_slice(codes);
        }
        TernaryPacking::Base3 => ternary::from_base3(codes, n, &mut m.packed)?,
    }
    Ok(())
}

/// Fills `m` with a ternary-sum message's scale, worker count and integer
/// sums, checking that each sum lies in `−workers..=workers`.
fn decode_ternary_sum(
    scale: f32,
    workers: u32,
    packed: &[u8],
    n: usize,
    m: &mut TernarySumMessage,
) -> Result<(), CodecError> {
    m.scale = scale;
    m.workers = workers;
    m.sums.clear();
    m.sums.resize(n, 0);
    let sums = &mut m.sums;
    bits::unpack(packed, bits::width_for(2 * workers), n, |i, v| {
        sums[i] = centered(v, workers, "integer sum exceeds ±workers")?;
        Ok(())
    })
}

/// Fills `m` with a QSGD message's parameters, norms and levels, checking
/// that every norm is finite and non-negative and every level lies in
/// `−levels..=levels`.
fn decode_qsgd(
    levels: u32,
    block: u32,
    norms: &[u8],
    packed: &[u8],
    n: usize,
    m: &mut QsgdMessage,
) -> Result<(), CodecError> {
    m.levels = levels;
    m.block = block;
    m.norms.clear();
    m.norms.extend(f32s(norms));
    if m.norms.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(CodecError::Invalid("qsgd norm is negative or not finite"));
    }
    m.codes.clear();
    m.codes.resize(n, 0);
    let codes = &mut m.codes;
    bits::unpack(packed, bits::width_for(2 * levels), n, |i, v| {
        codes[i] = centered(v, levels, "qsgd level exceeds ±levels")?;
        Ok(())
    })
}

/// `v − center` for an offset-coded integer, checked to lie in `−center..=center`.
fn centered(v: u32, center: u32, err: &'static str) -> Result<i16, CodecError> {
    if v > 2 * center {
        return Err(CodecError::Invalid(err));
    }
    Ok((v as i32 - center as i32) as i16)
}

/// Decodes one message and adds `weight ×` its value into `out` without an
/// intermediate buffer (the aggregation fast path). `out.len()` must equal
/// the message length. The whole message is validated before `out` changes.
pub fn accumulate(bytes: &[u8], weight: f32, out: &mut [f32]) -> Result<Header, CodecError> {
    let (h, view) = exactly_one(bytes)?;
    if h.len as usize != out.len() {
        return Err(CodecError::LenMismatch { expected: out.len(), got: h.len as usize });
    }
    match view {
        View::Dense(b) => out.iter_mut().zip(f32s(b)).for_each(|(o, v)| *o += weight * v),
        View::Half(b) => {
            out.iter_mut().zip(u16s(b)).for_each(|(o, v)| *o += weight * half::f16::from_bits(v).to_f32())
        }
        View::Ternary { scale, packing, codes } => match packing {
            TernaryPacking::TwoBit => {
                ternary::check_two_bit(codes, out.len())?;
                crate::message::add_ternary(codes, weight * scale, out);
            }
            TernaryPacking::Base3 => ternary::add_base3(codes, weight * scale, out)?,
        },
        View::TernarySum { scale, workers, packed } => add_ternary_sum(scale, workers, packed, weight, out)?,
        View::Sparse { wire, count, indices, values } => {
            for_each_index(wire, count, indices, h.len, drop)?;
            let mut vals = sparse_values(wire, values);
            for_each_index(wire, count, indices, h.len, |i| {
                out[i as usize] += weight * vals.next().expect("count checked by parse");
            })?;
        }
        View::Qsgd { levels, block, norms, packed } => add_qsgd(levels, block, norms, packed, weight, out)?,
        View::Sign { positive, negative, bits } => {
            let (p, n) = (weight * positive, weight * negative);
            for (o, &byte) in out.chunks_mut(8).zip(bits) {
                for (bit, o) in o.iter_mut().enumerate() {
                    *o += if byte >> bit & 1 == 1 { p } else { n };
                }
            }
        }
        View::LowRank { cols, rank, p, q, .. } => add_low_rank_bytes(cols, rank, p, q, weight, out),
        View::Natural(codes) => {
            for (o, &c) in out.iter_mut().zip(codes) {
                *o += weight * crate::codebook::natural_value(c);
            }
        }
        View::Chunked(v) => {
            // Rare on this path (the senders' mean decodes whole messages):
            // decode into a buffer kept per thread, then add.
            thread_local!(static SCRATCH: std::cell::RefCell<ChunkedMessage> = Default::default());
            SCRATCH.with_borrow_mut(|m| {
                decode_chunked(&v, m)?;
                m.add_to(weight, out);
                Ok::<_, CodecError>(())
            })?;
        }
        View::Blockwise { codebook, block, absmax, codes } => {
            add_blockwise(codebook, block as usize, absmax, codes, weight, out)
        }
    }
    Ok(h)
}

/// Adds `weight ×` a ternary-sum message into `out`, after checking every
/// sum (`out` is untouched on error).
#[inline]
fn add_ternary_sum(
    scale: f32,
    workers: u32,
    packed: &[u8],
    weight: f32,
    out: &mut [f32],
) -> Result<(), CodecError> {
    let width = bits::width_for(2 * workers);
    bits::unpack(packed, width, out.len(), |_, v| {
        centered(v, workers, "integer sum exceeds ±workers").map(drop)
    })?;
    let w = weight * scale / workers as f32;
    bits::unpack(packed, width, out.len(), |i, v| {
        out[i] += w * (v as i32 - workers as i32) as f32;
        Ok(())
    })
}

/// Adds `weight ×` a QSGD message into `out`, after checking every norm and
/// level (`out` is untouched on error).
#[inline]
fn add_qsgd(
    levels: u32,
    block: u32,
    norms: &[u8],
    packed: &[u8],
    weight: f32,
    out: &mut [f32],
) -> Result<(), CodecError> {
    if f32s(norms).any(|v| !v.is_finite() || v < 0.0) {
        return Err(CodecError::Invalid("qsgd norm is negative or not finite"));
    }
    let width = bits::width_for(2 * levels);
    bits::unpack(packed, width, out.len(), |_, v| {
        centered(v, levels, "qsgd level exceeds ±levels").map(drop)
    })?;
    let b = block as usize;
    let inv = weight / levels as f32;
    let norm_at = |i: usize| {
        let o = i / b * 4;
        f32::from_le_bytes([norms[o], norms[o + 1], norms[o + 2], norms[o + 3]])
    };
    bits::unpack(packed, width, out.len(), |i, v| {
        out[i] += norm_at(i) * inv * (v as i32 - levels as i32) as f32;
        Ok(())
    })
}

/// Adds `weight × P Qᵀ` into `out` (row-major, `cols` wide), reading the
/// factors straight from the bytes.
#[inline]
fn add_low_rank_bytes(cols: u32, rank: u32, p: &[u8], q: &[u8], weight: f32, out: &mut [f32]) {
    // P Qᵀ straight from the bytes, each element's products summed in
    // order as `add_low_rank` sums them.
    let (cols, rank) = (cols as usize, rank as usize);
    let at = |b: &[u8], i: usize| f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    for (i, row) in out.chunks_mut(cols.max(1)).enumerate() {
        for (j, o) in row.iter_mut().enumerate() {
            let mut v = 0.0f32;
            for k in 0..rank {
                v += at(p, i * rank + k) * at(q, j * rank + k);
            }
            *o += weight * v;
        }
    }
}

/// Adds `weight ×` a blockwise message (checked by `parse`) into `out`.
fn add_blockwise(
    codebook: BlockCodebook,
    block: usize,
    absmax: &[u8],
    codes: &[u8],
    weight: f32,
    out: &mut [f32],
) {
    let table = codebook.values();
    let blocks = out.chunks_mut(block).zip(f32s(absmax));
    if codebook.bits() == 8 {
        for ((o, scale), c) in blocks.zip(codes.chunks(block)) {
            let w = weight * scale;
            for (o, &c) in o.iter_mut().zip(c) {
                *o += w * table[c as usize];
            }
        }
        return;
    }
    // Two codes a byte, low nibble first. An even block starts on a byte:
    // a byte a pair of outputs; an odd one may start at either nibble.
    if block.is_multiple_of(2) {
        for ((o, scale), bytes) in blocks.zip(codes.chunks(block / 2)) {
            let w = weight * scale;
            let (pairs, last) = o.split_at_mut(o.len() / 2 * 2);
            for (o, &b) in pairs.chunks_exact_mut(2).zip(bytes) {
                o[0] += w * table[usize::from(b & 15)];
                o[1] += w * table[usize::from(b >> 4)];
            }
            if let (Some(o), Some(&b)) = (last.first_mut(), bytes.get(pairs.len() / 2)) {
                *o += w * table[usize::from(b & 15)];
            }
        }
        return;
    }
    let mut nibbles = nibbles(codes);
    for (o, scale) in blocks {
        let w = weight * scale;
        for (o, c) in o.iter_mut().zip(nibbles.by_ref()) {
            *o += w * table[usize::from(c)];
        }
    }
}
