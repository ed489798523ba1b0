//! Fixed-width unsigned integers packed LSB-first into bytes, and LEB128
//! varints. Used for the parameter server's integer sums, QSGD levels and
//! delta-coded sparse indices.

use super::error::CodecError;

/// Bits needed to hold every value in `0..=max`: `ceil(log2(max + 1))`, at least 1.
pub fn width_for(max: u32) -> u32 {
    (32 - max.leading_zeros()).max(1)
}

/// Bytes that `count` values of `width` bits occupy.
pub fn packed_len(count: usize, width: u32) -> usize {
    (count as u64 * u64::from(width)).div_ceil(8) as usize
}

/// Appends `values` (each `< 2^width`, `width <= 32`) packed LSB-first.
pub fn pack(values: impl Iterator<Item = u32>, width: u32, out: &mut Vec<u8>) {
    let mut acc = 0u64;
    let mut nbits = 0u32;
    for v in values {
        debug_assert!(width == 32 || v >> width == 0);
        acc |= u64::from(v) << nbits;
        nbits += width;
        while nbits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            nbits -= 8;
        }
    }
    if nbits > 0 {
        out.push(acc as u8);
    }
}

/// Calls `f(i, value)` for the `count` values of `width` bits in `bytes`,
/// which must be exactly [`packed_len`] long with zero padding bits.
pub fn unpack(
    bytes: &[u8],
    width: u32,
    count: usize,
    mut f: impl FnMut(usize, u32) -> Result<(), CodecError>,
) -> Result<(), CodecError> {
    if bytes.len() != packed_len(count, width) {
        return Err(CodecError::Length {
            what: "packed integers",
            expected: packed_len(count, width),
            got: bytes.len(),
        });
    }
    let mask = if width == 32 { u64::from(u32::MAX) } else { (1u64 << width) - 1 };
    let mut acc = 0u64;
    let mut nbits = 0u32;
    let mut next = bytes.iter();
    for i in 0..count {
        while nbits < width {
            let b = next.next().expect("length checked above");
            acc |= u64::from(*b) << nbits;
            nbits += 8;
        }
        f(i, (acc & mask) as u32)?;
        acc >>= width;
        nbits -= width;
    }
    if acc != 0 {
        return Err(CodecError::Invalid("nonzero padding bits"));
    }
    Ok(())
}

/// Appends `v` as an LEB128 varint.
pub fn put_varint(mut v: u32, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads one varint from the front of `bytes`; returns it and the bytes used.
/// Rejects truncated, overlong (more than 5 bytes), out-of-range and
/// non-minimal encodings (a trailing zero group, as in `80 00` for 0), so
/// every value has exactly one encoding and the wire format is canonical.
pub fn get_varint(bytes: &[u8]) -> Result<(u32, usize), CodecError> {
    let mut v = 0u32;
    for (i, &b) in bytes.iter().enumerate().take(5) {
        let part = u32::from(b & 0x7f);
        if i == 4 && part > 0x0f {
            return Err(CodecError::Invalid("varint exceeds 32 bits"));
        }
        v |= part << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(CodecError::Invalid("non-minimal varint"));
            }
            return Ok((v, i + 1));
        }
    }
    if bytes.len() >= 5 {
        Err(CodecError::Invalid("varint longer than 5 bytes"))
    } else {
        Err(CodecError::Invalid("truncated varint"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        assert_eq!(width_for(0), 1);
        assert_eq!(width_for(1), 1);
        assert_eq!(width_for(2), 2);
        assert_eq!(width_for(4), 3); // N = 2: 2N = 4 -> 3 bits
        assert_eq!(width_for(8), 4); // N = 4
        assert_eq!(width_for(14), 4); // N = 7
        assert_eq!(width_for(16), 5); // N = 8
        assert_eq!(width_for(30), 5); // N = 15
        assert_eq!(width_for(512), 10); // QSGD s = 256
        assert_eq!(width_for(u32::MAX), 32);
    }

    #[test]
    fn pack_round_trip_all_widths() {
        for width in 1..=32u32 {
            let max = if width == 32 { u32::MAX } else { (1 << width) - 1 };
            let vals: Vec<u32> = (0..37u32).map(|i| i.wrapping_mul(2_654_435_761) & max).collect();
            let mut buf = Vec::new();
            pack(vals.iter().copied(), width, &mut buf);
            assert_eq!(buf.len(), packed_len(vals.len(), width));
            let mut got = Vec::new();
            unpack(&buf, width, vals.len(), |_, v| {
                got.push(v);
                Ok(())
            })
            .unwrap();
            assert_eq!(got, vals, "width {width}");
        }
    }

    #[test]
    fn varints() {
        for v in [0, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut buf = Vec::new();
            put_varint(v, &mut buf);
            assert_eq!(get_varint(&buf).unwrap(), (v, buf.len()));
        }
        assert!(get_varint(&[0x80]).is_err());
        assert!(get_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]).is_err());
        assert!(get_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).is_err());
        // Padded encodings of 0 and 1 are refused: one encoding per value.
        assert!(get_varint(&[0x80, 0x00]).is_err());
        assert!(get_varint(&[0x81, 0x80, 0x00]).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        /// Whatever decodes re-encodes to the same bytes.
        #[test]
        fn varints_are_canonical(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..7)) {
            if let Ok((v, n)) = get_varint(&bytes) {
                let mut again = Vec::new();
                put_varint(v, &mut again);
                proptest::prop_assert_eq!(&again[..], &bytes[..n]);
            }
        }
    }
}
