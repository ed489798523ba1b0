//! MNIST and Fashion-MNIST in memory.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{idx, DataError};

/// Which image dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImageSet {
    Mnist,
    FashionMnist,
}

impl ImageSet {
    fn dir(self) -> &'static str {
        match self {
            ImageSet::Mnist => "mnist",
            ImageSet::FashionMnist => "fashion-mnist",
        }
    }

    fn name(self) -> &'static str {
        match self {
            ImageSet::Mnist => "MNIST",
            ImageSet::FashionMnist => "Fashion-MNIST",
        }
    }
}

/// Images as u8 (scaled to [0, 1] when batched) and labels.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageDataset {
    pub pixels: Arc<Vec<u8>>,
    pub labels: Arc<Vec<u8>>,
    pub rows: usize,
    pub cols: usize,
    pub classes: usize,
}

impl ImageDataset {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Loads the training (`train = true`) or test split from `data_dir/{mnist,fashion-mnist}/`.
    /// Accepts `train-images-idx3-ubyte` raw or `.gz` (and MNIST's `train-images.idx3-ubyte`).
    pub fn load(set: ImageSet, data_dir: &Path, train: bool) -> Result<Self, DataError> {
        let dir = data_dir.join(set.dir());
        let prefix = if train { "train" } else { "t10k" };
        let find = |kind: &str| -> Result<std::path::PathBuf, DataError> {
            let names = [
                format!("{prefix}-{kind}-ubyte"),
                format!("{prefix}-{kind}-ubyte.gz"),
                format!("{prefix}-{}", kind.replacen('-', ".", 1)) + "-ubyte",
            ];
            names.iter().map(|n| dir.join(n)).find(|p| p.is_file()).ok_or_else(|| DataError::Missing {
                dataset: set.name(),
                file: names[0].clone() + "[.gz]",
                dir: dir.clone(),
                fetch: match set {
                    ImageSet::Mnist => "mnist",
                    ImageSet::FashionMnist => "fashion-mnist",
                },
            })
        };
        let ipath = find("images-idx3")?;
        let lpath = find("labels-idx1")?;
        let (pixels, n, rows, cols) = idx::parse_images(&idx::read_maybe_gz(&ipath)?, &ipath)?;
        let labels = idx::parse_labels(&idx::read_maybe_gz(&lpath)?, &lpath)?;
        if labels.len() != n {
            return Err(DataError::corrupt(
                &lpath,
                format!("{} labels for {n} images in {}", labels.len(), ipath.display()),
            ));
        }
        if let Some(&bad) = labels.iter().find(|&&l| l >= 10) {
            return Err(DataError::corrupt(&lpath, format!("label {bad} outside 0..10")));
        }
        Ok(Self { pixels: Arc::new(pixels), labels: Arc::new(labels), rows, cols, classes: 10 })
    }

    /// Appends example `i` scaled to [0, 1].
    pub fn push_example(&self, i: usize, pixels: &mut Vec<f32>, labels: &mut Vec<i64>) {
        let sz = self.rows * self.cols;
        pixels.extend(self.pixels[i * sz..(i + 1) * sz].iter().map(|&p| f32::from(p) / 255.0));
        labels.push(i64::from(self.labels[i]));
    }
}
