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

    /// The error in a library user's words: the builder call that sets the
    /// option instead of its TOML key (`DataParallelConfig::with_topology`
    /// for `comm.topology`). What a front's handle reports; the trainer,
    /// which reads TOML, reports the key.
    pub fn in_library_terms(&self) -> String {
        format!("{}: {}", library_call(&self.key), self.problem)
    }
}

/// The Rust call that sets the option a TOML key names.
fn library_call(key: &str) -> String {
    let builder = |name: &str| format!("DataParallelConfig::{name}");
    let (section, field) = key.split_once('.').unwrap_or(("", key));
    let field_root = field.split('.').next().unwrap_or(field);
    match (section, field_root) {
        ("compressor", option) => format!("CompressorConfig's `{option}` (the compressor's option)"),
        ("compression", "warmup") => builder("with_warmup"),
        ("compression", "exclude") => builder("with_exclusions"),
        ("compression", "bucket_mb") => builder("with_buckets"),
        ("compression", "dgc_momentum") => builder("with_dgc_momentum"),
        ("compression", "local_clip") => builder("with_local_clip"),
        ("compression", "granularity") => builder("with_granularity"),
        ("compression", "memory") => builder("with_memory"),
        ("compression", option) => format!("{} (CompressionConfig::{option})", builder("with_compression")),
        ("comm", "topology") => builder("with_topology"),
        ("comm", "server") => builder("with_server"),
        ("strategy", "compress_change") => builder("with_compress_change"),
        ("strategy", "period" | "gamma") => builder("with_celgc"),
        ("strategy", option) => format!("{} (StrategyConfig::{option})", builder("with_strategy")),
        ("optimizer", "lr") => builder("with_base_lr"),
        _ => key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_name_the_builder_not_the_toml_key() {
        let e = ConfigError::new("comm.topology", "no");
        assert_eq!(e.to_string(), "config: comm.topology: no");
        assert_eq!(e.in_library_terms(), "DataParallelConfig::with_topology: no");
        let e = ConfigError::new("compression.warmup.densities", "out of range");
        assert_eq!(e.in_library_terms(), "DataParallelConfig::with_warmup: out of range");
        let e = ConfigError::new("strategy.compress_change", "x");
        assert!(e.in_library_terms().starts_with("DataParallelConfig::with_compress_change"));
    }
}
