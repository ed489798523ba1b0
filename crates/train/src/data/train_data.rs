//! The run's data ([`TrainData`]): loading the configured dataset, the
//! per-worker loaders, and the byte-level entry point the fuzzer drives.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::batch::Batch;
use super::error::DataError;
use super::images::Classes;
use super::images::{ImageDataset, ImageSplits};
use super::loader::{ImageLoader, TokenLoader};
use super::text::Corpus;
use super::{idx, synthetic, text};
use crate::config::{Dataset, TrainConfig};
use crate::config::{ImageFiles, ImageLayout, TextFiles};
use crate::records::DataSummary;

/// The kinds of data file a run reads, for [`parse_file_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    IdxImages,
    IdxLabels,
    /// A gzipped IDX image file (Fashion-MNIST's form).
    GzipImages,
    /// A word-level text corpus file.
    Text,
}

/// What loading a data file does to its bytes once read: the fuzzing entry
/// point (`gradcomp bench fuzz`), so every byte-level check is reached
/// without the filesystem.
pub fn parse_file_bytes(kind: FileKind, bytes: &[u8]) -> Result<(), DataError> {
    let path = Path::new("input");
    match kind {
        FileKind::IdxImages | FileKind::GzipImages => {
            let plain;
            let bytes = if kind == FileKind::GzipImages {
                plain = idx::gunzip(bytes, path)?;
                &plain[..]
            } else {
                bytes
            };
            for layout in [ImageLayout::Chw, ImageLayout::Hwc] {
                idx::parse_images(bytes, path, layout)?;
            }
        }
        FileKind::IdxLabels => {
            idx::parse_labels(bytes, path)?;
        }
        FileKind::Text => {
            let text = std::str::from_utf8(bytes).map_err(|_| DataError::corrupt(path, "not UTF-8 text"))?;
            let vocab = text::Vocabulary::from_text(text);
            let (ids, unknown) = vocab.encode(text);
            // An invariant, not an input error: a fuzzer must see it fail loudly.
            assert!(
                unknown == 0 && ids.iter().all(|&i| (i as usize) < vocab.len()),
                "a text's own vocabulary covers it"
            );
        }
    }
    Ok(())
}

/// The names of a language-model run's text files, for messages.
fn text_files(cfg: &TrainConfig) -> TextFiles {
    match cfg.data.dataset {
        Dataset::Ptb => TextFiles::ptb(),
        Dataset::Text => cfg.data.text_files(),
        _ => TextFiles { train: "generated".into(), valid: "none".into(), test: "generated".into() },
    }
}

/// The data directory: `explicit` if given, else `$GRADCOMP_DATA`, else
/// `~/.cache/gradcomp/data`.
pub fn data_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("GRADCOMP_DATA") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/gradcomp/data")
}

/// The training data, loaded once and shared by the workers.
#[derive(Clone, Debug)]
pub enum TrainData {
    Images {
        train: ImageDataset,
        test: ImageDataset,
    },
    Tokens {
        train: Arc<Vec<u32>>,
        valid: Option<Arc<Vec<u32>>>,
        test: Arc<Vec<u32>>,
        vocab: usize,
        /// Words of each split that training never saw (read as `<unk>`).
        unknown_words: std::collections::BTreeMap<String, u64>,
    },
}

/// How to fetch a named dataset that is missing.
fn fetch_hint(name: &str) -> String {
    format!("fetch it with `scripts/fetch-data.sh {name}` (or set --data-dir / GRADCOMP_DATA to where it is)")
}

/// Token rows per evaluation batch of a text.
pub const EVAL_TOKEN_ROWS: usize = 10;

impl TrainData {
    /// Loads (or generates) what the configuration names.
    pub fn load(cfg: &TrainConfig) -> Result<Self, DataError> {
        let d = &cfg.data;
        let root = data_dir(d.dir.as_deref());
        let own = || {
            d.dir.clone().ok_or_else(|| {
                DataError::Invalid(format!(
                    "dataset {:?} is read from data.dir: set it to the directory that holds the files",
                    d.dataset
                ))
            })
        };
        let data = match d.dataset {
            Dataset::Mnist => Self::images(ImageSplits::load(&root.join("mnist"), &ImageFiles::default(), d.image_layout, "MNIST", &fetch_hint("mnist"), Classes::Known(10))?, cfg)?,
            Dataset::FashionMnist => Self::images(ImageSplits::load(&root.join("fashion-mnist"), &ImageFiles::default(), d.image_layout, "Fashion-MNIST", &fetch_hint("fashion-mnist"), Classes::Known(10))?, cfg)?,
            Dataset::Images => Self::images(
                ImageSplits::load(&own()?, &d.image_files(), d.image_layout, "the image dataset", "set data.dir to the directory that holds it, or data.train_images (and the others) to its file names", d.classes.map_or(Classes::Inferred, Classes::Declared))?,
                cfg,
            )?,
            Dataset::SyntheticImages => {
                let n = d.synthetic_size;
                let (shape, classes) = (d.synthetic_shape, d.synthetic_classes);
                let test = synthetic::images((n / 4).max(10), cfg.seed, 1, shape, classes);
                Self::images(ImageSplits { train: synthetic::images(n, cfg.seed, 0, shape, classes), test }, cfg)?
            }
            Dataset::Ptb => Self::corpus(Corpus::load(&root.join("ptb"), &TextFiles::ptb(), "Penn Treebank", &fetch_hint("ptb"))?, cfg),
            Dataset::Text => Self::corpus(
                Corpus::load(&own()?, &d.text_files(), "the text corpus", "set data.dir to the directory that holds it, or data.train_text (and the others) to its file names")?,
                cfg,
            ),
            Dataset::SyntheticTokens => {
                let vocab = cfg.model.vocab().min(1000) as u32;
                let n = d.synthetic_size;
                TrainData::Tokens {
                    train: Arc::new(synthetic::tokens(n, vocab, cfg.seed, 0)),
                    valid: None,
                    test: Arc::new(synthetic::tokens((n / 4).max(100), vocab, cfg.seed, 1)),
                    vocab: vocab as usize,
                    unknown_words: Default::default(),
                }
            }
        };
        if cfg.train.eval && data.test_len() == 0 {
            return Err(DataError::Invalid(
                "the test split is empty: evaluation needs at least one example (or set train.eval = false)"
                    .into(),
            ));
        }
        if let (true, TrainData::Tokens { valid, test, .. }) = (cfg.train.eval, &data) {
            // Evaluation cuts a text into EVAL_TOKEN_ROWS rows of bptt + 1
            // tokens at least; a shorter one would evaluate nothing and
            // report a perplexity of 1.
            let need = EVAL_TOKEN_ROWS * (cfg.data.bptt + 1);
            let files = text_files(cfg);
            for (split, tokens, file) in
                [("test", Some(test), &files.test), ("validation", valid.as_ref(), &files.valid)]
            {
                if let Some(t) = tokens.filter(|t| t.len() < need) {
                    return Err(DataError::Invalid(format!(
                        "the {split} text ({file}) holds {} tokens; evaluation needs at least {need} ({EVAL_TOKEN_ROWS} rows of data.bptt + 1 = {}): use a longer text, a smaller data.bptt, or train.eval = false",
                        t.len(),
                        cfg.data.bptt + 1
                    )));
                }
            }
        }
        Ok(data)
    }

    fn images(s: ImageSplits, cfg: &TrainConfig) -> Result<Self, DataError> {
        let (mut train, mut test) =
            (s.train.truncated(cfg.data.train_examples), s.test.truncated(cfg.data.test_examples));
        if let Some(n) = &cfg.data.normalize {
            // The same map for both splits: a model trained on one input scale
            // is evaluated on the same.
            train = train.normalized(&n.mean, &n.std)?;
            test = test.normalized(&n.mean, &n.std)?;
        }
        let pad = cfg.data.augment.crop_padding;
        let [_, h, w] = train.shape;
        if pad >= h.min(w) {
            return Err(DataError::Invalid(format!(
                "data.augment.crop_padding = {pad} on {h}×{w} images: a crop could hold no pixel of the image; use less than {}",
                h.min(w)
            )));
        }
        Ok(TrainData::Images { train, test })
    }

    fn corpus(c: Corpus, cfg: &TrainConfig) -> Self {
        let cut = |mut v: Vec<u32>, n: usize| {
            if n > 0 {
                v.truncate(n);
            }
            Arc::new(v)
        };
        TrainData::Tokens {
            train: cut(c.train, cfg.data.train_examples),
            valid: c.valid.map(|v| cut(v, cfg.data.test_examples)),
            test: cut(c.test, cfg.data.test_examples),
            vocab: c.vocab.len(),
            unknown_words: c.unknown_words,
        }
    }

    /// Test examples (images) or tokens.
    /// Why a worker's shard holds no full batch, for the user: the split's
    /// size, what one batch per worker needs, and what to change.
    pub fn too_small_for_a_batch(&self, cfg: &TrainConfig) -> String {
        let (b, w) = (cfg.data.batch_size, cfg.workers);
        match self {
            TrainData::Images { train, .. } => format!(
                "the training split holds {} examples, fewer than one batch of {b} for each of {w} worker(s): lower data.batch_size or workers, or use more data",
                train.len()
            ),
            TrainData::Tokens { train, .. } => format!(
                "the training text ({}) holds {} tokens, fewer than one batch of {b} rows of data.bptt + 1 = {} for each of {w} worker(s): use a longer text, or lower data.batch_size, data.bptt or workers",
                text_files(cfg).train,
                train.len(),
                cfg.data.bptt + 1
            ),
        }
    }

    pub fn test_len(&self) -> usize {
        match self {
            TrainData::Images { test, .. } => test.len(),
            TrainData::Tokens { test, .. } => test.len(),
        }
    }

    /// What the loader sees, for the manifest and `gradcomp data inspect`.
    pub fn summary(&self) -> DataSummary {
        match self {
            TrainData::Images { train, test } => DataSummary {
                train: train.len(),
                test: test.len(),
                image_shape: Some(train.shape),
                classes: Some(train.classes),
                ..Default::default()
            },
            TrainData::Tokens { train, valid, test, vocab, unknown_words } => DataSummary {
                train: train.len(),
                valid: valid.as_ref().map(|v| v.len()),
                test: test.len(),
                vocab: Some(*vocab),
                unknown_words: unknown_words.clone(),
                ..Default::default()
            },
        }
    }
}

/// A worker's minibatch source: its shard of the training data.
pub enum Loader {
    Images(ImageLoader),
    Tokens {
        tokens: Arc<Vec<u32>>,
        seed: u64,
        rank: usize,
        workers: usize,
        batch: usize,
        bptt: usize,
        rotate: bool,
        variable_bptt: bool,
        /// The loader of the current rotation.
        current: Option<(usize, TokenLoader)>,
        /// Variable BPTT: the segments of this epoch.
        segments: Option<(u32, Vec<(usize, usize)>)>,
    },
}

impl Loader {
    /// Worker `rank`'s shard of the training data among `cfg.workers`.
    pub fn new(data: &TrainData, cfg: &TrainConfig, rank: usize) -> Self {
        let (workers, batch) = (cfg.workers, cfg.data.batch_size);
        match data {
            TrainData::Images { train, .. } => Loader::Images(
                ImageLoader::shard(train.clone(), rank, workers, batch, cfg.seed)
                    .with_augment(cfg.data.augment),
            ),
            TrainData::Tokens { train, .. } => Loader::Tokens {
                tokens: Arc::clone(train),
                seed: cfg.seed,
                rank,
                workers,
                batch,
                bptt: cfg.data.bptt,
                rotate: cfg.data.rotate_shards,
                variable_bptt: cfg.data.variable_bptt,
                current: None,
                segments: None,
            },
        }
    }

    /// The token loader of `epoch`'s shard (shards rotate each epoch when configured).
    fn token_loader(&mut self, epoch: u32) -> &TokenLoader {
        let Loader::Tokens { tokens, rank, workers, batch, bptt, rotate, current, .. } = self else {
            unreachable!("token loader of an image run")
        };
        let rotation = if *rotate { epoch as usize } else { 0 };
        if current.as_ref().is_none_or(|(r, _)| *r != rotation) {
            let l = TokenLoader::shard(tokens, *rank, *workers, rotation, *batch, *bptt);
            *current = Some((rotation, l));
        }
        &current.as_ref().expect("set above").1
    }

    /// Full batches per epoch.
    pub fn batches_per_epoch(&mut self) -> usize {
        match self {
            Loader::Images(l) => l.batches_per_epoch(),
            Loader::Tokens { .. } => self.token_loader(0).batches_per_epoch(),
        }
    }

    /// Variable BPTT: segment `i` of `epoch` as (start, length); the same
    /// on every worker, since the draws depend on (seed, epoch) only.
    fn segment(&mut self, epoch: u32, i: usize) -> Option<(usize, usize)> {
        let Loader::Tokens { variable_bptt: true, seed, .. } = *self else { return None };
        if !matches!(self, Loader::Tokens { segments: Some((e, _)), .. } if *e == epoch) {
            let drawn = self.token_loader(epoch).variable_segments(seed, epoch);
            if let Loader::Tokens { segments, .. } = self {
                *segments = Some((epoch, drawn));
            }
        }
        let Loader::Tokens { segments: Some((_, s)), .. } = self else { unreachable!("set above") };
        s.get(i).copied()
    }

    /// The factor on `batch`'s learning rate: under variable BPTT its
    /// length over `bptt` (AWD-LSTM scales η, and the CELGC authors γ too,
    /// by it; γ follows η here), else 1.
    pub fn lr_scale(&self, batch: &Batch) -> f64 {
        match (self, batch) {
            (Loader::Tokens { variable_bptt: true, bptt, .. }, Batch::Tokens { steps, .. }) => {
                *steps as f64 / *bptt as f64
            }
            _ => 1.0,
        }
    }

    /// Batch `i` of `epoch`.
    pub fn batch(&mut self, epoch: u32, i: usize) -> Batch {
        let segment = self.segment(epoch, i);
        match self {
            Loader::Images(l) => l.batch(epoch, i),
            Loader::Tokens { seed, rank, .. } => {
                let key = gradcomp_compress::UnitRng::from_parts(&[
                    *seed,
                    *rank as u64,
                    u64::from(epoch),
                    i as u64,
                    0x4452_4f50,
                ])
                .next_u64();
                let l = self.token_loader(epoch);
                let mut b = match segment {
                    Some((start, len)) => l.segment(start, len),
                    None => l.batch(i),
                };
                if let Batch::Tokens { key: k, .. } = &mut b {
                    *k = key;
                }
                b
            }
        }
    }
}
