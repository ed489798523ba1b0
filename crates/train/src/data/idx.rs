//! The IDX format of MNIST and Fashion-MNIST: big-endian u32 magic
//! (`0x0000080D`: unsigned bytes, D dimensions), big-endian u32 dimensions,
//! then raw u8 data. Images are 3-D (`count × rows × cols`, one channel) or
//! 4-D (`count × channels × rows × cols`, or `count × rows × cols ×
//! channels` when the configuration says `image_layout = "hwc"`); labels are
//! 1-D. Raw or gzip-compressed. Every length is checked; a truncated or wrong
//! file is an error naming it, never a panic or a short dataset.

use std::io::Read;
use std::path::Path;

use super::error::DataError;
use crate::config::ImageLayout;

const IMAGES_MAGIC: u32 = 0x0000_0803;
const IMAGES_4D_MAGIC: u32 = 0x0000_0804;
const LABELS_MAGIC: u32 = 0x0000_0801;

/// Images parsed from an IDX file: pixels in `count × channels × rows × cols` order.
#[derive(Debug, PartialEq)]
pub(super) struct IdxImages {
    pub pixels: Vec<u8>,
    pub count: usize,
    /// `[channels, rows, cols]`.
    pub shape: [usize; 3],
}

/// Reads a whole file, un-gzipping it if its name ends in `.gz`.
pub(super) fn read_maybe_gz(path: &Path) -> Result<Vec<u8>, DataError> {
    let io = |source| DataError::Io { path: path.to_path_buf(), source };
    let raw = std::fs::read(path).map_err(io)?;
    if path.extension().is_some_and(|e| e == "gz") {
        gunzip(&raw, path)
    } else {
        Ok(raw)
    }
}

/// The content of a gzip file read from `path`, refused when it would
/// inflate past half the machine's available memory (a gzip bomb, or a file
/// far too large for this machine) instead of aborting on allocation.
pub(super) fn gunzip(raw: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    let limit = crate::machine::available_memory_bytes().map_or(u64::MAX, |b| (b / 2.0) as u64);
    gunzip_at_most(raw, path, limit)
}

fn gunzip_at_most(raw: &[u8], path: &Path, limit: u64) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| DataError::corrupt(path, format!("not a valid gzip file ({e})")))?;
    if out.len() as u64 > limit {
        return Err(DataError::corrupt(
            path,
            format!(
                "inflates past {:.1} GB, half the memory this machine has available: a damaged or hostile file, or one too large for this machine",
                limit as f64 / 1e9
            ),
        ));
    }
    Ok(out)
}

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Images: 3-D (one channel) or 4-D IDX, returned in CHW order.
pub(super) fn parse_images(bytes: &[u8], path: &Path, layout: ImageLayout) -> Result<IdxImages, DataError> {
    let magic = be_u32(bytes, 0).ok_or_else(|| DataError::corrupt(path, "shorter than an IDX header"))?;
    let ndims = match magic {
        IMAGES_MAGIC => 3,
        IMAGES_4D_MAGIC => 4,
        _ => {
            return Err(DataError::corrupt(
                path,
                format!(
                    "magic {magic:#010x} is not an IDX image file (0x00000803, or 0x00000804 with channels)"
                ),
            ))
        }
    };
    let dims: Vec<usize> = (0..ndims)
        .map(|i| be_u32(bytes, 4 + 4 * i).map(|v| v as usize))
        .collect::<Option<_>>()
        .ok_or_else(|| DataError::corrupt(path, "truncated IDX header"))?;
    let header = 4 + 4 * ndims;
    let (n, shape) = match (ndims, layout) {
        (3, _) => (dims[0], [1, dims[1], dims[2]]),
        (_, ImageLayout::Chw) => (dims[0], [dims[1], dims[2], dims[3]]),
        (_, ImageLayout::Hwc) => (dims[0], [dims[3], dims[1], dims[2]]),
    };
    // One image's size on its own: with a count of 0 the file's product is 0
    // whatever the other dims, which must still not overflow.
    if shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_none() {
        return Err(DataError::corrupt(
            path,
            format!("images of {}×{}×{} pixels are past any memory", shape[0], shape[1], shape[2]),
        ));
    }
    let want = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).and_then(|v| v.checked_add(header));
    if want != Some(bytes.len()) {
        return Err(DataError::corrupt(
            path,
            format!(
                "header says {n} images of {} but the file has {} bytes",
                dims[1..].iter().map(usize::to_string).collect::<Vec<_>>().join("×"),
                bytes.len()
            ),
        ));
    }
    if shape.contains(&0) {
        return Err(DataError::corrupt(
            path,
            format!("images of {}×{}×{} hold no pixels", shape[0], shape[1], shape[2]),
        ));
    }
    let body = &bytes[header..];
    let pixels = match (ndims, layout) {
        (4, ImageLayout::Hwc) => hwc_to_chw(body, n, shape),
        _ => body.to_vec(),
    };
    Ok(IdxImages { pixels, count: n, shape })
}

/// Reorders `n` images of `[c, h, w]` from `h × w × c` to `c × h × w`.
fn hwc_to_chw(body: &[u8], n: usize, [c, h, w]: [usize; 3]) -> Vec<u8> {
    let size = c * h * w;
    let mut out = vec![0u8; body.len()];
    for (src, dst) in body.chunks_exact(size).zip(out.chunks_exact_mut(size)).take(n) {
        for (p, px) in src.chunks_exact(c).enumerate() {
            for (ch, &v) in px.iter().enumerate() {
                dst[ch * h * w + p] = v;
            }
        }
    }
    out
}

/// The bytes of an IDX image file: 3-D for one channel, 4-D
/// (`count × channels × rows × cols`) otherwise. `pixels` is in CHW order.
pub fn images_file(pixels: &[u8], count: usize, [c, h, w]: [usize; 3]) -> Vec<u8> {
    let dims: Vec<usize> = if c == 1 { vec![count, h, w] } else { vec![count, c, h, w] };
    let magic = if c == 1 { IMAGES_MAGIC } else { IMAGES_4D_MAGIC };
    let mut out = magic.to_be_bytes().to_vec();
    for d in dims {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    out.extend_from_slice(pixels);
    out
}

/// The bytes of an IDX label file.
pub fn labels_file(labels: &[u8]) -> Vec<u8> {
    let mut out = LABELS_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&(labels.len() as u32).to_be_bytes());
    out.extend_from_slice(labels);
    out
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
        let img = parse_images(&ok, p, ImageLayout::Chw).unwrap();
        assert_eq!((img.pixels.len(), img.count, img.shape), (24, 2, [1, 3, 4]));
        let short = images_file(2, 3, 4, 23);
        assert!(parse_images(&short, p, ImageLayout::Chw)
            .unwrap_err()
            .to_string()
            .contains("header says 2 images"));
        assert!(parse_labels(&ok, p).unwrap_err().to_string().contains("not an IDX label file"));
        let mut labels = LABELS_MAGIC.to_be_bytes().to_vec();
        labels.extend_from_slice(&3u32.to_be_bytes());
        labels.extend_from_slice(&[1, 2, 3]);
        assert_eq!(parse_labels(&labels, p).unwrap(), [1, 2, 3]);
        assert!(parse_labels(&labels[..10], p).is_err());
        // Dimensions whose product overflows are rejected, not allocated.
        assert!(parse_images(&images_file(u32::MAX, u32::MAX, u32::MAX, 0), p, ImageLayout::Chw).is_err());
        // Images without pixels are an error, not a division by zero later.
        assert!(parse_images(&images_file(2, 0, 4, 0), p, ImageLayout::Chw)
            .unwrap_err()
            .to_string()
            .contains("no pixels"));
    }

    #[test]
    fn a_gzip_that_inflates_past_the_limit_is_refused() {
        use std::io::Write;
        // 10 MB of zeros compress to about 10 KB.
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![0u8; 10_000_000]).unwrap();
        let bomb = e.finish().unwrap();
        assert!(bomb.len() < 20_000);
        let err = gunzip_at_most(&bomb, Path::new("x.gz"), 1_000_000).unwrap_err().to_string();
        assert!(err.contains("inflates past"), "{err}");
        assert_eq!(gunzip_at_most(&bomb, Path::new("x.gz"), 10_000_000).unwrap().len(), 10_000_000);
    }

    #[test]
    fn an_empty_file_of_overflowing_images_is_an_error() {
        // Found by `gradcomp bench fuzz`: 0 images of 83886080×67108864×67108864
        // passed the size check (0 × anything = 0) and overflowed in the HWC reorder.
        let bytes = [0, 0, 8, 4, 0, 0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0];
        for layout in [ImageLayout::Chw, ImageLayout::Hwc] {
            let err = parse_images(&bytes, Path::new("x"), layout).unwrap_err().to_string();
            assert!(err.contains("past any memory"), "{err}");
        }
    }

    #[test]
    fn four_dimensional_files_carry_channels_in_either_order() {
        let p = Path::new("x");
        let mut b = Vec::new();
        for v in [IMAGES_4D_MAGIC, 1, 2, 1, 3] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        // One image of 2×1×3 pixels.
        b.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        let chw = parse_images(&b, p, ImageLayout::Chw).unwrap();
        assert_eq!((chw.shape, chw.pixels.clone()), ([2, 1, 3], vec![1, 2, 3, 4, 5, 6]));
        // The same bytes read as 1 × rows 2 × cols 1 × channels 3: pixels (1,2,3) and (4,5,6).
        let hwc = parse_images(&b, p, ImageLayout::Hwc).unwrap();
        assert_eq!((hwc.shape, hwc.pixels), ([3, 2, 1], vec![1, 4, 2, 5, 3, 6]));
        // The writer makes what the parser reads.
        assert_eq!(super::images_file(&[1, 2, 3, 4, 5, 6], 1, [2, 1, 3]), b);
        let one = parse_images(&super::images_file(&[9; 12], 2, [1, 2, 3]), p, ImageLayout::Chw).unwrap();
        assert_eq!((one.count, one.shape), (2, [1, 2, 3]));
        assert_eq!(parse_labels(&labels_file(&[4, 5]), p).unwrap(), [4, 5]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), magic_ok in any::<bool>()) {
            let mut b = bytes;
            if magic_ok && b.len() >= 4 {
                let m = if b.len() % 2 == 0 { IMAGES_MAGIC } else { IMAGES_4D_MAGIC };
                b[..4].copy_from_slice(&m.to_be_bytes());
            }
            let _ = parse_images(&b, Path::new("fuzz"), ImageLayout::Chw);
            let _ = parse_images(&b, Path::new("fuzz"), ImageLayout::Hwc);
            let _ = parse_labels(&b, Path::new("fuzz"));
        }
    }
}
