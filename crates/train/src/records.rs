//! What a run writes: `runs/<name>/{config.toml, manifest.json, steps.jsonl,
//! epochs.jsonl}`. Written by rank 0; lines are flushed as they are made so a
//! run that dies leaves its records up to that point.
//!
//! Every record is a struct that derives `Serialize` and `Deserialize`, and
//! the readers (`gradcomp report`, `gradcomp model`, `bench train`) read them
//! through these types: renaming a field breaks the build, not the figures.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use gradcomp_compress::memory::MemoryKind;
use gradcomp_compress::CompressorConfig;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::config::{Backend, Exclusions, Granularity, Topology};
pub use crate::machine::Hardware;

/// One step, as written to `steps.jsonl`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    pub epoch: u32,
    pub lr: f64,
    /// Mean training loss over the workers' minibatches.
    pub loss: f64,
    /// Target density (sparsifiers) for this step.
    pub density: Option<f64>,
    /// Elements sent / elements, averaged over workers.
    pub sent_fraction: f64,
    /// Encoded bytes of the compressed messages, all workers.
    pub wire_bytes: u64,
    /// Bytes sent and received through each collective, all workers.
    pub bytes_up: BTreeMap<String, u64>,
    pub bytes_down: BTreeMap<String, u64>,
    /// Per worker, in rank order.
    #[serde(alias = "compute_s")]
    pub compute_seconds: Vec<f64>,
    #[serde(alias = "compress_s")]
    pub compress_seconds: Vec<f64>,
    #[serde(alias = "communicate_s")]
    pub communicate_seconds: Vec<f64>,
    #[serde(alias = "decode_s")]
    pub decode_seconds: Vec<f64>,
    #[serde(alias = "optimizer_s")]
    pub optimizer_seconds: Vec<f64>,
    /// Measured wall-clock of the step on rank 0.
    #[serde(alias = "wall_s")]
    pub wall_seconds: f64,
    /// Stages of a staged backward pass run inside the exchange on rank 0
    /// (their seconds are in `compute_seconds`); 0 when the backward pass ran whole.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backward_stages: u32,
    /// Predicted step time on a cluster at each link speed (bit/s → s).
    #[serde(alias = "predicted_s")]
    pub predicted_seconds: BTreeMap<String, f64>,
    pub residual_norm: f64,
    /// ‖u − C(u)‖²/‖u‖² and its two bounds (1 − k/d), (1 − k/d)², when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contraction: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_classic: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_tight: Option<f64>,
    /// TernGrad's ‖g‖∞‖g‖₁/‖g‖² per compressed unit, when measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound_ratio: Vec<f64>,
    /// Histogram of the compensated gradient (rank 0), when measured: edges and counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram: Option<(Vec<f32>, Vec<u64>)>,
    /// Strategy- and compressor-specific figures (CELGC's effective step
    /// and gradient norm, eSGD's replacements and importance scores).
    #[serde(flatten)]
    pub extra: BTreeMap<String, f64>,
    pub skipped: bool,
}

impl StepRecord {
    /// Bytes all workers sent through every collective in this step.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_up.values().sum()
    }

    /// The slowest rank's sum of the given per-rank times.
    pub fn slowest(&self, columns: &[&[f64]]) -> Option<f64> {
        let ranks = columns.first()?.len();
        (0..ranks).map(|r| columns.iter().filter_map(|c| c.get(r)).sum::<f64>()).reduce(f64::max)
    }

    /// The slowest rank's local work: compute, compression, decoding and the optimizer.
    pub fn slowest_local(&self) -> Option<f64> {
        self.slowest(&[
            &self.compute_seconds,
            &self.compress_seconds,
            &self.decode_seconds,
            &self.optimizer_seconds,
        ])
    }
}

/// One epoch, as written to `epochs.jsonl`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: u32,
    pub steps: u64,
    pub train_loss: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_perplexity: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_loss: Option<f64>,
    /// Language models with a validation file: its perplexity and loss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_perplexity: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_loss: Option<f64>,
    /// Cumulative bytes sent by all workers through gradient collectives.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Cumulative measured wall-clock seconds of training (evaluation excluded).
    pub wall_seconds: f64,
    /// Cumulative predicted wall-clock at each link speed (bit/s → s).
    pub predicted_wall_seconds: BTreeMap<String, f64>,
}

impl EpochRecord {
    /// The run's test metric: accuracy in % or perplexity.
    pub fn metric(&self) -> Option<f64> {
        self.test_perplexity.or(self.test_accuracy.map(|a| a * 100.0))
    }
}

/// One compression unit, as listed in the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    pub id: u32,
    pub name: String,
    pub len: usize,
    /// The tensor's shape (`[len]` for a global unit; empty in manifests
    /// written before it was recorded).
    #[serde(default)]
    pub shape: Vec<usize>,
    /// Sent uncompressed (excluded by policy).
    pub dense: bool,
}

/// What the run trained on, as the loader saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataSummary {
    /// Training examples (images) or tokens.
    pub train: usize,
    /// Validation tokens (language models with a validation file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid: Option<usize>,
    /// Test examples or tokens.
    pub test: usize,
    /// Images: `[channels, height, width]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_shape: Option<[usize; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vocab: Option<usize>,
    /// Text: words of each split that are not in the training vocabulary
    /// (each counted once per occurrence and read as `<unk>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown_words: BTreeMap<String, u64>,
}

/// `manifest.json`: what ran, where, with which options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub gradcomp_version: String,
    pub burn_version: String,
    pub git_revision: Option<String>,
    pub seed: u64,
    pub workers: usize,
    pub backend: Backend,
    pub topology: Topology,
    pub compressor: CompressorConfig,
    pub granularity: Granularity,
    pub exclude: Exclusions,
    /// How the compressor's messages combine (`DenseSum`, `TernarySum`, ...).
    pub combine: String,
    /// The memory in effect (`auto` resolved).
    pub memory: MemoryKind,
    /// Trainable parameters (elements).
    pub parameters: usize,
    pub layout_fingerprint: String,
    pub units: Vec<UnitRecord>,
    pub data: DataSummary,
    pub hardware: Hardware,
}

/// The git revision of the working directory, if it is a repository.
pub fn git_revision() -> Option<String> {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Why a record file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: not a gradcomp record ({message}); was it written by another version?")]
    Parse { path: PathBuf, line: usize, message: String },
}

/// Reads a JSON-lines record file (blank lines skipped).
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, RecordError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| RecordError::Io { path: path.to_path_buf(), source })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| RecordError::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                message: e.to_string(),
            })
        })
        .collect()
}

/// Reads a JSON record file (`manifest.json`).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, RecordError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| RecordError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_str(&text).map_err(|e| RecordError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        message: e.to_string(),
    })
}

/// Appends JSON lines to a file.
pub struct JsonLines {
    out: BufWriter<File>,
}

impl JsonLines {
    pub fn open(path: &Path, append: bool) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(path)?;
        Ok(Self { out: BufWriter::new(f) })
    }

    /// Opens `path` to append to, first dropping the lines `keep` refuses
    /// (a resume from a checkpoint older than the last records: the steps
    /// after it run again and must not appear twice). Unparsable lines go too.
    pub fn open_kept(path: &Path, keep: impl Fn(&serde_json::Value) -> bool) -> std::io::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let kept: String = text
                    .lines()
                    .filter(|l| serde_json::from_str(l).is_ok_and(|v| keep(&v)))
                    .flat_map(|l| [l, "\n"])
                    .collect();
                if kept.len() != text.len() {
                    write_atomic(path, kept.as_bytes())?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Self::open(path, true)
    }

    pub fn write<T: Serialize>(&mut self, v: &T) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, v)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// Appends a line to the run's `membership.jsonl`: every change of workers
/// (a resize at a resume) and every restart after a lost worker.
pub fn append_membership(run_dir: &Path, line: &serde_json::Value) -> std::io::Result<()> {
    JsonLines::open(&run_dir.join("membership.jsonl"), true)?.write(line)
}

/// Writes `bytes` to `path` atomically (temporary file in the same
/// directory, then rename), so a reader never sees a partial file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp: PathBuf = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// The link-speed key used in records: bit/s as an integer string.
pub fn link_key(bps: f64) -> String {
    format!("{}", bps.round() as u64)
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_json() {
        let mut s = StepRecord { step: 3, loss: 0.5, compute_seconds: vec![0.1, 0.3], ..Default::default() };
        s.extra.insert("eta_eff".into(), 0.25);
        s.bytes_up.insert("allgatherv".into(), 10);
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"eta_eff\":0.25"), "extra figures are top-level keys: {text}");
        assert_eq!(serde_json::from_str::<StepRecord>(&text).unwrap(), s);
        let e = EpochRecord { test_perplexity: Some(80.0), ..Default::default() };
        assert_eq!(serde_json::from_str::<EpochRecord>(&serde_json::to_string(&e).unwrap()).unwrap(), e);
        assert_eq!(e.metric(), Some(80.0));
        assert_eq!(s.slowest(&[&s.compute_seconds]), Some(0.3));
    }

    #[test]
    fn step_records_written_before_the_times_were_renamed_still_read() {
        let mut old = serde_json::to_value(StepRecord::default()).unwrap();
        let fields = old.as_object_mut().unwrap();
        for name in ["compute", "compress", "communicate", "decode", "optimizer", "wall", "predicted"] {
            let v = fields.remove(&format!("{name}_seconds")).unwrap();
            fields.insert(format!("{name}_s"), v);
        }
        fields.insert("compute_s".into(), serde_json::json!([0.1, 0.3]));
        fields.insert("wall_s".into(), serde_json::json!(0.5));
        let s: StepRecord = serde_json::from_value(old).unwrap();
        assert_eq!((s.compute_seconds, s.wall_seconds), (vec![0.1, 0.3], 0.5));
        assert!(s.extra.is_empty(), "the old names are the fields', not extra figures: {:?}", s.extra);
    }

    #[test]
    fn a_damaged_record_file_is_an_error_naming_the_line() {
        let dir = std::env::temp_dir().join(format!("gradcomp-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("epochs.jsonl");
        std::fs::write(&p, "{\"epoch\":0,\"steps\":1,\"train_loss\":1.0,\"bytes_sent\":0,\"bytes_received\":0,\"wall_seconds\":0.0,\"predicted_wall_seconds\":{}}\n{\"epoch\":\n").unwrap();
        let e = read_jsonl::<EpochRecord>(&p).unwrap_err().to_string();
        assert!(e.contains("epochs.jsonl:2"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
