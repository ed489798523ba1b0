//! Datasets: MNIST, Fashion-MNIST and any IDX image set (raw or gzip, any
//! size, channel count and number of classes); Penn Treebank and any
//! word-level corpus; synthetic data for tests; sharding and seeded
//! shuffling per worker.
//!
//! The named datasets live in a cache directory outside the repository
//! (`$GRADCOMP_DATA`, else `~/.cache/gradcomp/data`, overridable by
//! `--data-dir`); `scripts/fetch-data.sh` puts them there and checks their
//! MD5s. A user's own dataset is read from `data.dir`. A missing or damaged
//! file is a [`DataError`] that names the file and says how to fix it.

mod batch;
mod error;
mod idx;
mod images;
mod loader;
pub mod synthetic;
mod text;
mod train_data;

pub use crate::config::{ImageFiles, ImageLayout, TextFiles};
pub use batch::Batch;
pub use error::DataError;
pub use idx::{images_file, labels_file};
pub use images::{Classes, ImageDataset, ImageSplits};
pub use loader::{eval_batches, ImageLoader, TokenLoader};
pub use text::{Corpus, Vocabulary, UNK};
pub use train_data::{data_dir, parse_file_bytes, FileKind, Loader, TrainData, EVAL_TOKEN_ROWS};
