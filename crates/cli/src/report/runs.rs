//! A run directory's records, read through the trainer's own types, and the
//! labels the report's tables and figures share.

use std::path::Path;

use anyhow::{bail, Context, Result};
use gradcomp_train::config::TrainConfig;
use gradcomp_train::records::{read_json, read_jsonl, EpochRecord, Manifest, StepRecord};

/// One run's records, read through the trainer's own types.
pub struct Run {
    pub name: String,
    pub config: TrainConfig,
    pub manifest: Option<Manifest>,
    pub epochs: Vec<EpochRecord>,
    /// `evals.jsonl` (`train.eval_every`), when the run has one.
    pub evals: Vec<EpochRecord>,
    pub steps: Vec<StepRecord>,
}

impl Run {
    pub fn load(dir: &Path) -> Result<Self> {
        if !dir.join("epochs.jsonl").is_file() {
            bail!("{} is not a run directory (no epochs.jsonl); pass runs/<name>", dir.display());
        }
        let path = dir.join("config.toml");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        // The trainer's own parser: one-line errors that name the key.
        let config =
            TrainConfig::from_toml(&text, &[]).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let manifest = read_json(&dir.join("manifest.json")).ok();
        Ok(Self {
            name: config.name.clone(),
            config,
            manifest,
            epochs: read_jsonl(&dir.join("epochs.jsonl"))?,
            evals: if dir.join("evals.jsonl").is_file() {
                read_jsonl(&dir.join("evals.jsonl"))?
            } else {
                Vec::new()
            },
            steps: read_jsonl(&dir.join("steps.jsonl"))?,
        })
    }

    pub fn is_lm(&self) -> bool {
        self.epochs.iter().any(|e| e.test_perplexity.is_some())
    }

    /// (epoch number from 1, test metric): accuracy in % or perplexity.
    pub fn metric(&self) -> Vec<(f64, f64)> {
        self.epochs.iter().filter_map(|e| Some((f64::from(e.epoch) + 1.0, e.metric()?))).collect()
    }

    /// (x of an evaluation, its test metric), for the evaluations that have
    /// both: every `evals.jsonl` line when the run has them, else the epochs.
    pub(super) fn series(&self, x: impl Fn(&EpochRecord) -> Option<f64>) -> Vec<(f64, f64)> {
        let curve = if self.evals.is_empty() { &self.epochs } else { &self.evals };
        curve.iter().filter_map(|e| Some((x(e)?, e.metric()?))).collect()
    }

    pub(super) fn step_bytes(&self) -> f64 {
        let total: u64 = self.steps.iter().map(StepRecord::bytes_sent).sum();
        total as f64 / self.steps.len().max(1) as f64
    }
}

pub(super) fn metric_label(lm: bool) -> &'static str {
    if lm {
        "test perplexity"
    } else {
        "test accuracy (%)"
    }
}

pub(super) fn human_link(bps: &str) -> String {
    let b: f64 = bps.parse().unwrap_or(0.0);
    if b >= 1e9 {
        format!("{} Gbit/s", b / 1e9)
    } else {
        format!("{} Mbit/s", b / 1e6)
    }
}

/// The link speeds (bit/s keys) the first run predicted its wall-clock for.
pub(super) fn links(runs: &[Run]) -> Vec<String> {
    runs.first()
        .and_then(|r| r.epochs.last().or(r.evals.last()))
        .map(|e| e.predicted_wall_seconds.keys().cloned().collect())
        .unwrap_or_default()
}
