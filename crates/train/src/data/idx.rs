//! The IDX format of MNIST and Fashion-MNIST: big-endian u32 magic
//! (0x00000803 images, 0x00000801 labels), big-endian u32 dimensions, then
//! raw u8 data. Raw or gzip-compressed. Every length is checked; a truncated
//! or wrong file is an error naming it, never a panic or a short dataset.

use std::io::Read;
use std::path::Path;

use super::DataError;

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;

/// Reads a whole file, un-gzipping it if its name ends in `.gz`.
pub(super) fn read_maybe_gz(path: &Path) -> Result<Vec<u8>, DataError> {
    let io = |source| DataError::Io { path: path.to_path_buf(), source };
    let raw = std::fs::read(path).map_err(io)?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| DataError::corrupt(path, format!("not a valid gzip file ({e})")))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Images: returns (pixels, count, rows, cols).
pub(super) fn parse_images(bytes: &[u8], path: &Path) -> Result<(Vec<u8>, usize, usize, usize), DataError> {
    let magic = be_u32(bytes, 0).ok_or_else(|| DataError::corrupt(path, "shorter than an IDX header"))?;
    if magic != IMAGES_MAGIC {
        return Err(DataError::corrupt(
            path,
            format!("magic {magic:#010x} is not an IDX image file (0x00000803)"),
        ));
    }
    let dims: Vec<usize> = (0..3)
        .map(|i| be_u32(bytes, 4 + 4 * i).map(|v| v as usize))
        .collect::<Option<_>>()
        .ok_or_else(|| DataError::corrupt(path, "truncated IDX header"))?;
    let (n, rows, cols) = (dims[0], dims[1], dims[2]);
    let want = n.checked_mul(rows).and_then(|v| v.checked_mul(cols)).and_then(|v| v.checked_add(16));
    if want != Some(bytes.len()) {
        return Err(DataError::corrupt(
            path,
            format!("header says {n} images of {rows}×{cols} but the file has {} bytes", bytes.len()),
        ));
    }
    Ok((bytes[16..].to_vec(), n, rows, cols))
}

/// Labels: returns one u8 per example.
pub(super) fn parse_labels(bytes: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    let magic = be_u32(bytes, 0).ok_or_else(|| DataError::corrupt(path, "shorter than an IDX header"))?;
    if magic != LABELS_MAGIC {
        return Err(DataError::corrupt(
            path,
            format!("magic {magic:#010x} is not an IDX label file (0x00000801)"),
        ));
    }
    let n = be_u32(bytes, 4).ok_or_else(|| DataError::corrupt(path, "truncated IDX header"))? as usize;
    if n.checked_add(8) != Some(bytes.len()) {
        return Err(DataError::corrupt(
            path,
            format!("header says {n} labels but the file has {} bytes", bytes.len()),
        ));
    }
    Ok(bytes[8..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn images_file(n: u32, r: u32, c: u32, body: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [IMAGES_MAGIC, n, r, c] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend(std::iter::repeat_n(7u8, body));
        b
    }

    #[test]
    fn valid_and_truncated_files() {
        let p = Path::new("x");
        let ok = images_file(2, 3, 4, 24);
        let (px, n, r, c) = parse_images(&ok, p).unwrap();
        assert_eq!((px.len(), n, r, c), (24, 2, 3, 4));
        let short = images_file(2, 3, 4, 23);
        assert!(parse_images(&short, p).unwrap_err().to_string().contains("header says 2 images"));
        assert!(parse_labels(&ok, p).unwrap_err().to_string().contains("not an IDX label file"));
        let mut labels = LABELS_MAGIC.to_be_bytes().to_vec();
        labels.extend_from_slice(&3u32.to_be_bytes());
        labels.extend_from_slice(&[1, 2, 3]);
        assert_eq!(parse_labels(&labels, p).unwrap(), [1, 2, 3]);
        assert!(parse_labels(&labels[..10], p).is_err());
        // Dimensions whose product overflows are rejected, not allocated.
        assert!(parse_images(&images_file(u32::MAX, u32::MAX, u32::MAX, 0), p).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), magic_ok in any::<bool>()) {
            let mut b = bytes;
            if magic_ok && b.len() >= 4 {
                b[..4].copy_from_slice(&IMAGES_MAGIC.to_be_bytes());
            }
            let _ = parse_images(&b, Path::new("fuzz"));
            let _ = parse_labels(&b, Path::new("fuzz"));
        }
    }
}
