//! What a run writes: `runs/<name>/{config.toml, manifest.json, steps.jsonl,
//! epochs.jsonl}`. Written by rank 0; lines are flushed as they are made so a
//! run that dies leaves its records up to that point.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// One step, as written to `steps.jsonl`.
#[derive(Clone, Debug, Default, Serialize)]
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
    pub compute_s: Vec<f64>,
    pub compress_s: Vec<f64>,
    pub communicate_s: Vec<f64>,
    pub decode_s: Vec<f64>,
    pub optimizer_s: Vec<f64>,
    /// Measured wall-clock of the step on rank 0.
    pub wall_s: f64,
    /// Predicted step time on a cluster at each link speed (bit/s → s).
    pub predicted_s: BTreeMap<String, f64>,
    pub residual_norm: f64,
    /// ‖u − C(u)‖²/‖u‖² and its two bounds (1 − k/d), (1 − k/d)², when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contraction: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_classic: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_tight: Option<f64>,
    /// TernGrad's ‖g‖∞‖g‖₁/‖g‖² per compressed unit, when measured.
    #[serde(skip_serializing_if = "Vec::is_empty")]
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

/// One epoch, as written to `epochs.jsonl`.
#[derive(Clone, Debug, Default, Serialize)]
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
    /// Cumulative bytes sent by all workers through gradient collectives.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Cumulative measured wall-clock seconds of training (evaluation excluded).
    pub wall_seconds: f64,
    /// Cumulative predicted wall-clock at each link speed (bit/s → s).
    pub predicted_wall_seconds: BTreeMap<String, f64>,
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

    pub fn write<T: Serialize>(&mut self, v: &T) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, v)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
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
