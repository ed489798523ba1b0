//! The wire format: one compressed unit per message, a 12-byte header and a
//! kind-specific payload. [`encoded_len`] is the exact number of bytes
//! [`encode`] writes, which is what every byte count in gradcomp reports.
//!
//! ```text
//! header  magic 0x67 | version 1 | kind u8 | flags u8 | len u32 LE | unit u32 LE
//! Dense       len × f32
//! Half        len × f16
//! Ternary     scale f32 | codes: ceil(len/4) bytes (2 bits each: 00=0 01=+1 10=−1)
//!                             or ceil(len/5) bytes base-3 (flag 0x01)
//! TernarySum  scale f32 | workers u32 | (m + N) in ceil(log2(2N+1)) bits each
//! Sparse      count u32 | indices: count × u32, or (flag 0x01) byte length u32 +
//!             varints of idx[0], idx[i] − idx[i−1] − 1 | values: count × f32, or f16 (flag 0x02)
//! Qsgd        levels u32 | bucket u32 | ceil(len/bucket) × f32 norms |
//!             (level + levels) in ceil(log2(2·levels+1)) bits each
//! Sign        positive f32 | negative f32 | ceil(len/8) bytes of sign bits
//! ```
//! All integers and floats are little-endian; padding bits are zero.
//!
//! Decoding trusts nothing: every length, count, index, code and scalar is
//! checked, errors are returned (never panics), buffers grow only in
//! proportion to the bytes received, and [`accumulate`] validates a whole
//! message before it touches the output.

pub mod bits;
pub mod harness;
mod ternary;

use thiserror::Error;

use crate::message::{IndexEncoding, Message, MessageKind, SparseWire, TernaryPacking, ValueEncoding};

pub const MAGIC: u8 = 0x67;
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 12;

const FLAG_BASE3: u8 = 0x01;
const FLAG_VARINT: u8 = 0x01;
const FLAG_F16: u8 = 0x02;

/// Most workers a TernarySum can describe (sums are held in i16).
pub const MAX_WORKERS: u32 = i16::MAX as u32;

/// Why bytes could not be decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    #[error("message truncated: {what} needs {needed} bytes but {available} remain")]
    Truncated { what: &'static str, needed: usize, available: usize },
    #[error("not a gradcomp message: first byte {0:#04x}, expected 0x67")]
    BadMagic(u8),
    #[error("wire version {0} is not supported (this build speaks version 1); run the same gradcomp version on every worker")]
    Version(u8),
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("unknown flag bits {flags:#04x} on a {kind:?} message")]
    Flags { kind: MessageKind, flags: u8 },
    #[error("{what}: expected {expected} bytes, got {got}")]
    Length { what: &'static str, expected: usize, got: usize },
    #[error("invalid message: {0}")]
    Invalid(&'static str),
    #[error("sparse index {index} is out of range for a unit of {len} elements")]
    IndexOutOfRange { index: u64, len: u32 },
    #[error("{0} bytes follow the message")]
    TrailingBytes(usize),
    #[error("message describes {got} elements but the buffer holds {expected}")]
    LenMismatch { expected: usize, got: usize },
}

/// The fixed part of every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: MessageKind,
    pub flags: u8,
    /// Logical element count of the unit.
    pub len: u32,
    /// Which compression unit this is (tensor index, or 0 for `global`).
    pub unit: u32,
}

/// A bounds-checked cursor over received bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CodecError> {
        if n > self.bytes.len() {
            return Err(CodecError::Truncated { what, needed: n, available: self.bytes.len() });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, CodecError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A scalar that must be finite (scales, norms, reconstruction means).
    fn finite_f32(&mut self, what: &'static str) -> Result<f32, CodecError> {
        let v = f32::from_bits(self.u32(what)?);
        if v.is_finite() {
            Ok(v)
        } else {
            Err(CodecError::Invalid("non-finite scalar"))
        }
    }
}

/// A parsed message whose structure (sizes, flags, scalars) has been checked
/// but whose element data has not yet been read.
enum View<'a> {
    Dense(&'a [u8]),
    Half(&'a [u8]),
    Ternary { scale: f32, packing: TernaryPacking, codes: &'a [u8] },
    TernarySum { scale: f32, workers: u32, packed: &'a [u8] },
    Sparse { wire: SparseWire, count: usize, indices: &'a [u8], values: &'a [u8] },
    Qsgd { levels: u32, bucket: u32, norms: &'a [u8], packed: &'a [u8] },
    Sign { positive: f32, negative: f32, bits: &'a [u8] },
}

fn parse(bytes: &[u8]) -> Result<(Header, View<'_>, &[u8]), CodecError> {
    let mut r = Reader { bytes };
    let h = r.take(4, "header")?;
    if h[0] != MAGIC {
        return Err(CodecError::BadMagic(h[0]));
    }
    if h[1] != VERSION {
        return Err(CodecError::Version(h[1]));
    }
    let kind = MessageKind::from_u8(h[2]).ok_or(CodecError::UnknownKind(h[2]))?;
    let flags = h[3];
    let len = r.u32("header")?;
    let unit = r.u32("header")?;
    let header = Header { kind, flags, len, unit };
    let allowed = match kind {
        MessageKind::Ternary => FLAG_BASE3,
        MessageKind::Sparse => FLAG_VARINT | FLAG_F16,
        _ => 0,
    };
    if flags & !allowed != 0 {
        return Err(CodecError::Flags { kind, flags });
    }
    let n = len as usize;
    let view = match kind {
        MessageKind::Dense => View::Dense(r.take(n * 4, "dense values")?),
        MessageKind::Half => View::Half(r.take(n * 2, "half values")?),
        MessageKind::Ternary => {
            let scale = r.finite_f32("ternary scale")?;
            if scale < 0.0 {
                return Err(CodecError::Invalid("negative ternary scale"));
            }
            let packing =
                if flags & FLAG_BASE3 != 0 { TernaryPacking::Base3 } else { TernaryPacking::TwoBit };
            let codes = r.take(ternary::wire_len(n, packing), "ternary codes")?;
            View::Ternary { scale, packing, codes }
        }
        MessageKind::TernarySum => {
            let scale = r.finite_f32("ternary-sum scale")?;
            let workers = r.u32("worker count")?;
            if workers == 0 || workers > MAX_WORKERS {
                return Err(CodecError::Invalid("worker count outside 1..=32767"));
            }
            let packed = r.take(bits::packed_len(n, bits::width_for(2 * workers)), "integer sums")?;
            View::TernarySum { scale, workers, packed }
        }
        MessageKind::Sparse => {
            let count = r.u32("sparse count")? as usize;
            if count > n {
                return Err(CodecError::Invalid("sparse count exceeds the unit length"));
            }
            let wire = SparseWire {
                indices: if flags & FLAG_VARINT != 0 { IndexEncoding::Varint } else { IndexEncoding::U32 },
                values: if flags & FLAG_F16 != 0 { ValueEncoding::F16 } else { ValueEncoding::F32 },
            };
            let indices = match wire.indices {
                IndexEncoding::U32 => r.take(count * 4, "sparse indices")?,
                IndexEncoding::Varint => {
                    let nbytes = r.u32("varint length")? as usize;
                    // Each varint is 1..=5 bytes.
                    if nbytes < count || nbytes > count * 5 {
                        return Err(CodecError::Invalid("varint byte length inconsistent with count"));
                    }
                    r.take(nbytes, "sparse varint indices")?
                }
            };
            let vsize = match wire.values {
                ValueEncoding::F32 => 4,
                ValueEncoding::F16 => 2,
            };
            let values = r.take(count * vsize, "sparse values")?;
            View::Sparse { wire, count, indices, values }
        }
        MessageKind::Qsgd => {
            let levels = r.u32("qsgd levels")?;
            let bucket = r.u32("qsgd bucket")?;
            if levels == 0 || levels > crate::quantize::qsgd::MAX_LEVELS {
                return Err(CodecError::Invalid("qsgd levels outside 1..=32767"));
            }
            if bucket == 0 {
                return Err(CodecError::Invalid("qsgd bucket size 0"));
            }
            let nb = n.div_ceil(bucket as usize);
            let norms = r.take(nb * 4, "qsgd norms")?;
            let packed = r.take(bits::packed_len(n, bits::width_for(2 * levels)), "qsgd levels")?;
            View::Qsgd { levels, bucket, norms, packed }
        }
        MessageKind::Sign => {
            let positive = r.finite_f32("sign mean")?;
            let negative = r.finite_f32("sign mean")?;
            let bits = r.take(n.div_ceil(8), "sign bits")?;
            if !n.is_multiple_of(8) && bits.last().is_some_and(|&b| b >> (n % 8) != 0) {
                return Err(CodecError::Invalid("nonzero padding bits"));
            }
            View::Sign { positive, negative, bits }
        }
    };
    Ok((header, view, r.bytes))
}

fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u16s(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// Calls `f` with each sparse index, checking that they ascend strictly and
/// stay below `len`.
fn for_each_index(
    wire: SparseWire,
    count: usize,
    bytes: &[u8],
    len: u32,
    mut f: impl FnMut(u32),
) -> Result<(), CodecError> {
    // `next_min` is the smallest index the next entry may take.
    let mut next_min = 0u64;
    let mut emit = |i: u64, f: &mut dyn FnMut(u32)| -> Result<u64, CodecError> {
        if i >= u64::from(len) {
            return Err(CodecError::IndexOutOfRange { index: i, len });
        }
        if i < next_min {
            return Err(CodecError::Invalid("sparse indices are not strictly ascending"));
        }
        next_min = i + 1;
        f(i as u32);
        Ok(i + 1)
    };
    match wire.indices {
        IndexEncoding::U32 => {
            for b in bytes.chunks_exact(4) {
                emit(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])), &mut f)?;
            }
        }
        IndexEncoding::Varint => {
            // idx[0] = v0, idx[i] = idx[i-1] + 1 + v_i: ascending by construction.
            let mut pos = 0;
            let mut base = 0u64;
            for _ in 0..count {
                let (v, used) = bits::get_varint(&bytes[pos..])?;
                pos += used;
                base = emit(base + u64::from(v), &mut f)?;
            }
            if pos != bytes.len() {
                return Err(CodecError::Invalid("varint indices do not fill their byte length"));
            }
        }
    }
    Ok(())
}

fn sparse_values(wire: SparseWire, bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    let (a, b) = match wire.values {
        ValueEncoding::F32 => (Some(f32s(bytes)), None),
        ValueEncoding::F16 => (None, Some(u16s(bytes).map(|h| half::f16::from_bits(h).to_f32()))),
    };
    a.into_iter().flatten().chain(b.into_iter().flatten())
}

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
    let flags = match msg {
        Message::Ternary(m) if m.packing == TernaryPacking::Base3 => FLAG_BASE3,
        Message::Sparse(m) => {
            (if m.wire.indices == IndexEncoding::Varint { FLAG_VARINT } else { 0 })
                | (if m.wire.values == ValueEncoding::F16 { FLAG_F16 } else { 0 })
        }
        _ => 0,
    };
    out.reserve(encoded_len(msg));
    out.extend_from_slice(&[MAGIC, VERSION, msg.kind() as u8, flags]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&unit.to_le_bytes());
    let put_f32 = |out: &mut Vec<u8>, v: f32| out.extend_from_slice(&v.to_le_bytes());
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
        Message::Sparse(m) => {
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
        Message::Qsgd(m) => {
            out.extend_from_slice(&m.levels.to_le_bytes());
            out.extend_from_slice(&m.bucket.to_le_bytes());
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
    }
    debug_assert_eq!(out.len() - start, encoded_len(msg));
    out.len() - start
}

/// Reads and checks the header only.
pub fn read_header(bytes: &[u8]) -> Result<Header, CodecError> {
    parse(bytes).map(|(h, _, _)| h)
}

/// The scaler of a ternary message (`None` for every other kind), read
/// through the same checks as a full decode of the header and scalar.
pub fn ternary_scale(bytes: &[u8]) -> Result<Option<f32>, CodecError> {
    Ok(match parse(bytes)?.1 {
        View::Ternary { scale, .. } => Some(scale),
        _ => None,
    })
}

/// Splits a buffer of concatenated messages into the first message and the rest.
pub fn split_first(bytes: &[u8]) -> Result<(&[u8], &[u8]), CodecError> {
    let (_, _, rest) = parse(bytes)?;
    Ok(bytes.split_at(bytes.len() - rest.len()))
}

fn exactly_one(bytes: &[u8]) -> Result<(Header, View<'_>), CodecError> {
    let (h, view, rest) = parse(bytes)?;
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    Ok((h, view))
}

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
            let m = msg.ternary_mut();
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
        }
        View::TernarySum { scale, workers, packed } => {
            let m = msg.ternary_sum_mut();
            m.scale = scale;
            m.workers = workers;
            m.sums.clear();
            m.sums.resize(n, 0);
            let sums = &mut m.sums;
            bits::unpack(packed, bits::width_for(2 * workers), n, |i, v| {
                sums[i] = centered(v, workers, "integer sum exceeds ±workers")?;
                Ok(())
            })?;
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
        View::Qsgd { levels, bucket, norms, packed } => {
            let m = msg.qsgd_mut();
            m.levels = levels;
            m.bucket = bucket;
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
            })?;
        }
        View::Sign { positive, negative, bits } => {
            let m = msg.sign_mut();
            m.len = n;
            m.positive = positive;
            m.negative = negative;
            m.bits.clear();
            m.bits.extend_from_slice(bits);
        }
    }
    Ok(h)
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
        View::TernarySum { scale, workers, packed } => {
            let width = bits::width_for(2 * workers);
            bits::unpack(packed, width, out.len(), |_, v| {
                centered(v, workers, "integer sum exceeds ±workers").map(drop)
            })?;
            let w = weight * scale / workers as f32;
            bits::unpack(packed, width, out.len(), |i, v| {
                out[i] += w * (v as i32 - workers as i32) as f32;
                Ok(())
            })?;
        }
        View::Sparse { wire, count, indices, values } => {
            for_each_index(wire, count, indices, h.len, drop)?;
            let mut vals = sparse_values(wire, values);
            for_each_index(wire, count, indices, h.len, |i| {
                out[i as usize] += weight * vals.next().expect("count checked by parse");
            })?;
        }
        View::Qsgd { levels, bucket, norms, packed } => {
            if f32s(norms).any(|v| !v.is_finite() || v < 0.0) {
                return Err(CodecError::Invalid("qsgd norm is negative or not finite"));
            }
            let width = bits::width_for(2 * levels);
            bits::unpack(packed, width, out.len(), |_, v| {
                centered(v, levels, "qsgd level exceeds ±levels").map(drop)
            })?;
            let b = bucket as usize;
            let inv = weight / levels as f32;
            let norm_at = |i: usize| {
                let o = i / b * 4;
                f32::from_le_bytes([norms[o], norms[o + 1], norms[o + 2], norms[o + 3]])
            };
            bits::unpack(packed, width, out.len(), |i, v| {
                out[i] += norm_at(i) * inv * (v as i32 - levels as i32) as f32;
                Ok(())
            })?;
        }
        View::Sign { positive, negative, bits } => {
            let (p, n) = (weight * positive, weight * negative);
            for (o, &byte) in out.chunks_mut(8).zip(bits) {
                for (bit, o) in o.iter_mut().enumerate() {
                    *o += if byte >> bit & 1 == 1 { p } else { n };
                }
            }
        }
    }
    Ok(h)
}
