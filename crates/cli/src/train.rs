//! `gradcomp train` and `gradcomp eval`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use gradcomp_dp::exchange::auto_plan::PlanInputs;
use gradcomp_dp::CompressionLocation;
use gradcomp_train::config::{parse_override, ConfigError, TrainConfig};
use gradcomp_train::records::EpochRecord;
use gradcomp_train::trainer::{self, Observer, Progress, RunOptions, TrainError};

use crate::user_error::UserError;

#[derive(ClapArgs)]
pub struct TrainArgs {
    /// The run's configuration (TOML); see experiments/ for ready ones.
    #[arg(long)]
    config: PathBuf,
    /// Override a key: --set compressor.density=0.01 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Continue from the run directory's latest checkpoint.
    #[arg(long)]
    resume: bool,
    /// Replace a run already in the run directory (otherwise an error).
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// With --resume: accept changed values of the keys that keep the run's
    /// meaning (epochs, max_steps, device, evaluation and checkpoint
    /// intervals, data.dir, timeouts); other changes are always refused.
    #[arg(long, requires = "resume")]
    allow_change: bool,
    /// Print only the final summary.
    #[arg(long)]
    quiet: bool,
    /// Where the datasets are (default $GRADCOMP_DATA or ~/.cache/gradcomp/data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// `in-process` (default: N threads) or `mpi` (under `mpirun -np N`).
    #[arg(long)]
    backend: Option<String>,
    /// `cpu` (default), `cuda`, `cuda:N` or `wgpu` (builds with `--features cuda` / `wgpu`).
    #[arg(long)]
    device: Option<String>,
    /// Write the number of steps done to this file after every step (one
    /// line, rewritten in place): for a supervisor such as `gradcomp launch`,
    /// since `steps.jsonl` is written in batches.
    #[arg(long, value_name = "FILE")]
    progress_file: Option<PathBuf>,
}

#[derive(ClapArgs)]
pub struct EvalArgs {
    /// A run directory with a checkpoint.
    run: PathBuf,
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// `--set KEY=VALUE` arguments as overrides; shared with `gradcomp model`.
pub fn parse_sets(sets: &[String]) -> Result<Vec<(String, String)>, UserError> {
    sets.iter().map(|s| parse_override(s).map_err(|e| UserError(e.to_string()))).collect()
}

impl TrainArgs {
    /// How this run is asked to start: resume, overwrite, or neither.
    pub fn start_flags(&self) -> (bool, bool, bool) {
        (self.resume, self.overwrite, self.allow_change)
    }

    pub fn backend(&self) -> Option<&str> {
        self.backend.as_deref()
    }

    pub fn progress_file(&self) -> Option<&std::path::Path> {
        self.progress_file.as_deref()
    }

    /// The arguments that say what to train (configuration, overrides,
    /// data, device, quiet), for `gradcomp train` under `gradcomp launch`;
    /// how to start (resume, overwrite) and the backend are the caller's.
    pub fn what_to_train(&self) -> Vec<std::ffi::OsString> {
        let mut out: Vec<std::ffi::OsString> = vec!["--config".into(), self.config.clone().into()];
        for s in &self.set {
            out.extend(["--set".into(), s.into()]);
        }
        if let Some(d) = &self.data_dir {
            out.extend(["--data-dir".into(), d.clone().into()]);
        }
        if let Some(d) = &self.device {
            out.extend(["--device".into(), d.into()]);
        }
        if self.quiet {
            out.push("--quiet".into());
        }
        out
    }

    /// The configuration as `train` would load it.
    pub fn load_config(&self) -> Result<TrainConfig> {
        TrainConfig::load(&self.config, &overrides(self)?).map_err(config_error)
    }
}

fn overrides(a: &TrainArgs) -> Result<Vec<(String, String)>, UserError> {
    let mut out = parse_sets(&a.set)?;
    if let Some(d) = &a.data_dir {
        out.push(("data.dir".into(), format!("\"{}\"", d.display())));
    }
    if let Some(b) = &a.backend {
        out.push(("backend".into(), format!("\"{b}\"")));
    }
    if let Some(d) = &a.device {
        out.push(("device".into(), format!("\"{d}\"")));
    }
    Ok(out)
}

/// A progress bar on a terminal, plain lines otherwise.
struct Printer {
    tty: bool,
    quiet: bool,
    start: Instant,
    last_line: Instant,
    /// Whether the line saying where compression runs was printed.
    location_shown: bool,
    /// `--progress-file`.
    progress_file: Option<std::fs::File>,
}

impl Printer {
    fn status(p: &Progress) -> String {
        let metric = match (p.last_accuracy, p.last_perplexity) {
            (Some(a), _) => format!(" acc {:.2}%", a * 100.0),
            (_, Some(ppl)) => format!(" ppl {ppl:.1}"),
            _ => String::new(),
        };
        format!(
            "epoch {}/{} step {}/{} loss {:.4}{} sent {:.1} MB",
            p.epoch + 1,
            p.epochs,
            p.step_in_epoch,
            p.steps_per_epoch,
            p.loss,
            metric,
            p.bytes_sent as f64 / 1e6
        )
    }
}

impl Observer for Printer {
    fn step(&mut self, p: &Progress) {
        if let Some(f) = &self.progress_file {
            // One fixed-width write at offset 0: a reader sees the old
            // number or the new one. A failed write costs the supervisor
            // precision, never the run.
            use std::os::unix::fs::FileExt;
            let _ = f.write_at(format!("{:>20}\n", p.step).as_bytes(), 0);
        }
        if self.quiet {
            return;
        }
        if !self.location_shown {
            self.location_shown = true;
            match &p.location {
                CompressionLocation::Device => {
                    eprintln!("compressing on the GPU: gradients and memories stay in device memory")
                }
                CompressionLocation::Host(why) => eprintln!("compressing on the host ({why})"),
                CompressionLocation::Undecided => self.location_shown = false,
            }
        }
        if self.tty {
            let width = 30;
            let done = (p.step_in_epoch as usize * width) / p.steps_per_epoch.max(1) as usize;
            eprint!("\r[{}{}] {}\x1b[K", "#".repeat(done), ".".repeat(width - done), Self::status(p));
        } else if self.last_line.elapsed().as_secs_f64() > 10.0 {
            eprintln!("{} ({:.0} s)", Self::status(p), self.start.elapsed().as_secs_f64());
            self.last_line = Instant::now();
        }
    }

    fn epoch(&mut self, r: &EpochRecord) {
        if self.quiet {
            return;
        }
        if self.tty {
            eprint!("\r\x1b[K");
        }
        let metric = match (r.test_accuracy, r.test_perplexity) {
            (Some(a), _) => format!("test accuracy {:.2}%", a * 100.0),
            (_, Some(p)) => format!("test perplexity {p:.2}"),
            _ => "no evaluation".into(),
        };
        eprintln!(
            "epoch {}: train loss {:.4}, {metric}, sent {:.1} MB, {:.1} s",
            r.epoch + 1,
            r.train_loss,
            r.bytes_sent as f64 / 1e6,
            r.wall_seconds
        );
    }
}

/// The configuration, its `strategy.plan = "auto"` resolved: chosen now
/// (each decision printed), or on a resume the plan the run chose.
fn load_with_plan(a: &TrainArgs) -> Result<(TrainConfig, Option<PlanInputs>)> {
    let mut cfg = a.load_config()?;
    if a.resume {
        crate::plan::frozen(&mut cfg)?;
        return Ok((cfg, None));
    }
    let (lines, inputs) = crate::plan::resolve(&mut cfg)?;
    for line in lines {
        eprintln!("{line}");
    }
    Ok((cfg, inputs))
}

/// The run's progress display: stderr (a bar on a terminal), and the
/// `--progress-file` where given.
fn printer(a: &TrainArgs, cfg: &TrainConfig) -> Result<Printer> {
    let progress_file = match &a.progress_file {
        // Not truncated: under MPI every rank opens it, and only rank 0 writes.
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| UserError(format!("--progress-file {}: {e}", path.display())))?,
        ),
        None => None,
    };
    Ok(Printer {
        progress_file,
        tty: std::io::stderr().is_terminal(),
        quiet: a.quiet,
        start: Instant::now(),
        last_line: Instant::now(),
        // On the CPU there is nothing to say about where compression runs.
        location_shown: cfg.device == gradcomp_train::device::DeviceSpec::Cpu,
    })
}

pub fn run(a: &TrainArgs) -> Result<()> {
    // Signals first: one that arrives while the data loads still stops the
    // run cleanly, with its exit code.
    let stop = Arc::new(AtomicBool::new(false));
    let signal = stop_on_signals(&stop)?;
    let (cfg, replan) = load_with_plan(a)?;
    let printer = printer(a, &cfg)?;
    let opts = RunOptions {
        resume: a.resume,
        overwrite: a.overwrite,
        allow_changes: a.allow_change,
        stop,
        fault: None,
        replan,
    };
    let summary = trainer::train(&cfg, opts, Box::new(printer)).map_err(train_error)?;
    if summary.epochs.is_empty() && summary.steps == 0 {
        return Ok(()); // an MPI rank other than 0
    }
    let last = summary.epochs.last();
    println!("run: {}", summary.run_dir.display());
    if let Some(r) = last {
        if let Some(acc) = r.test_accuracy {
            println!("test accuracy: {:.2}%", acc * 100.0);
        }
        if let Some(p) = r.test_perplexity {
            println!("test perplexity: {p:.2}");
        }
        println!("train loss: {:.4}", r.train_loss);
        println!("bytes sent (all workers): {:.1} MB", r.bytes_sent as f64 / 1e6);
        println!("wall-clock (training): {:.1} s", r.wall_seconds);
        for (bps, s) in &r.predicted_wall_seconds {
            let bps: f64 = bps.parse().unwrap_or(0.0);
            println!("predicted on a {} cluster: {:.1} s", human_bps(bps), s);
        }
    }
    if let Some(step) = summary.reached_target {
        println!(
            "reached the target at step {step}: stopped there (evals.jsonl has the accuracy or perplexity against wall-clock)"
        );
    }
    if let Some(peak) = peak_memory_mb() {
        println!("peak memory: {peak:.0} MB");
    }
    // The same seeds give the same bits only on the same kind of CPU (RESULTS.md).
    let (checksum, numerics) = (summary.params_checksum, gradcomp_train::machine::numerics());
    println!("parameter checksum: {checksum:016x} (on {numerics})");
    println!(
        "steps: {}{}",
        summary.steps,
        if summary.interrupted { " (interrupted; resume with --resume)" } else { "" }
    );
    // An interrupted run is not a finished one: exit as the signal asks
    // (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, 138 for SIGUSR1),
    // its checkpoint safe.
    let sig = signal.load(Ordering::SeqCst);
    if summary.interrupted && sig > 0 {
        std::process::exit(128 + sig);
    }
    Ok(())
}

/// SIGINT, SIGTERM and SIGHUP (what Ctrl-C, `timeout`, Docker, Kubernetes,
/// Slurm and a closed terminal send) and SIGUSR1 all set `stop`: the workers
/// agree to stop, write a checkpoint and return. A second signal exits at
/// once. SIGUSR1 is the one `mpirun` forwards to every rank and waits on
/// (SIGTERM it turns into SIGKILL within seconds), so it is how a
/// checkpoint is asked of an MPI job: `gradcomp launch` sends it, as does
/// Slurm's `--signal=USR1@T` before a time limit.
/// Returns the number of the first signal (0 until one arrives).
fn stop_on_signals(stop: &Arc<AtomicBool>) -> Result<Arc<std::sync::atomic::AtomicI32>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let first = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1])?;
    let (stop, seen) = (Arc::clone(stop), Arc::clone(&first));
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(128 + sig);
            }
            seen.store(sig, Ordering::SeqCst);
            let name = match sig {
                SIGTERM => "SIGTERM",
                SIGHUP => "SIGHUP",
                SIGUSR1 => "SIGUSR1",
                _ => "interrupt",
            };
            eprintln!("\n{name}: checkpointing at the next step (signal again to quit now)");
        }
    });
    Ok(first)
}

/// The process's peak resident memory (Linux `VmHWM`), in MB.
fn peak_memory_mb() -> Option<f64> {
    gradcomp_train::machine::proc_kb("/proc/self/status", "VmHWM").map(|kb| kb / 1024.0)
}

fn human_bps(b: f64) -> String {
    if b >= 1e9 {
        format!("{} Gbit/s", b / 1e9)
    } else {
        format!("{} Mbit/s", b / 1e6)
    }
}

fn config_error(e: ConfigError) -> anyhow::Error {
    UserError(e.to_string()).into()
}

fn train_error(e: TrainError) -> anyhow::Error {
    match e {
        TrainError::Config(c) => config_error(c),
        TrainError::Data(d) => UserError(d.to_string()).into(),
        other => anyhow::Error::new(other),
    }
}

pub fn eval(a: &EvalArgs) -> Result<()> {
    let (cfg, stats) = trainer::evaluate_run(&a.run, a.data_dir.as_deref())
        .map_err(train_error)
        .with_context(|| format!("evaluating {}", a.run.display()))?;
    if cfg.is_language_model() {
        println!("test perplexity: {:.2} ({} tokens)", stats.perplexity(), stats.count);
    } else {
        println!(
            "test accuracy: {:.2}% ({} examples), loss {:.4}",
            stats.accuracy() * 100.0,
            stats.count,
            stats.mean_loss()
        );
    }
    Ok(())
}
