//! Making the catalog's files: the binary and experiments it runs, IDX
//! image sets and their damaged forms.

use std::path::Path;

use gradcomp_train::data::{images_file, labels_file, synthetic};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gradcomp")
}

pub fn experiments(name: &str) -> String {
    format!("{}/../../experiments/{name}", env!("CARGO_MANIFEST_DIR"))
}

pub fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// An IDX header: magic for u8 data with `dims.len()` dimensions, then the dims.
pub fn idx_header(dims: &[u32]) -> Vec<u8> {
    let mut v = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        v.extend(d.to_be_bytes());
    }
    v
}

/// A small valid image set (1×16×16, 10 classes) in `dir` under the
/// standard MNIST names, returning its four files' bytes.
pub struct ImageSet {
    pub train_x: Vec<u8>,
    pub train_y: Vec<u8>,
    pub test_x: Vec<u8>,
    pub test_y: Vec<u8>,
}

impl ImageSet {
    pub fn new() -> Self {
        let shape = [1, 16, 16];
        let tr = synthetic::images(64, 3, 0, shape, 10);
        let te = synthetic::images(32, 3, 1, shape, 10);
        Self {
            train_x: images_file(&tr.pixels, 64, shape),
            train_y: labels_file(&tr.labels),
            test_x: images_file(&te.pixels, 32, shape),
            test_y: labels_file(&te.labels),
        }
    }

    /// Writes the set into `dir` with the file names `names` (train images,
    /// train labels, test images, test labels), replacing file `which` with
    /// `bad` (or removing it when `bad` is None).
    pub fn write(&self, dir: &Path, names: [&str; 4], which: usize, bad: Option<Vec<u8>>) {
        std::fs::create_dir_all(dir).unwrap();
        let files = [&self.train_x, &self.train_y, &self.test_x, &self.test_y];
        for (i, (name, good)) in names.iter().zip(files).enumerate() {
            if i == which {
                if let Some(b) = &bad {
                    write(&dir.join(name), b);
                }
            } else {
                write(&dir.join(name), good);
            }
        }
    }
}

/// `train` on quick-synthetic.toml with a fresh run directory and `sets`.
pub fn train_args(root: &Path, case: &str, sets: &[String]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "train".into(),
        "--quiet".into(),
        "--config".into(),
        experiments("quick-synthetic.toml"),
        "--set".into(),
        format!("run_dir=\"{}\"", root.join("runs").join(case).display()),
    ];
    for s in sets {
        a.push("--set".into());
        a.push(s.clone());
    }
    a
}

pub const MNIST_NAMES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];
pub const IMAGE_NAMES: [&str; 4] = ["tr-x.idx", "tr-y.idx", "te-x.idx", "te-y.idx"];

/// `train` on the image set in `dir` (file names [`IMAGE_NAMES`]), with `extra` settings.
pub fn images_case(root: &Path, id: &str, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut sets = vec![
        "data.dataset=\"images\"".to_string(),
        format!("data.dir=\"{}\"", dir.display()),
        "data.batch_size=8".into(),
    ];
    for (key, name) in ["train_images", "train_labels", "test_images", "test_labels"].iter().zip(IMAGE_NAMES)
    {
        sets.push(format!("data.{key}=\"{name}\""));
    }
    sets.extend(extra.iter().map(|s| s.to_string()));
    train_args(root, id, &sets)
}

/// Damaged versions of a valid IDX file `good` (`images`: an image file),
/// each named.
pub fn idx_damage(good: &[u8], images: bool) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), vec![]),
        ("3-byte header".into(), good[..3].to_vec()),
        ("header cut inside the dims".into(), good[..6].to_vec()),
        ("payload short by one byte".into(), good[..good.len() - 1].to_vec()),
        ("payload cut in half".into(), good[..good.len() / 2].to_vec()),
        ("trailing garbage".into(), [good, &b"garbage"[..]].concat()),
        ("magic 0xdeadbeef".into(), [&[0xde, 0xad, 0xbe, 0xef][..], &good[4..]].concat()),
        ("element type float".into(), [&[0, 0, 0x0d][..], &good[3..]].concat()),
        ("plain text".into(), b"this is not an idx file\n".to_vec()),
    ];
    if images {
        v.extend([
            ("zero images".into(), idx_header(&[0, 16, 16])),
            ("zero rows".into(), idx_header(&[64, 0, 16])),
            ("zero columns".into(), idx_header(&[64, 16, 0])),
            (
                "dims of 65535² with a small payload".into(),
                [idx_header(&[64, 65535, 65535]), good[16..].to_vec()].concat(),
            ),
            ("a count of 2^32−1".into(), [idx_header(&[u32::MAX, 16, 16]), good[16..].to_vec()].concat()),
            ("dims overflowing 64 bits".into(), idx_header(&[u32::MAX, u32::MAX, u32::MAX, u32::MAX])),
            ("a labels file in its place".into(), labels_file(&[1, 2, 3])),
            ("five dimensions".into(), idx_header(&[64, 1, 1, 16, 16])),
        ]);
    } else {
        v.extend([
            ("zero labels".into(), idx_header(&[0])),
            ("one label too few".into(), [idx_header(&[63]), good[8..good.len() - 1].to_vec()].concat()),
            ("an images file in its place".into(), idx_header(&[64, 16, 16])),
            ("labels with two dims".into(), [idx_header(&[64, 1]), good[8..].to_vec()].concat()),
        ]);
    }
    v
}
