//! Writing a message: [`encoded_len`] and [`encode`].

use super::error::{FLAG_BASE3, FLAG_DCT, FLAG_F16, FLAG_VARINT, HEADER_LEN, MAGIC, VERSION};
use super::{bits, ternary};
use crate::message::{ChunkedMessage, IndexEncoding, Message, SparseMessage, TernaryPacking, ValueEncoding};

/// The exact number of bytes [`encode`] writes for `msg`.
pub fn encoded_len(msg: &Message) -> usize {
    HEADER_LEN
        + match msg {
            Message::Dense(m) => m.values.len() * 4,
            Message::Half(m) => m.values.len() * 2,
            Message::Ternary(m) => 4 + ternary::wire_len(m.len, m.packing),
            Message::TernarySum(m) => 8 + bits::packed_len(m.sums.len(), bits::width_for(2 * m.workers)),
            Message::Sparse(m) => {
                let idx = match m.wire.indices {
                    IndexEncoding::U32 => 4 * m.indices.len(),
                    IndexEncoding::Varint => 4 + varint_indices_len(&m.indices),
                };
                let val = match m.wire.values {
                    ValueEncoding::F32 => 4,
                    ValueEncoding::F16 => 2,
                };
                4 + idx + val * m.values.len()
            }
            Message::Qsgd(m) => {
                8 + 4 * m.norms.len() + bits::packed_len(m.codes.len(), bits::width_for(2 * m.levels))
            }
            Message::Sign(m) => 8 + m.bits.len(),
            Message::LowRank(m) => 12 + 4 * (m.p.len() + m.q.len()),
            Message::Natural(m) => m.codes.len(),
            Message::Blockwise(m) => {
                4 + 4 * m.absmax.len() + bits::packed_len(m.codes.len(), m.codebook.bits())
            }
            Message::Chunked(m) => {
                let n = m.positions.len();
                24 + 4 * m.codebook.len()
                    + bits::packed_len(n, m.tiles.position_bits())
                    + bits::packed_len(n, m.value_bits)
            }
        }
}

fn varint_gaps(indices: &[u32]) -> impl Iterator<Item = u32> + '_ {
    indices.iter().enumerate().map(move |(j, &i)| if j == 0 { i } else { i - indices[j - 1] - 1 })
}

fn varint_indices_len(indices: &[u32]) -> usize {
    varint_gaps(indices).map(|g| (32 - g.leading_zeros()).max(1).div_ceil(7) as usize).sum()
}

/// Appends the encoding of `msg` for compression unit `unit` to `out` and
/// returns the number of bytes written (= [`encoded_len`]). Does not allocate
/// when `out` has the capacity.
///
/// Panics if the message breaks its own invariants (indices not ascending,
/// buffers of inconsistent length): those are bugs in the sender, not input.
pub fn encode(msg: &Message, unit: u32, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    let len = u32::try_from(msg.len()).expect("a unit holds at most u32::MAX elements");
    let flags = header_flags(msg);
    out.reserve(encoded_len(msg));
    out.extend_from_slice(&[MAGIC, VERSION, msg.kind() as u8, flags]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&unit.to_le_bytes());
    put_payload(msg, out);
    debug_assert_eq!(out.len() - start, encoded_len(msg));
    out.len() - start
}

/// The header's flags byte: which optional wire encoding the payload uses.
fn header_flags(msg: &Message) -> u8 {
    match msg {
        Message::Ternary(m) if m.packing == TernaryPacking::Base3 => FLAG_BASE3,
        Message::Sparse(m) => {
            (if m.wire.indices == IndexEncoding::Varint { FLAG_VARINT } else { 0 })
                | (if m.wire.values == ValueEncoding::F16 { FLAG_F16 } else { 0 })
        }
        Message::Blockwise(m) => m.codebook as u8,
        Message::Chunked(m) => u8::from(m.dct) * FLAG_DCT,
        _ => 0,
    }
}

#[inline]
fn put_f32(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends the kind-specific payload of `msg` (everything after the header).
fn put_payload(msg: &Message, out: &mut Vec<u8>) {
    match msg {
        Message::Dense(m) => m.values.iter().for_each(|&v| put_f32(out, v)),
        Message::Half(m) => m.values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        Message::Ternary(m) => {
            put_f32(out, m.scale);
            assert_eq!(m.packed.len(), m.len.div_ceil(4), "ternary codes of wrong length");
            match m.packing {
                TernaryPacking::TwoBit => out.extend_from_slice(&m.packed),
                TernaryPacking::Base3 => ternary::to_base3(&m.packed, m.len, out),
            }
        }
        Message::TernarySum(m) => {
            put_f32(out, m.scale);
            out.extend_from_slice(&m.workers.to_le_bytes());
            let n = m.workers as i32;
            bits::pack(
                m.sums.iter().map(|&s| (i32::from(s) + n) as u32),
                bits::width_for(2 * m.workers),
                out,
            );
        }
        Message::Sparse(m) => put_sparse(m, out),
        Message::Qsgd(m) => {
            out.extend_from_slice(&m.levels.to_le_bytes());
            out.extend_from_slice(&m.block.to_le_bytes());
            m.norms.iter().for_each(|&v| put_f32(out, v));
            let s = m.levels as i32;
            bits::pack(
                m.codes.iter().map(|&c| (i32::from(c) + s) as u32),
                bits::width_for(2 * m.levels),
                out,
            );
        }
        Message::Sign(m) => {
            put_f32(out, m.positive);
            put_f32(out, m.negative);
            out.extend_from_slice(&m.bits);
        }
        Message::LowRank(m) => {
            for v in [m.rows, m.cols, m.rank] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            m.p.iter().chain(&m.q).for_each(|&v| put_f32(out, v));
        }
        Message::Natural(m) => out.extend_from_slice(&m.codes),
        Message::Blockwise(m) => {
            assert_eq!(
                m.absmax.len(),
                m.codes.len().div_ceil(m.block.max(1) as usize),
                "one scale per block"
            );
            out.extend_from_slice(&m.block.to_le_bytes());
            m.absmax.iter().for_each(|&v| put_f32(out, v));
            match m.codebook.bits() {
                8 => out.extend_from_slice(&m.codes),
                w => bits::pack(m.codes.iter().map(|&c| u32::from(c)), w, out),
            }
        }
        Message::Chunked(m) => put_chunked(m, out),
    }
}

/// Appends a chunked payload: the tiling, k, the value width, the codebook,
/// the positions, then the codes or f32 values.
fn put_chunked(m: &ChunkedMessage, out: &mut Vec<u8>) {
    let t = &m.tiles;
    assert_eq!(m.positions.len(), t.entries(m.k as usize), "one entry per kept position");
    for v in [t.rows, t.cols, t.tile_rows, t.tile_cols] {
        out.extend_from_slice(&(v as u32).to_le_bytes());
    }
    out.extend_from_slice(&m.k.to_le_bytes());
    out.extend_from_slice(&m.value_bits.to_le_bytes());
    m.codebook.iter().for_each(|&v| put_f32(out, v));
    bits::pack(m.positions.iter().map(|&p| u32::from(p)), t.position_bits(), out);
    if m.value_bits == 32 {
        m.values.iter().for_each(|&v| put_f32(out, v));
    } else {
        assert_eq!(m.codes.len(), m.positions.len(), "one code per entry");
        bits::pack(m.codes.iter().map(|&c| u32::from(c)), m.value_bits, out);
    }
}

/// Appends a sparse payload: the count, the indices (u32 or varint gaps),
/// then the values (f32 or f16).
fn put_sparse(m: &SparseMessage, out: &mut Vec<u8>) {
    assert_eq!(m.indices.len(), m.values.len(), "sparse indices and values differ in length");
    out.extend_from_slice(&(m.indices.len() as u32).to_le_bytes());
    match m.wire.indices {
        IndexEncoding::U32 => m.indices.iter().for_each(|i| out.extend_from_slice(&i.to_le_bytes())),
        IndexEncoding::Varint => {
            out.extend_from_slice(&(varint_indices_len(&m.indices) as u32).to_le_bytes());
            varint_gaps(&m.indices).for_each(|g| bits::put_varint(g, out));
        }
    }
    match m.wire.values {
        ValueEncoding::F32 => m.values.iter().for_each(|&v| put_f32(out, v)),
        ValueEncoding::F16 => m
            .values
            .iter()
            .for_each(|&v| out.extend_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes())),
    }
}
