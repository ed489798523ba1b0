//! Datasets: MNIST and Fashion-MNIST (IDX, raw or gzip), Penn Treebank
//! (word level), and synthetic data for tests; sharding and seeded shuffling.
//!
//! The real files live in a cache directory outside the repository
//! (`$GRADCOMP_DATA`, else `~/.cache/gradcomp/data`, overridable by
//! `--data-dir`); `scripts/fetch-data.sh` puts them there and checks their
//! MD5s. A missing or damaged file is a [`DataError`] that names the file and
//! says how to fetch it.

mod idx;
mod images;
mod loader;
mod ptb;
pub mod synthetic;

pub use images::{ImageDataset, ImageSet};
pub use loader::{eval_batches, ImageLoader, TokenLoader};
pub use ptb::{Corpus, Vocabulary};

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a dataset could not be loaded.
#[derive(Debug, Error)]
pub enum DataError {
    #[error("{dataset} not found: no {file} in {dir}; fetch it with `scripts/fetch-data.sh {fetch}` (or set --data-dir / GRADCOMP_DATA to where it is)")]
    Missing { dataset: &'static str, file: String, dir: PathBuf, fetch: &'static str },
    #[error("{path}: {problem}; delete it and fetch it again with `scripts/fetch-data.sh`")]
    Corrupt { path: PathBuf, problem: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl DataError {
    pub(crate) fn corrupt(path: &Path, problem: impl Into<String>) -> Self {
        DataError::Corrupt { path: path.to_path_buf(), problem: problem.into() }
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
