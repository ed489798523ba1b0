//! Ternary code layouts on the wire: 2-bit (4 per byte) and base-3 (5 trits
//! per byte, `Σ t_i·3^i` with trit 0 = 0, 1 = +1, 2 = −1).

use super::error::CodecError;
use crate::message::{zip_ternary_codes, TernaryPacking};

pub(super) fn wire_len(len: usize, packing: TernaryPacking) -> usize {
    match packing {
        TernaryPacking::TwoBit => len.div_ceil(4),
        TernaryPacking::Base3 => len.div_ceil(5),
    }
}

/// Rejects the unused code `0b11` and nonzero padding in 2-bit codes for `len` elements.
pub(super) fn check_two_bit(codes: &[u8], len: usize) -> Result<(), CodecError> {
    // A byte holds a 0b11 pair iff some even bit and the odd bit above it are both set.
    let bad = codes.iter().fold(0u8, |acc, &b| acc | (b & (b >> 1) & 0x55));
    if bad != 0 {
        return Err(CodecError::Invalid("ternary code 0b11"));
    }
    let used = len % 4;
    if used != 0 && codes.last().is_some_and(|&b| b >> (2 * used) != 0) {
        return Err(CodecError::Invalid("nonzero padding bits"));
    }
    Ok(())
}

/// Appends the base-3 form of `len` 2-bit codes.
pub(super) fn to_base3(packed: &[u8], len: usize, out: &mut Vec<u8>) {
    let mut byte = 0u8;
    let mut pow = 1u8;
    let mut in_byte = 0;
    // `()` per element: the crate's one unpacking loop drives the packing
    // without a buffer (a `Vec<()>` never allocates).
    zip_ternary_codes(packed, &mut vec![(); len], |(), code| {
        // 2-bit code 0b00/0b01/0b10 is already the trit 0/1/2.
        byte += code as u8 * pow;
        in_byte += 1;
        if in_byte == 5 {
            out.push(byte);
            (byte, pow, in_byte) = (0, 1, 0);
        } else {
            pow *= 3;
        }
    });
    if in_byte != 0 {
        out.push(byte);
    }
}

/// The trits of one base-3 byte (`b < 243`).
#[inline]
fn trits(mut b: u8) -> [u8; 5] {
    let mut t = [0u8; 5];
    for slot in &mut t {
        *slot = b % 3;
        b /= 3;
    }
    t
}

/// Checks base-3 bytes for `len` elements: every byte below 3^5 and the last,
/// partial one below 3^(len % 5) (unused trits zero).
fn check_base3(codes: &[u8], len: usize) -> Result<(), CodecError> {
    if codes.iter().any(|&b| b >= 243) {
        return Err(CodecError::Invalid("base-3 byte above 242"));
    }
    let used = len % 5;
    if used != 0 && codes.last().is_some_and(|&b| u32::from(b) >= 3u32.pow(used as u32)) {
        return Err(CodecError::Invalid("nonzero padding trits"));
    }
    Ok(())
}

/// Converts base-3 codes for `len` elements into 2-bit packing (appended to `out`).
pub(super) fn from_base3(codes: &[u8], len: usize, out: &mut Vec<u8>) -> Result<(), CodecError> {
    check_base3(codes, len)?;
    let start = out.len();
    out.resize(start + len.div_ceil(4), 0);
    let packed = &mut out[start..];
    for (g, &b) in codes.iter().enumerate() {
        for (t, trit) in trits(b).into_iter().enumerate() {
            let j = g * 5 + t;
            if j < len {
                packed[j / 4] |= trit << (2 * (j % 4));
            }
        }
    }
    Ok(())
}

/// `out[j] += w · code_j` for base-3 codes; validates first.
pub(super) fn add_base3(codes: &[u8], w: f32, out: &mut [f32]) -> Result<(), CodecError> {
    check_base3(codes, out.len())?;
    let table = [0.0, w, -w];
    for (o, &b) in out.chunks_mut(5).zip(codes) {
        for (o, t) in o.iter_mut().zip(trits(b)) {
            *o += table[t as usize];
        }
    }
    Ok(())
}
