//! [`DataError`]: why a dataset could not be loaded, naming the file and
//! what to do.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a dataset could not be loaded.
#[derive(Debug, Error)]
pub enum DataError {
    #[error("{dataset} not found: no {file} in {dir}; {hint}")]
    Missing { dataset: String, file: String, dir: PathBuf, hint: String },
    #[error("{path}: {problem}")]
    Corrupt { path: PathBuf, problem: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("data: {0}")]
    Invalid(String),
}

impl DataError {
    pub(crate) fn corrupt(path: &Path, problem: impl Into<String>) -> Self {
        DataError::Corrupt { path: path.to_path_buf(), problem: problem.into() }
    }
}
