//! What the workers train on (`[data]`): the dataset, its files and shape,
//! batch sizes, normalisation and augmentation.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dataset {
    /// `mnist/` in the data directory (`scripts/fetch-data.sh mnist`).
    Mnist,
    /// `fashion-mnist/` in the data directory (`scripts/fetch-data.sh fashion-mnist`).
    FashionMnist,
    /// Any IDX image dataset in `data.dir`: any size, channel count and
    /// number of classes; file names `data.train_images` etc.
    Images,
    /// `ptb/` in the data directory (`scripts/fetch-data.sh ptb`).
    Ptb,
    /// Any word-level corpus in `data.dir`; file names `data.train_text` etc.
    Text,
    /// Generated images (tests, smoke runs): `synthetic_size` examples of
    /// `synthetic_shape` in `synthetic_classes` classes.
    SyntheticImages,
    /// A generated token stream (tests, smoke runs).
    SyntheticTokens,
}

impl Dataset {
    pub fn is_text(self) -> bool {
        matches!(self, Dataset::Ptb | Dataset::Text | Dataset::SyntheticTokens)
    }
}

/// Per-channel input normalisation of images (the papers' scripts use
/// MNIST's mean 0.1307 and std 0.3081).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normalize {
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

/// Training-time augmentation of images, the CIFAR recipe of the papers'
/// scripts: a random crop of the zero-padded image back to its size, then a
/// random left-right flip. Evaluation sees the images as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Augment {
    /// Pixels of zero padding on each side before the crop; 0: no crop.
    pub crop_padding: usize,
    /// Mirror each image left-right with probability 1/2.
    pub flip: bool,
}

impl Augment {
    pub fn is_on(&self) -> bool {
        self.crop_padding > 0 || self.flip
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    pub dataset: Dataset,
    /// Data directory; default `$GRADCOMP_DATA`, else `~/.cache/gradcomp/data`.
    /// For `images` and `text`, the directory that holds the files.
    pub dir: Option<PathBuf>,
    /// Minibatch per worker.
    pub batch_size: usize,
    /// Use only this many training examples (0: all), for quick runs.
    pub train_examples: usize,
    /// Evaluate on at most this many test examples (0: all).
    pub test_examples: usize,
    /// Truncated-BPTT length (language models).
    pub bptt: usize,
    /// AWD-LSTM's variable BPTT: each training segment's length is drawn
    /// around `bptt` and the step (η, and CELGC's γ with it) is scaled by
    /// length/`bptt`. Evaluation keeps `bptt`.
    pub variable_bptt: bool,
    /// Synthetic datasets: examples (images) or tokens.
    pub synthetic_size: usize,
    /// Synthetic images: `[channels, rows, cols]`.
    pub synthetic_shape: [usize; 3],
    /// Synthetic images: number of classes (at most 256).
    pub synthetic_classes: usize,
    /// Rotate language-model shards among workers every epoch (CELGC).
    pub rotate_shards: bool,
    /// `images`: the IDX files in `dir` (each tried as named, then with `.gz`).
    pub train_images: String,
    pub train_labels: String,
    pub test_images: String,
    pub test_labels: String,
    /// `images`: how 4-D IDX files order an image (`chw` or `hwc`).
    pub image_layout: ImageLayout,
    /// `images`: the number of classes (labels `0..classes`); unset: the
    /// largest training label + 1, refused when more than twice the distinct
    /// labels (a sign of mislabelled data).
    pub classes: Option<usize>,
    /// Image datasets: inputs `(p/255 − mean)/std` per channel (one value, or
    /// one per channel), at training and test alike; none: `p/255`.
    pub normalize: Option<Normalize>,
    /// Image datasets: random crop and flip of training images.
    pub augment: Augment,
    /// `text`: the corpus files in `dir`; an empty `valid_text` means none.
    pub train_text: String,
    pub valid_text: String,
    pub test_text: String,
}

impl Default for DataConfig {
    fn default() -> Self {
        let images = ImageFiles::default();
        let text = TextFiles::default();
        Self {
            dataset: Dataset::Mnist,
            dir: None,
            batch_size: 16,
            train_examples: 0,
            test_examples: 0,
            bptt: 35,
            variable_bptt: false,
            synthetic_size: 2048,
            synthetic_shape: [1, 28, 28],
            synthetic_classes: 10,
            rotate_shards: false,
            train_images: images.train_images,
            train_labels: images.train_labels,
            test_images: images.test_images,
            test_labels: images.test_labels,
            image_layout: ImageLayout::Chw,
            classes: None,
            normalize: None,
            augment: Augment::default(),
            train_text: text.train,
            valid_text: text.valid,
            test_text: text.test,
        }
    }
}

impl DataConfig {
    pub fn image_files(&self) -> ImageFiles {
        ImageFiles {
            train_images: self.train_images.clone(),
            train_labels: self.train_labels.clone(),
            test_images: self.test_images.clone(),
            test_labels: self.test_labels.clone(),
        }
    }

    pub fn text_files(&self) -> TextFiles {
        TextFiles {
            train: self.train_text.clone(),
            valid: self.valid_text.clone(),
            test: self.test_text.clone(),
        }
    }
}

/// How a 4-D IDX image file orders an image's values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImageLayout {
    /// `channels × rows × cols` per image (burn's and PyTorch's order).
    #[default]
    Chw,
    /// `rows × cols × channels` per image (NumPy images, TensorFlow).
    Hwc,
}

/// The four IDX files of an image dataset, by name inside one directory.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageFiles {
    pub train_images: String,
    pub train_labels: String,
    pub test_images: String,
    pub test_labels: String,
}

impl Default for ImageFiles {
    /// MNIST's names.
    fn default() -> Self {
        Self {
            train_images: "train-images-idx3-ubyte".into(),
            train_labels: "train-labels-idx1-ubyte".into(),
            test_images: "t10k-images-idx3-ubyte".into(),
            test_labels: "t10k-labels-idx1-ubyte".into(),
        }
    }
}

/// The files of a corpus, by name inside one directory. An empty
/// `valid` name means the corpus has no validation file.
#[derive(Clone, Debug, PartialEq)]
pub struct TextFiles {
    pub train: String,
    pub valid: String,
    pub test: String,
}

impl TextFiles {
    /// Penn Treebank's names.
    pub fn ptb() -> Self {
        Self { train: "ptb.train.txt".into(), valid: "ptb.valid.txt".into(), test: "ptb.test.txt".into() }
    }
}

impl Default for TextFiles {
    fn default() -> Self {
        Self { train: "train.txt".into(), valid: "valid.txt".into(), test: "test.txt".into() }
    }
}
