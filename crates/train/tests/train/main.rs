//! End-to-end training on synthetic data with every compressor and
//! topology: the loss falls, replicas agree (checksums are compared every
//! few steps; a mismatch fails the run), and bytes are counted.

use gradcomp_train::config::TrainConfig;
use gradcomp_train::trainer::{self, RunOptions, Silent};

mod bytes;
mod data;
mod learning;
mod resume;
mod strategies;

/// Merges `b` into `a`, table by table.
fn merge(a: &mut toml::Table, b: toml::Table) {
    for (k, v) in b {
        match (a.get_mut(&k), v) {
            (Some(toml::Value::Table(x)), toml::Value::Table(y)) => merge(x, y),
            (_, v) => {
                a.insert(k, v);
            }
        }
    }
}

/// The base test configuration with `extra` (TOML) merged over it.
fn config(dir: &std::path::Path, extra: &str) -> TrainConfig {
    let base = format!(
        r#"
name = "t"
run_dir = "{}"
workers = 3
seed = 5
[data]
dataset = "synthetic-images"
synthetic_size = 1200
batch_size = 16
[model]
name = "fcn5"
[optimizer]
lr = 0.05
momentum = 0.9
[train]
epochs = 2
checksum_every = 5
stats_every = 10
"#,
        dir.display()
    );
    let mut table: toml::Table = toml::from_str(&base).unwrap();
    merge(&mut table, toml::from_str(extra).unwrap_or_else(|e| panic!("{e}\n{extra}")));
    let text = toml::to_string(&table).unwrap();
    TrainConfig::from_toml(&text, &[]).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn train(extra: &str) -> (gradcomp_train::trainer::RunSummary, tempdir::Dir) {
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), extra);
    let s = trainer::train(&cfg, RunOptions::default(), Box::new(Silent))
        .unwrap_or_else(|e| panic!("{extra}: {e}"));
    (s, d)
}

mod tempdir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Self {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "gradcomp-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }
}

/// FCN-5's tensors: (784×200, 200, 200×200, 200, 200×10, 10).
const FCN5: [usize; 6] = [784 * 200, 200, 200 * 200, 200, 200 * 10, 10];

fn first_step(d: &tempdir::Dir) -> serde_json::Value {
    let steps = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap();
    serde_json::from_str(steps.lines().next().unwrap()).unwrap()
}

fn run(extra: &str) -> (gradcomp_train::trainer::RunSummary, tempdir::Dir) {
    train(extra)
}

/// The latest checkpoint's `state.bin` in run directory `d`.
fn latest_state(d: &std::path::Path) -> std::path::PathBuf {
    let name = std::fs::read_to_string(d.join("checkpoints/latest")).unwrap();
    d.join("checkpoints").join(name.trim()).join("state.bin")
}

/// Runs `extra` uninterrupted, then again stopped (as by Ctrl-C) after
/// `stop_at` steps and resumed; returns (uninterrupted, resumed) summaries.
fn interrupted_and_resumed(
    extra: &str,
    stop_at: u64,
) -> (gradcomp_train::trainer::RunSummary, gradcomp_train::trainer::RunSummary) {
    let (full, _d) = train(extra);
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), extra);
    let part = stopped_at(&cfg, stop_at, false);
    assert!(part.steps < full.steps);
    let rest =
        trainer::train(&cfg, RunOptions { resume: true, ..Default::default() }, Box::new(Silent)).unwrap();
    assert!(!rest.interrupted);
    assert_eq!(rest.steps, full.steps);
    (full, rest)
}

/// A run (`resume`: a resumed one, changes allowed) stopped with its
/// checkpoint once about `at` steps of its epochs are done.
fn stopped_at(cfg: &TrainConfig, at: u64, resume: bool) -> gradcomp_train::trainer::RunSummary {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    struct StopAt(Arc<AtomicBool>, u64);
    impl trainer::Observer for StopAt {
        fn step(&mut self, p: &trainer::Progress) {
            if u64::from(p.epoch) * p.steps_per_epoch + p.step_in_epoch >= self.1 {
                self.0.store(true, Ordering::SeqCst);
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let opts = RunOptions { stop: Arc::clone(&stop), resume, allow_changes: resume, ..Default::default() };
    let part = trainer::train(cfg, opts, Box::new(StopAt(stop, at))).unwrap();
    assert!(part.interrupted);
    part
}
