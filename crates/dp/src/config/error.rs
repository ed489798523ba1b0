//! [`ConfigError`]: an option outside what it may be, named by its key.

use thiserror::Error;

/// A configuration problem: names the key (as a gradcomp TOML file spells
/// it: `compressor.density`, `comm.topology`, ...) and says what is wrong.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("config: {key}: {problem}")]
pub struct ConfigError {
    pub key: String,
    pub problem: String,
}

impl ConfigError {
    pub fn new(key: &str, problem: impl Into<String>) -> Self {
        ConfigError { key: key.to_string(), problem: problem.into() }
    }
}
