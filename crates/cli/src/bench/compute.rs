//! `gradcomp bench compute`: a model's forward and backward pass alone, one
//! process, one worker's batch of a run's configuration.
//!
//! Issue #26 point 3: a run that loses to PyTorch on a fast link loses to
//! either its compute or its exchange. This measures the compute on the
//! configuration's own model, data and batch per worker, with no exchange
//! and no optimizer, so `bench/peer/compute.py` can set it beside
//! PyTorch's same model in the same run. Each `--device` is a burn backend
//! (`cpu` is `flex`; `ndarray` needs its cargo feature). Threads: burn's
//! CPU backends use rayon's pool, sized by `RAYON_NUM_THREADS`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::tensor::Device;
use clap::Args as ClapArgs;
use gradcomp_train::config::TrainConfig;
use gradcomp_train::data::{Loader, TrainData};
use gradcomp_train::device::DeviceSpec;
use gradcomp_train::models::{ModelChoice, Net, WithModel};

use super::timing::median;

#[derive(ClapArgs)]
pub struct Args {
    /// The run's configuration: its model, data and batch per worker.
    #[arg(long)]
    config: PathBuf,
    /// Override a key: --set data.batch_size=32 (repeatable).
    #[arg(long)]
    set: Vec<String>,
    /// burn backends to measure, one after another in each round: cpu (flex), ndarray.
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    device: Vec<DeviceSpec>,
    /// Timed steps per round (after 3 untimed).
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Rounds; each backend runs once per round, so drift hits all alike.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// One JSON object per backend and round instead of a table.
    #[arg(long)]
    json: bool,
}

/// Steps not timed at the start of each measurement (allocator and caches warm up).
const WARM: usize = 3;

/// One backend's medians over a round, in seconds.
struct Timing {
    forward: f64,
    backward: f64,
    step: f64,
    params: usize,
}

struct Measure<'a> {
    device: Device,
    batches: &'a [gradcomp_train::data::Batch],
}

impl WithModel for Measure<'_> {
    type Output = Timing;
    fn run<M: Net>(self, make: impl Fn(&Device) -> M + Send + Sync + Clone + 'static) -> Timing {
        self.device.seed(1);
        let model = make(&self.device);
        let params = gradcomp_dp::params::layout(&model).total();
        let (mut fwd, mut bwd, mut step) = (Vec::new(), Vec::new(), Vec::new());
        for b in self.batches {
            let start = Instant::now();
            let loss = model.loss(b, &self.device);
            // Reading the loss ends the forward pass (as a loop logging it does).
            let _ = loss.clone().into_scalar::<f32>();
            let forward = start.elapsed().as_secs_f64();
            let grads = loss.backward();
            drop(grads);
            let total = start.elapsed().as_secs_f64();
            fwd.push(forward);
            bwd.push(total - forward);
            step.push(total);
        }
        let med = |v: Vec<f64>| median(v[WARM..].to_vec());
        Timing { forward: med(fwd), backward: med(bwd), step: med(step), params }
    }
}

pub fn run(a: &Args) -> Result<()> {
    if a.steps == 0 || a.rounds == 0 {
        bail!("--steps and --rounds must be at least 1");
    }
    for d in &a.device {
        d.check().map_err(anyhow::Error::msg)?;
    }
    let ov = crate::train::parse_sets(&a.set)?;
    let mut cfg =
        TrainConfig::load(&a.config, &ov).with_context(|| format!("reading {}", a.config.display()))?;
    cfg.train.eval = false;
    let data = TrainData::load(&cfg).context("loading the configuration's data")?;
    let choice = ModelChoice::new(&cfg, &data).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Worker 0's batches, as the run's first worker sees them.
    let mut loader = Loader::new(&data, &cfg, 0);
    let need = WARM + a.steps;
    if loader.batches_per_epoch() < need {
        bail!(
            "worker 0 of {} has {} batches of {} per epoch; the measurement needs {need}: lower --steps or workers",
            cfg.workers,
            loader.batches_per_epoch(),
            cfg.data.batch_size
        );
    }
    let batches: Vec<_> = (0..need).map(|i| loader.batch(0, i)).collect();
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| gradcomp_train::records::Hardware::this_machine().cores);
    if !a.json {
        println!(
            "{}: batch {} per worker, {} timed steps × {} rounds, {threads} thread(s)",
            cfg.name, cfg.data.batch_size, a.steps, a.rounds
        );
        println!("| backend | round | forward ms | backward ms | forward + backward ms |");
        println!("|---|---:|---:|---:|---:|");
    }
    for round in 0..a.rounds {
        for &d in &a.device {
            let t = choice.clone().with(Measure { device: d.device(0), batches: &batches });
            let backend = match d {
                DeviceSpec::Cpu => "flex".to_string(),
                other => String::from(other),
            };
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "framework": "burn", "backend": backend, "config": cfg.name,
                        "model": format!("{:?}", cfg.model.name).to_lowercase(),
                        "batch": cfg.data.batch_size, "threads": threads, "round": round,
                        "params": t.params, "forward_seconds": t.forward, "backward_seconds": t.backward,
                        "step_seconds": t.step,
                    })
                );
            } else {
                println!(
                    "| {backend} | {round} | {:.1} | {:.1} | {:.1} |",
                    t.forward * 1e3,
                    t.backward * 1e3,
                    t.step * 1e3
                );
            }
        }
    }
    Ok(())
}
