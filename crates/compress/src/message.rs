//! The in-memory form of one compressed unit.
//!
//! A [`Message`] is what a [`Compressor`](crate::Compressor) writes and what the
//! [codec](crate::codec) serializes. Its payload is already in wire precision
//! (ternary codes packed 2 bits per element, f16-rounded values where the wire
//! carries f16), so encoding is a copy and error feedback sees exactly what the
//! other workers will decode. Buffers are reused across steps: a compressor
//! calls one of the `*_mut` accessors, which switches the variant only when the
//! kind changes (the first call), so steady-state compression does not allocate.

use serde::{Deserialize, Serialize};

/// How the 2-bit-per-element ternary codes are laid out on the wire. In memory
/// codes are always 2-bit packed: `0b00` = 0, `0b01` = +1, `0b10` = −1,
/// element `j` in bits `2*(j%4)..` of byte `j/4`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TernaryPacking {
    /// 4 codes per byte (2 bits each): the practical packing.
    #[default]
    TwoBit,
    /// 5 trits per byte (3^5 = 243 ≤ 256): 1.6 bits per element, close to log2(3).
    Base3,
}

/// How sparse indices are written on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexEncoding {
    /// 4 bytes per index.
    #[default]
    U32,
    /// LEB128 varints of the gaps between consecutive (ascending) indices.
    Varint,
}

/// How sparse values are written on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValueEncoding {
    #[default]
    F32,
    /// IEEE half precision; the compressor rounds the values it keeps, so the
    /// residual of error feedback accounts for the rounding.
    F16,
}

/// The wire options of a sparse message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SparseWire {
    pub indices: IndexEncoding,
    pub values: ValueEncoding,
}

/// Uncompressed f32 values (dense baseline, excluded units).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DenseMessage {
    pub values: Vec<f32>,
}

/// IEEE half-precision bit patterns, one per element.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HalfMessage {
    pub values: Vec<u16>,
}

/// TernGrad's message: `len` codes in {−1, 0, +1} times one scaler.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TernaryMessage {
    pub len: usize,
    pub scale: f32,
    /// Wire layout chosen by the compressor; memory layout is always 2-bit.
    pub packing: TernaryPacking,
    /// `ceil(len / 4)` bytes, 2 bits per element; unused high bits are zero.
    pub packed: Vec<u8>,
}

/// The parameter server's aggregate of N ternary messages that shared one
/// scaler: integer sums `m_j` in `−N..=N` (ALGORITHMS.md §1.2). It decodes to
/// `scale * m_j / workers`, the average gradient.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TernarySumMessage {
    pub scale: f32,
    pub workers: u32,
    pub sums: Vec<i16>,
}

/// A sparse vector of logical length `len`: strictly ascending indices and
/// their values (in wire precision).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseMessage {
    pub len: usize,
    pub wire: SparseWire,
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl SparseMessage {
    /// Rounds the values to what the wire carries, so the sender's error
    /// feedback keeps exactly what the receivers do not get. On the f16
    /// wire a magnitude past f16's largest finite value (65504) saturates
    /// to it instead of becoming ±inf: the clipped amount stays in the
    /// residual rather than an infinity reaching every worker.
    pub fn round_to_wire(&mut self) {
        if self.wire.values == ValueEncoding::F16 {
            for v in &mut self.values {
                *v = half::f16::from_f32(v.clamp(-65504.0, 65504.0)).to_f32();
            }
        }
    }
}

/// QSGD's message: per block of `block` elements one f32 norm, per element a
/// signed level in `−levels..=levels`; it decodes to `norm * level / levels`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QsgdMessage {
    pub levels: u32,
    pub block: u32,
    pub norms: Vec<f32>,
    pub codes: Vec<i16>,
}

/// 1-bit SGD's message: a sign bit per element and the two reconstruction
/// values (mean of the non-negative inputs, mean of the negative ones).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignMessage {
    pub len: usize,
    pub positive: f32,
    pub negative: f32,
    /// Bit `j % 8` of byte `j / 8` is 1 when element `j` was ≥ 0.
    pub bits: Vec<u8>,
}

/// A rank-r approximation P Qᵀ of a `rows × cols` matrix (PowerSGD's
/// aggregate): P is `rows × rank`, Q is `cols × rank`, both row-major. It
/// decodes to the matrix row-major, `rows · cols` elements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LowRankMessage {
    pub rows: u32,
    pub cols: u32,
    pub rank: u32,
    pub p: Vec<f32>,
    pub q: Vec<f32>,
}

/// Natural compression's message: one code per element, the sign in bit 7
/// and 2^(k − 109) for k = the low 7 bits in 1..=127 (0: zero). See
/// [`natural_value`](crate::codebook::natural_value).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NaturalMessage {
    pub codes: Vec<u8>,
}

/// A blockwise quantizer's message (8-bit quantization, fp4): per block of
/// `block` elements its largest magnitude, per element a code of
/// `codebook` (one byte each in memory; 4-bit codes travel two per byte); it
/// decodes to `codebook.values()[code] · absmax`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockwiseMessage {
    pub codebook: crate::codebook::BlockCodebook,
    pub block: u32,
    pub absmax: Vec<f32>,
    pub codes: Vec<u8>,
}

/// A chunked top-k message (SparseLoCo, DeMo): the unit cut into tiles, per
/// tile its `k` largest entries (all of a smaller tile) by their in-tile
/// positions, strictly ascending, and values: `codebook[code]` for
/// `value_bits` of 1 to 8, f32 `values` for 32. With `dct` the entries are
/// coefficients of each tile's 2-D DCT-II and decode through its inverse.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChunkedMessage {
    pub tiles: crate::chunked::Tiles,
    pub k: u32,
    pub dct: bool,
    pub value_bits: u32,
    pub codebook: Vec<f32>,
    pub positions: Vec<u16>,
    pub codes: Vec<u8>,
    pub values: Vec<f32>,
}

impl ChunkedMessage {
    /// The value of entry `e`.
    #[inline]
    pub fn value(&self, e: usize) -> f32 {
        if self.value_bits == 32 {
            self.values[e]
        } else {
            self.codebook[usize::from(self.codes[e])]
        }
    }

    /// `out += weight · decode(self)`.
    pub fn add_to(&self, weight: f32, out: &mut [f32]) {
        let bases = self.dct.then(|| crate::chunked::scatter::Bases::new(&self.tiles));
        let k = self.k as usize;
        crate::chunked::scatter::add_entries(
            &self.tiles,
            k,
            bases.as_ref(),
            &self.positions,
            |e| self.value(e),
            weight,
            out,
        );
    }
}

/// One compressed unit (a tensor, or the whole flattened model).
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Dense(DenseMessage),
    Half(HalfMessage),
    Ternary(TernaryMessage),
    TernarySum(TernarySumMessage),
    Sparse(SparseMessage),
    Qsgd(QsgdMessage),
    Sign(SignMessage),
    LowRank(LowRankMessage),
    Natural(NaturalMessage),
    Blockwise(BlockwiseMessage),
    Chunked(ChunkedMessage),
}

/// The kind of a message, as written in the wire header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageKind {
    Dense = 1,
    Half = 2,
    Ternary = 3,
    TernarySum = 4,
    Sparse = 5,
    Qsgd = 6,
    Sign = 7,
    LowRank = 8,
    Natural = 9,
    Blockwise = 10,
    Chunked = 11,
}

impl MessageKind {
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Dense,
            2 => Self::Half,
            3 => Self::Ternary,
            4 => Self::TernarySum,
            5 => Self::Sparse,
            6 => Self::Qsgd,
            7 => Self::Sign,
            8 => Self::LowRank,
            9 => Self::Natural,
            10 => Self::Blockwise,
            11 => Self::Chunked,
            _ => return None,
        })
    }
}

impl Default for Message {
    fn default() -> Self {
        Message::Dense(DenseMessage::default())
    }
}

macro_rules! variant_mut {
    ($fn:ident, $variant:ident, $ty:ty) => {
        /// The payload of this kind, switching the variant (and dropping the old
        /// buffers) only if the message currently holds another kind.
        pub fn $fn(&mut self) -> &mut $ty {
            if !matches!(self, Message::$variant(_)) {
                *self = Message::$variant(<$ty>::default());
            }
            match self {
                Message::$variant(m) => m,
                _ => unreachable!(),
            }
        }
    };
}

impl Message {
    variant_mut!(dense_mut, Dense, DenseMessage);
    variant_mut!(half_mut, Half, HalfMessage);
    variant_mut!(ternary_mut, Ternary, TernaryMessage);
    variant_mut!(ternary_sum_mut, TernarySum, TernarySumMessage);
    variant_mut!(sparse_mut, Sparse, SparseMessage);
    variant_mut!(qsgd_mut, Qsgd, QsgdMessage);
    variant_mut!(sign_mut, Sign, SignMessage);
    variant_mut!(low_rank_mut, LowRank, LowRankMessage);
    variant_mut!(natural_mut, Natural, NaturalMessage);
    variant_mut!(blockwise_mut, Blockwise, BlockwiseMessage);
    variant_mut!(chunked_mut, Chunked, ChunkedMessage);

    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Dense(_) => MessageKind::Dense,
            Message::Half(_) => MessageKind::Half,
            Message::Ternary(_) => MessageKind::Ternary,
            Message::TernarySum(_) => MessageKind::TernarySum,
            Message::Sparse(_) => MessageKind::Sparse,
            Message::Qsgd(_) => MessageKind::Qsgd,
            Message::Sign(_) => MessageKind::Sign,
            Message::LowRank(_) => MessageKind::LowRank,
            Message::Natural(_) => MessageKind::Natural,
            Message::Blockwise(_) => MessageKind::Blockwise,
            Message::Chunked(_) => MessageKind::Chunked,
        }
    }

    /// The logical (dense) length of the unit.
    pub fn len(&self) -> usize {
        match self {
            Message::Dense(m) => m.values.len(),
            Message::Half(m) => m.values.len(),
            Message::Ternary(m) => m.len,
            Message::TernarySum(m) => m.sums.len(),
            Message::Sparse(m) => m.len,
            Message::Qsgd(m) => m.codes.len(),
            Message::Sign(m) => m.len,
            Message::LowRank(m) => m.rows as usize * m.cols as usize,
            Message::Natural(m) => m.codes.len(),
            Message::Blockwise(m) => m.codes.len(),
            Message::Chunked(m) => m.tiles.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many elements the message carries a nonzero for (sparsifiers: the
    /// selected count; quantizers: the nonzero codes; dense: the length).
    pub fn selected(&self) -> usize {
        match self {
            Message::Dense(m) => m.values.len(),
            Message::Half(m) => m.values.len(),
            Message::Ternary(m) => {
                m.packed.iter().map(|&b| (b & 0x55 | (b >> 1) & 0x55).count_ones() as usize).sum()
            }
            Message::TernarySum(m) => m.sums.iter().filter(|&&s| s != 0).count(),
            Message::Sparse(m) => m.indices.len(),
            Message::Qsgd(m) => m.codes.iter().filter(|&&c| c != 0).count(),
            Message::Sign(m) => m.len,
            Message::LowRank(m) => m.rows as usize * m.cols as usize,
            Message::Natural(m) => m.codes.iter().filter(|&&c| c != 0).count(),
            Message::Blockwise(m) => m.codes.len(),
            Message::Chunked(m) => m.positions.len(),
        }
    }

    /// `out += weight * decompress(self)`. `out.len()` must equal `self.len()`.
    ///
    /// This is the aggregation primitive: averaging N messages is N calls with
    /// `weight = 1/N` into a zeroed buffer, and error feedback's residual update
    /// is one call with `weight = -1`.
    pub fn add_to(&self, weight: f32, out: &mut [f32]) {
        assert_eq!(out.len(), self.len(), "message length differs from the buffer");
        match self {
            Message::Dense(m) => {
                for (o, v) in out.iter_mut().zip(&m.values) {
                    *o += weight * v;
                }
            }
            Message::Half(m) => {
                for (o, &v) in out.iter_mut().zip(&m.values) {
                    *o += weight * half::f16::from_bits(v).to_f32();
                }
            }
            Message::Ternary(m) => add_ternary(&m.packed, weight * m.scale, out),
            Message::TernarySum(m) => {
                let w = weight * m.scale / m.workers.max(1) as f32;
                for (o, &s) in out.iter_mut().zip(&m.sums) {
                    *o += w * f32::from(s);
                }
            }
            Message::Sparse(m) => {
                for (&i, &v) in m.indices.iter().zip(&m.values) {
                    out[i as usize] += weight * v;
                }
            }
            Message::Qsgd(m) => {
                let inv = weight / m.levels.max(1) as f32;
                let block = m.block.max(1) as usize;
                for ((o, c), &norm) in out.chunks_mut(block).zip(m.codes.chunks(block)).zip(&m.norms) {
                    let w = norm * inv;
                    for (o, &c) in o.iter_mut().zip(c) {
                        *o += w * f32::from(c);
                    }
                }
            }
            Message::Sign(m) => {
                let (p, n) = (weight * m.positive, weight * m.negative);
                for (o, &byte) in out.chunks_mut(8).zip(&m.bits) {
                    for (bit, o) in o.iter_mut().enumerate() {
                        *o += if byte >> bit & 1 == 1 { p } else { n };
                    }
                }
            }
            Message::LowRank(m) => add_low_rank(&m.p, &m.q, m.rank as usize, weight, out),
            Message::Natural(m) => {
                for (o, &c) in out.iter_mut().zip(&m.codes) {
                    *o += weight * crate::codebook::natural_value(c);
                }
            }
            Message::Blockwise(m) => {
                let codebook = m.codebook.values();
                let block = m.block.max(1) as usize;
                for ((o, c), &absmax) in out.chunks_mut(block).zip(m.codes.chunks(block)).zip(&m.absmax) {
                    let w = weight * absmax;
                    for (o, &c) in o.iter_mut().zip(c) {
                        *o += w * codebook[c as usize];
                    }
                }
            }
            Message::Chunked(m) => m.add_to(weight, out),
        }
    }

    /// `out = decompress(self)`.
    pub fn decompress_into(&self, out: &mut [f32]) {
        out.fill(0.0);
        self.add_to(1.0, out);
    }
}

/// `out += weight · P Qᵀ` for P (`rows × rank`) and Q (`cols × rank`),
/// row-major, `out` holding the `rows × cols` matrix row-major. Each element
/// sums its `rank` products in order, as a matrix product does.
pub fn add_low_rank(p: &[f32], q: &[f32], rank: usize, weight: f32, out: &mut [f32]) {
    if rank == 0 {
        return;
    }
    // Each element's dot product is summed over k in order (the device's
    // order, bit for bit), for a strip of columns at a time so the strip's
    // sums run side by side instead of one short chain after another.
    const STRIP: usize = 64;
    let cols = q.len() / rank;
    for (row, p) in out.chunks_mut(cols.max(1)).zip(p.chunks_exact(rank)) {
        for (o, q) in row.chunks_mut(STRIP).zip(q.chunks(STRIP * rank)) {
            let mut v = [0.0f32; STRIP];
            for (k, &a) in p.iter().enumerate() {
                for (v, q) in v.iter_mut().zip(q.chunks_exact(rank)) {
                    *v += a * q[k];
                }
            }
            for (o, &v) in o.iter_mut().zip(&v) {
                *o += weight * v;
            }
        }
    }
}

/// What each 2-bit ternary code means: `0b00` = 0, `0b01` = +1, `0b10` = −1
/// (`0b11` is never written; decoders reject it).
pub const TERNARY_CODE_VALUES: [i8; 4] = [0, 1, -1, 0];

/// Calls `f(&mut out[j], code_j)` for the first `out.len()` 2-bit codes of
/// `packed` (each code in `0..4`, see [`TERNARY_CODE_VALUES`]). This is the one
/// unpacking loop of the crate: decoding into floats, the parameter server's
/// integer sums, the codes for an integer allreduce and the base-3 layout all
/// go through it. It indexes nothing, so it compiles to a bounds-check-free
/// loop over whole bytes.
#[inline(always)]
pub fn zip_ternary_codes<T>(packed: &[u8], out: &mut [T], mut f: impl FnMut(&mut T, usize)) {
    let (full, tail) = out.split_at_mut(out.len() / 4 * 4);
    for (o, &b) in full.chunks_exact_mut(4).zip(packed) {
        f(&mut o[0], usize::from(b & 3));
        f(&mut o[1], usize::from(b >> 2 & 3));
        f(&mut o[2], usize::from(b >> 4 & 3));
        f(&mut o[3], usize::from(b >> 6));
    }
    if let Some(&b) = packed.get(full.len() / 4) {
        for (j, o) in tail.iter_mut().enumerate() {
            f(o, usize::from(b >> (2 * j) & 3));
        }
    }
}

/// `out[j] += w * code_j` for 2-bit packed ternary codes. Shared by
/// [`Message::add_to`] and the codec's fused decode-and-aggregate.
#[inline]
pub(crate) fn add_ternary(packed: &[u8], w: f32, out: &mut [f32]) {
    let table = [0.0, w, -w, 0.0];
    zip_ternary_codes(packed, out, |o, c| *o += table[c]);
}

impl TernaryMessage {
    /// Writes the codes as integers in {−1, 0, +1} into `out` (`len` of them):
    /// the form an integer allreduce sums.
    pub fn codes_into<T: From<i8>>(&self, out: &mut [T]) {
        assert_eq!(out.len(), self.len, "code buffer length differs from the message");
        zip_ternary_codes(&self.packed, out, |o, c| *o = T::from(TERNARY_CODE_VALUES[c]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ternary_selected_counts_nonzero_codes() {
        let m = Message::Ternary(TernaryMessage {
            len: 5,
            scale: 1.0,
            packing: TernaryPacking::TwoBit,
            // codes: +1, 0, -1, +1 | -1
            packed: vec![0b01_10_00_01, 0b10],
        });
        assert_eq!(m.selected(), 4);
        let mut out = vec![0.0; 5];
        m.decompress_into(&mut out);
        assert_eq!(out, [1.0, 0.0, -1.0, 1.0, -1.0]);
        let Message::Ternary(t) = &m else { unreachable!() };
        let mut codes = [7i32; 5];
        t.codes_into(&mut codes);
        assert_eq!(codes, [1, 0, -1, 1, -1]);
    }

    #[test]
    fn sign_message_decompresses_to_means() {
        let m = Message::Sign(SignMessage {
            len: 10,
            positive: 2.0,
            negative: -3.0,
            bits: vec![0b0000_0101, 0b10],
        });
        let mut out = vec![0.0; 10];
        m.decompress_into(&mut out);
        assert_eq!(out, [2.0, -3.0, 2.0, -3.0, -3.0, -3.0, -3.0, -3.0, -3.0, 2.0]);
    }

    #[test]
    fn accessor_reuses_buffers_of_same_kind() {
        let mut m = Message::default();
        m.sparse_mut().indices.reserve(100);
        let cap = m.sparse_mut().indices.capacity();
        assert_eq!(m.sparse_mut().indices.capacity(), cap);
        assert_eq!(m.kind(), MessageKind::Sparse);
    }
}
