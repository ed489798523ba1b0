//! Reading a configuration: TOML text or a file, with `--set KEY=VALUE`
//! overrides applied before validation.

use std::path::Path;

use super::{ConfigError, TrainConfig};

fn err(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::new(key, problem)
}

/// Sets `key` (dotted path) to `value` in a TOML table. The value is parsed
/// as a TOML literal (`0.01`, `true`, `[1, 2]`, `"x"`), else taken as a string.
pub fn set_key(table: &mut toml::Table, key: &str, value: &str) -> Result<(), ConfigError> {
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut parts = key.split('.').peekable();
    let mut cur = table;
    while let Some(part) = parts.next() {
        if part.is_empty() {
            return Err(err(key, "empty key segment"));
        }
        if parts.peek().is_none() {
            cur.insert(part.to_string(), parsed);
            return Ok(());
        }
        let next = cur.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = next.as_table_mut().ok_or_else(|| err(key, format!("{part} is not a table")))?;
    }
    Err(err(key, "empty key"))
}

/// Splits a `--set KEY=VALUE` argument; the one parser every command uses.
pub fn parse_override(arg: &str) -> Result<(String, String), ConfigError> {
    let (k, v) = arg.split_once('=').ok_or_else(|| {
        err("--set", format!("{arg}: expected KEY=VALUE, e.g. --set compressor.density=0.01"))
    })?;
    let k = k.trim();
    if k.is_empty() {
        return Err(err("--set", format!("{arg}: the key before '=' is empty")));
    }
    Ok((k.to_string(), v.trim().to_string()))
}

impl TrainConfig {
    /// Parses TOML text with `--set` overrides applied, then validates.
    pub fn from_toml(text: &str, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| err("(file)", one_line(&e.to_string())))?;
        for (k, v) in overrides {
            set_key(&mut table, k, v)?;
        }
        let cfg: TrainConfig = toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| {
            let msg = one_line(&e.to_string());
            let key = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.contains("unknown field"))
                .map_or_else(|| "(value)".to_string(), str::to_string);
            err(&key, msg)
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads a config file with overrides.
    pub fn load(path: &Path, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("--config", format!("cannot read {}: {e}", path.display())))?;
        Self::from_toml(&text, overrides)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
