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
//! Qsgd        levels u32 | block u32 | ceil(len/block) × f32 norms |
//!             (level + levels) in ceil(log2(2·levels+1)) bits each
//! Sign        positive f32 | negative f32 | ceil(len/8) bytes of sign bits
//! LowRank     rows u32 | cols u32 | rank u32 | rows·rank f32 (P) | cols·rank f32 (Q);
//!             len = rows·cols, 1 ≤ rank ≤ min(rows, cols), every value finite
//! Natural     len bytes: sign bit 0x80 | k in 0..=127, the value ±2^(k − 109) (k = 0: zero;
//!             0x80 is invalid)
//! Blockwise   block u32 | ceil(len/block) × f32 block maxima (finite, ≥ 0) | codes of the
//!             codebook the flags name (0: dynamic tree, one byte each; 1: FP4 E2M1,
//!             2: FP4 E3M0, 4 bits each, low nibble first; the code 0b1000 is invalid)
//! Chunked    rows u32 | cols u32 | tile_rows u32 | tile_cols u32 | k u32 | value_bits u32 |
//!             2^value_bits × f32 codebook (none at 32) | per tile min(k, its size) positions in
//!             it, strictly ascending, ceil(log2(tile_rows·tile_cols)) bits each | per entry a code
//!             of value_bits, or an f32 at 32; flag 0x01: the entries are DCT coefficients
//! ```
//! All integers and floats are little-endian; padding bits are zero.
//!
//! Decoding trusts nothing: every length, count, index, code and scalar is
//! checked, errors are returned (never panics), buffers grow only in
//! proportion to the bytes received, and [`accumulate`] validates a whole
//! message before it touches the output.

pub mod bits;
mod decode;
mod encode;
mod error;
pub mod harness;
mod parse;
mod ternary;

pub use decode::{accumulate, decode};
pub use encode::{encode, encoded_len};
pub use error::{CodecError, Header, HEADER_LEN, MAGIC, MAX_WORKERS, VERSION};
pub use parse::{read_header, split_first, ternary_scale};
