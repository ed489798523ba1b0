//! Reading a message's structure: the header, the kind's sizes, flags and
//! scalars, checked before any element is read ([`View`]); splitting
//! concatenated messages.

use super::error::{
    CodecError, Header, FLAG_BASE3, FLAG_CODEBOOK, FLAG_DCT, FLAG_F16, FLAG_VARINT, MAGIC, MAX_WORKERS,
    VERSION,
};
use super::{bits, ternary};
use crate::chunked::Tiles;
use crate::codebook::BlockCodebook;
use crate::message::{IndexEncoding, MessageKind, SparseWire, TernaryPacking, ValueEncoding};

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
pub(super) enum View<'a> {
    Dense(&'a [u8]),
    Half(&'a [u8]),
    Ternary { scale: f32, packing: TernaryPacking, codes: &'a [u8] },
    TernarySum { scale: f32, workers: u32, packed: &'a [u8] },
    Sparse { wire: SparseWire, count: usize, indices: &'a [u8], values: &'a [u8] },
    Qsgd { levels: u32, block: u32, norms: &'a [u8], packed: &'a [u8] },
    Sign { positive: f32, negative: f32, bits: &'a [u8] },
    LowRank { rows: u32, cols: u32, rank: u32, p: &'a [u8], q: &'a [u8] },
    Natural(&'a [u8]),
    Blockwise { codebook: BlockCodebook, block: u32, absmax: &'a [u8], codes: &'a [u8] },
    Chunked(ChunkedView<'a>),
}

pub(super) fn parse(bytes: &[u8]) -> Result<(Header, View<'_>, &[u8]), CodecError> {
    let mut r = Reader { bytes };
    let header = header(&mut r)?;
    let Header { kind, flags, len, .. } = header;
    let n = len as usize;
    let view = match kind {
        MessageKind::Dense => {
            View::Dense(finite_f32s(r.take(n * 4, "dense values")?, "non-finite dense value")?)
        }
        MessageKind::Half => View::Half(finite_f16s(r.take(n * 2, "half values")?, "non-finite half value")?),
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
        MessageKind::Sparse => sparse(&mut r, flags, n)?,
        MessageKind::Qsgd => qsgd(&mut r, n)?,
        MessageKind::Sign => {
            let positive = r.finite_f32("sign mean")?;
            let negative = r.finite_f32("sign mean")?;
            let bits = r.take(n.div_ceil(8), "sign bits")?;
            if !n.is_multiple_of(8) && bits.last().is_some_and(|&b| b >> (n % 8) != 0) {
                return Err(CodecError::Invalid("nonzero padding bits"));
            }
            View::Sign { positive, negative, bits }
        }
        MessageKind::LowRank => low_rank(&mut r, len)?,
        MessageKind::Natural => {
            let codes = r.take(n, "natural codes")?;
            if codes.contains(&crate::codebook::NEGATIVE) {
                return Err(CodecError::Invalid("natural code of a negative zero"));
            }
            View::Natural(codes)
        }
        MessageKind::Blockwise => blockwise(&mut r, flags, n)?,
        MessageKind::Chunked => View::Chunked(chunked(&mut r, flags, n)?),
    };
    Ok((header, view, r.bytes))
}

/// The 12-byte header, checked: magic, version, a known kind, and only the
/// flags that kind allows.
fn header(r: &mut Reader<'_>) -> Result<Header, CodecError> {
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
    let allowed = match kind {
        MessageKind::Ternary => FLAG_BASE3,
        MessageKind::Sparse => FLAG_VARINT | FLAG_F16,
        MessageKind::Blockwise => FLAG_CODEBOOK,
        MessageKind::Chunked => FLAG_DCT,
        _ => 0,
    };
    if flags & !allowed != 0 {
        return Err(CodecError::Flags { kind, flags });
    }
    Ok(Header { kind, flags, len, unit })
}

/// A sparse message's indices and values (`flags` choose their encodings),
/// checked: the count fits the unit, the varint byte length fits the count,
/// and every value is finite. The indices are checked where they are read
/// ([`for_each_index`]).
fn sparse<'a>(r: &mut Reader<'a>, flags: u8, n: usize) -> Result<View<'a>, CodecError> {
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
    match wire.values {
        ValueEncoding::F32 => finite_f32s(values, "non-finite sparse value")?,
        ValueEncoding::F16 => finite_f16s(values, "non-finite sparse value")?,
    };
    Ok(View::Sparse { wire, count, indices, values })
}

/// A blockwise message's block size, scales and codes, checked: a known
/// codebook (the flags), a nonzero block, every scale finite and ≥ 0, every
/// code one the codebook writes and the padding bits zero.
fn blockwise<'a>(r: &mut Reader<'a>, flags: u8, n: usize) -> Result<View<'a>, CodecError> {
    let codebook = BlockCodebook::from_u8(flags).ok_or(CodecError::Invalid("unknown blockwise codebook"))?;
    let block = r.u32("blockwise block")?;
    if block == 0 {
        return Err(CodecError::Invalid("blockwise block size 0"));
    }
    let absmax = r.take(n.div_ceil(block as usize) * 4, "blockwise block scales")?;
    if f32s(absmax).any(|v| !v.is_finite() || v < 0.0) {
        return Err(CodecError::Invalid("blockwise block scale is negative or not finite"));
    }
    let codes = r.take(bits::packed_len(n, codebook.bits()), "blockwise codes")?;
    if codebook.bits() == 4 {
        if nibbles(codes).take(n).any(|c| !codebook.valid(c)) {
            return Err(CodecError::Invalid("4-bit code of a negative zero"));
        }
        if n % 2 == 1 && codes.last().is_some_and(|&b| b >> 4 != 0) {
            return Err(CodecError::Invalid("nonzero padding bits"));
        }
    }
    Ok(View::Blockwise { codebook, block, absmax, codes })
}

/// A chunked message's parts, sized and checked but for the positions
/// (checked where they are read, [`ChunkedView::positions`]).
pub(super) struct ChunkedView<'a> {
    pub tiles: Tiles,
    pub k: u32,
    pub dct: bool,
    pub value_bits: u32,
    pub codebook: &'a [u8],
    pub positions: &'a [u8],
    pub values: &'a [u8],
}

/// A chunked message's structure, checked: the tiling covers the unit, a
/// tile holds at most 2^16 positions (a DCT tile's sides at most 256), k is
/// in 1..=tile size, the value width is 1, 2, 4, 8 or 32, the codebook and
/// f32 values are finite, and the packed fields have exactly their length.
fn chunked<'a>(r: &mut Reader<'a>, flags: u8, n: usize) -> Result<ChunkedView<'a>, CodecError> {
    let mut dim = |what| r.u32(what).map(|v| v as usize);
    let tiles = Tiles {
        rows: dim("chunked rows")?,
        cols: dim("chunked cols")?,
        tile_rows: dim("chunked tile rows")?,
        tile_cols: dim("chunked tile cols")?,
    };
    let (k, value_bits) = (r.u32("chunked k")?, r.u32("chunked value bits")?);
    let dct = flags & FLAG_DCT != 0;
    let side = if dct { crate::chunked::dct::MAX_SIDE } else { crate::chunked::tiles::MAX_TILE };
    if (tiles.rows as u64) * (tiles.cols as u64) != n as u64 {
        return Err(CodecError::Invalid("chunked tiling does not cover the unit"));
    }
    let tile = tiles.tile_rows * tiles.tile_cols;
    if tiles.tile_rows == 0
        || tiles.tile_cols == 0
        || tiles.tile_rows > tiles.rows.max(1)
        || tiles.tile_cols > tiles.cols.max(1)
        || tiles.tile_rows.max(tiles.tile_cols) > side
        || tile > crate::chunked::tiles::MAX_TILE
    {
        return Err(CodecError::Invalid("chunked tile outside the unit or too large"));
    }
    if k == 0 || k as usize > tile {
        return Err(CodecError::Invalid("chunked k outside 1..=tile size"));
    }
    if ![1, 2, 4, 8, 32].contains(&value_bits) {
        return Err(CodecError::Invalid("chunked value width not 1, 2, 4, 8 or 32"));
    }
    let entries = tiles.entries(k as usize);
    let codebook_len = if value_bits == 32 { 0 } else { 1usize << value_bits };
    let codebook = bounded(r.take(4 * codebook_len, "chunked codebook")?)?;
    let positions = r.take(bits::packed_len(entries, tiles.position_bits()), "chunked positions")?;
    let values = r.take(bits::packed_len(entries, value_bits), "chunked values")?;
    if value_bits == 32 {
        bounded(values)?;
    } else {
        bits::unpack(values, value_bits, entries, |_, _| Ok(()))?;
    }
    Ok(ChunkedView { tiles, k, dct, value_bits, codebook, positions, values })
}

/// `bytes` as f32s if every magnitude is at most [`MAX_CHUNKED_VALUE`].
fn bounded(bytes: &[u8]) -> Result<&[u8], CodecError> {
    if f32s(bytes).all(|v| v.abs() <= MAX_CHUNKED_VALUE) {
        Ok(bytes)
    } else {
        Err(CodecError::Invalid("chunked value not finite or above 1e30 in magnitude"))
    }
}

/// The largest magnitude a chunked value may have: the inverse DCT of a
/// tile (at most 2^16 coefficients, basis entries below √2) and the
/// senders' sums (at most 32767 workers) of such values stay finite.
pub const MAX_CHUNKED_VALUE: f32 = 1e30;

impl ChunkedView<'_> {
    /// Calls `f` with every entry's position, checking that each tile's
    /// ascend strictly and stay inside the tile.
    pub fn positions(&self, mut f: impl FnMut(u16)) -> Result<(), CodecError> {
        let (t, k) = (&self.tiles, self.k as usize);
        let (mut tile, mut left, mut next_min, mut size) = (0, 0, 0u32, 0u32);
        bits::unpack(self.positions, t.position_bits(), t.entries(k), |_, p| {
            while left == 0 {
                let (_, _, h, w) = t.tile(tile);
                (left, next_min, size) = (t.k_of(tile, k), 0, (h * w) as u32);
                tile += 1;
            }
            if p < next_min || p >= size {
                return Err(CodecError::Invalid("chunked positions not ascending inside their tile"));
            }
            (next_min, left) = (p + 1, left - 1);
            f(p as u16);
            Ok(())
        })
    }
}

/// 4-bit codes packed two a byte, low nibble first.
pub(super) fn nibbles(codes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    codes.iter().flat_map(|&b| [b & 15, b >> 4])
}

/// Calls `f` with each of a blockwise message's `n` codes (4-bit codes low
/// nibble first).
pub(super) fn for_each_code(codebook: BlockCodebook, codes: &[u8], n: usize, mut f: impl FnMut(u8)) {
    if codebook.bits() == 8 {
        codes.iter().for_each(|&c| f(c));
    } else {
        nibbles(codes).take(n).for_each(f);
    }
}

/// A QSGD message's norms and codes, sized and checked: levels in
/// 1..=MAX_LEVELS, a nonzero block. The norms and codes themselves are
/// checked where they are decoded.
fn qsgd<'a>(r: &mut Reader<'a>, n: usize) -> Result<View<'a>, CodecError> {
    let levels = r.u32("qsgd levels")?;
    let block = r.u32("qsgd block")?;
    if levels == 0 || levels > crate::quantize::qsgd::MAX_LEVELS {
        return Err(CodecError::Invalid("qsgd levels outside 1..=32767"));
    }
    if block == 0 {
        return Err(CodecError::Invalid("qsgd block size 0"));
    }
    let nb = n.div_ceil(block as usize);
    let norms = r.take(nb * 4, "qsgd norms")?;
    let packed = r.take(bits::packed_len(n, bits::width_for(2 * levels)), "qsgd levels")?;
    Ok(View::Qsgd { levels, block, norms, packed })
}

/// A low-rank message's factors, checked: the shape covers `len` exactly,
/// the rank fits it, and every value is finite.
fn low_rank<'a>(r: &mut Reader<'a>, len: u32) -> Result<View<'a>, CodecError> {
    let (rows, cols, rank) = (r.u32("low-rank rows")?, r.u32("low-rank cols")?, r.u32("low-rank rank")?);
    if u64::from(rows) * u64::from(cols) != u64::from(len) {
        return Err(CodecError::Invalid("low-rank shape does not cover the unit"));
    }
    if rank == 0 || rank > rows.min(cols) {
        return Err(CodecError::Invalid("low-rank rank outside 1..=min(rows, cols)"));
    }
    let p = r.take(rows as usize * rank as usize * 4, "low-rank P")?;
    let q = r.take(cols as usize * rank as usize * 4, "low-rank Q")?;
    if f32s(p).chain(f32s(q)).any(|v| !v.is_finite()) {
        return Err(CodecError::Invalid("non-finite low-rank factor"));
    }
    // Finite factors can still multiply past f32: every element of P Qᵀ is
    // at most Σ_k max|P[·,k]| · max|Q[·,k]|; refuse when that bound (with
    // room for rounding) is not below f32::MAX, so that what decodes is finite.
    // Column k of a row-major `n × rank` factor is every rank-th value from k (no allocation:
    // decoding runs every step).
    let column_max = |m: &[u8], k: usize| {
        f32s(m).skip(k).step_by(rank as usize).fold(0.0f64, |a, v| a.max(f64::from(v.abs())))
    };
    let bound: f64 = (0..rank as usize).map(|k| column_max(p, k) * column_max(q, k)).sum();
    if bound >= f64::from(f32::MAX) / 2.0 {
        return Err(CodecError::Invalid("low-rank factors whose product overflows f32"));
    }
    Ok(View::LowRank { rows, cols, rank, p, q })
}

/// `bytes` as little-endian f32s if every one is finite. Element payloads
/// are checked like scalars: an infinity or NaN from one worker would reach
/// every replica, and a NaN's payload bits do not survive a decode and
/// re-encode (a signalling NaN comes back quiet), so the format would not be
/// canonical.
fn finite_f32s<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a [u8], CodecError> {
    if f32s(bytes).all(f32::is_finite) {
        Ok(bytes)
    } else {
        Err(CodecError::Invalid(what))
    }
}

/// `bytes` as little-endian f16s if every one is finite (exponent bits not all set).
fn finite_f16s<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a [u8], CodecError> {
    if u16s(bytes).all(|h| h & 0x7c00 != 0x7c00) {
        Ok(bytes)
    } else {
        Err(CodecError::Invalid(what))
    }
}

pub(super) fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(super) fn u16s(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// Calls `f` with each sparse index, checking that they ascend strictly and
/// stay below `len`.
pub(super) fn for_each_index(
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

pub(super) fn sparse_values(wire: SparseWire, bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    let (a, b) = match wire.values {
        ValueEncoding::F32 => (Some(f32s(bytes)), None),
        ValueEncoding::F16 => (None, Some(u16s(bytes).map(|h| half::f16::from_bits(h).to_f32()))),
    };
    a.into_iter().flatten().chain(b.into_iter().flatten())
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

pub(super) fn exactly_one(bytes: &[u8]) -> Result<(Header, View<'_>), CodecError> {
    let (h, view, rest) = parse(bytes)?;
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    Ok((h, view))
}
