//! `gradcomp bench train`: the trainer's own cost.
//!
//! 1. Overhead: steps/s (1 / median step time) of `gradcomp`'s trainer with
//!    one worker and no compression, against a plain burn loop (burn's SGD
//!    optimizer; its minibatches made before timing) on the same model and
//!    data, measured in one run; and the library API's
//!    own cost: the same plain loop with `DataParallel::sync` between
//!    `backward` and the optimizer (one in-process worker, dense), per step.
//! 2. Compression overhead: time in compression and decoding as a fraction
//!    of forward/backward time, for TernGrad and Gaussian-k.
//! 3. Peak memory of N in-process workers (a child `gradcomp train`).
//!
//! `--model` picks LeNet-5 (the default) or ResNet-18, `--device` where it
//! trains, `--compressor` what the API loop compresses with.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Device;
use clap::Args as ClapArgs;
use gradcomp_comm::InProcessGroup;
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::{CompressionLocation, DataParallelConfig, InitDataParallel};
use gradcomp_train::config::TrainConfig;
use gradcomp_train::data::{synthetic, ImageLoader};
use gradcomp_train::device::DeviceSpec;
use gradcomp_train::models::{ImageTask, LeNet5, Net, ResNet18};
use gradcomp_train::records::{read_jsonl, StepRecord};
use gradcomp_train::trainer::{self, RunOptions, Silent};

use super::timing::median;

#[derive(ClapArgs)]
pub struct Args {
    /// Training steps per measurement.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Minibatch per worker.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Workers for the peak-memory measurement (0 skips it).
    #[arg(long, default_value_t = 16)]
    memory_workers: usize,
    /// Where to train: cpu, cuda, cuda:N, wgpu (GPU backends need their cargo feature).
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Alternating rounds of the overhead measurement.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The model: lenet5 (1×28×28) or resnet18 (CIFAR form, 3×32×32).
    #[arg(long, default_value = "lenet5", value_parser = ["lenet5", "resnet18"])]
    model: String,
    /// The compressor of the library-API loop, whose exchange cost is
    /// reported against the step (on a GPU it compresses on the device).
    #[arg(long, default_value = "dense")]
    compressor: String,
    /// Compress on the host even when the model is on a GPU
    /// (`compression.on_device = false`), to compare the two exchanges.
    #[arg(long)]
    host_exchange: bool,
}

impl Args {
    /// The image shape the model takes.
    fn task(&self) -> ImageTask {
        super::output::image_task(&self.model)
    }

    fn model_label(&self) -> &'static str {
        if self.model == "resnet18" {
            "ResNet-18"
        } else {
            "LeNet-5"
        }
    }
}

fn base_config(run_dir: &Path, a: &Args, steps: usize, extra: &[(&str, &str)]) -> Result<TrainConfig> {
    let batch = a.batch;
    let mut ov: Vec<(String, String)> = vec![
        ("device".into(), format!("\"{}\"", String::from(a.device))),
        ("name".into(), "\"bench\"".into()),
        ("run_dir".into(), format!("\"{}\"", run_dir.display())),
        ("data.dataset".into(), "\"synthetic-images\"".into()),
        ("data.synthetic_size".into(), (batch * steps).to_string()),
        ("data.synthetic_shape".into(), format!("{:?}", a.task().shape)),
        ("data.batch_size".into(), batch.to_string()),
        ("model.name".into(), format!("\"{}\"", a.model)),
        ("train.epochs".into(), "1".into()),
        ("train.eval".into(), "false".into()),
        ("train.checksum_every".into(), "0".into()),
        ("train.stats_every".into(), "0".into()),
        ("train.checkpoint_every_epochs".into(), "0".into()),
    ];
    ov.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Ok(TrainConfig::from_toml("", &ov)?)
}

/// Steps not timed at the start of each measurement.
const WARM: usize = 5;

/// What one timed burn loop measured.
struct LoopSpeed {
    /// 1 / the median step time (medians resist this shared machine's noise).
    steps_per_s: f64,
    /// With the API: median seconds per step inside `sync`, and its parts.
    sync_s: Option<SyncParts>,
    /// With the API: where it compressed, and the model's parameter count.
    site: String,
    params: usize,
}

struct SyncParts {
    total: f64,
    read: f64,
    control: f64,
    exchange: f64,
    write: f64,
}

/// Steps/s of a plain burn loop (forward, backward, burn's SGD with momentum)
/// on the model and the same synthetic minibatches the trainer sees; with
/// `api`, `DataParallel::sync` (the `--compressor`) runs between backward and
/// the optimizer.
fn burn_loop(a: &Args, api: bool) -> Result<LoopSpeed> {
    let device = a.device.device(0);
    device.seed(1);
    let task = a.task();
    if a.model == "resnet18" {
        timed_loop(a, api, ResNet18::new(&task, &device), &device)
    } else {
        timed_loop(a, api, LeNet5::new(&task, &device), &device)
    }
}

fn timed_loop<M: Net>(a: &Args, api: bool, mut model: M, device: &Device) -> Result<LoopSpeed> {
    let (batch, steps) = (a.batch, a.steps);
    let task = a.task();
    let data = synthetic::images(batch * steps, 1, 0, task.shape, task.classes);
    let mut loader = ImageLoader::shard(data, 0, 1, batch, 1);
    let batches: Vec<_> = (0..loader.batches_per_epoch()).map(|i| loader.batch(0, i)).collect();
    let mut dp = None;
    if api {
        let compressor = CompressorConfig::named(&a.compressor)
            .with_context(|| format!("--compressor {}: not a compressor name", a.compressor))?;
        let c = InProcessGroup::new(1).build()?.pop().expect("one worker");
        let (handle, m) = DataParallelConfig::new(compressor)
            .with_checksum_every(0)
            .with_on_device(!a.host_exchange)
            .init(c, model)?;
        dp = Some(handle);
        model = m;
    }
    let mut optim = SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9).with_dampening(0.0)))
        .init();
    let mut parts = Vec::new();
    let mut step_s = Vec::new();
    for b in &batches {
        let start = Instant::now();
        let loss = model.loss(b, device);
        // Read the loss as a training loop logging it does (and the trainer does):
        // on a GPU this waits for the step, so step times are not enqueue times.
        let _ = loss.clone().into_scalar::<f32>();
        let grads = loss.backward();
        // On a GPU the backward pass runs asynchronously: wait for it, so that
        // the time inside `sync` is the exchange's own, not the backward's.
        device.sync().map_err(|e| anyhow::anyhow!("the device failed: {e:?}"))?;
        model = match &mut dp {
            Some(dp) => {
                let t = Instant::now();
                let model = dp.step(model, grads, &mut optim, 0.01)?;
                let s = dp.last_step();
                // The step's own part: all but the optimizer, which both loops run.
                parts.push(SyncParts {
                    total: t.elapsed().as_secs_f64() - s.optimizer_seconds,
                    read: s.read_seconds,
                    control: s.control_seconds,
                    exchange: s.exchange.compress_seconds
                        + s.exchange.communicate_seconds
                        + s.exchange.decode_seconds,
                    write: s.write_seconds,
                });
                model
            }
            None => {
                let grads = GradientsParams::from_grads(grads, &model);
                optim.step(0.01, model, grads)
            }
        };
        step_s.push(start.elapsed().as_secs_f64());
    }
    let steps_per_s = 1.0 / median(step_s[WARM..].to_vec());
    let parts = &parts[parts.len().min(WARM)..];
    let med = |f: fn(&SyncParts) -> f64| median(parts.iter().map(f).collect());
    let sync_s = api.then(|| SyncParts {
        total: med(|p| p.total),
        read: med(|p| p.read),
        control: med(|p| p.control),
        exchange: med(|p| p.exchange),
        write: med(|p| p.write),
    });
    let site = match dp.as_ref().map(|dp| dp.compression_location()) {
        Some(CompressionLocation::Device) => "on the device".to_string(),
        Some(CompressionLocation::Host(why)) => format!("on the host: {why}"),
        _ => String::new(),
    };
    Ok(LoopSpeed { steps_per_s, sync_s, site, params: gradcomp_dp::params::layout(&model).total() })
}

pub fn run(a: &Args) -> Result<()> {
    if a.steps < 10 || a.batch == 0 || a.rounds == 0 {
        bail!("--steps must be at least 10, --batch and --rounds at least 1");
    }
    let tmp = std::env::temp_dir().join(format!("gradcomp-bench-train-{}", std::process::id()));

    // 1. Alternate the plain burn loop, the loop with the API and the
    // trainer, `rounds` times each, so machine noise hits all alike; report
    // each round and the medians.
    overhead(a, &tmp)?;

    // 2. Compression overhead against compute, one worker so nothing else competes for the cores.
    compression_overhead(a, &tmp)?;
    std::fs::remove_dir_all(&tmp).ok();

    // 3. Peak memory of N in-process workers, in a child process so the figure is its own.
    if a.memory_workers > 0 {
        peak_memory(a, &tmp)?;
    }
    Ok(())
}

/// Prints the plain burn loop's, the API loop's and the trainer's speeds,
/// round by round (the trainer's runs under `tmp`), then the medians of
/// their ratios, the parts of `sync` and its share of the API loop's step.
fn overhead(a: &Args, tmp: &Path) -> Result<()> {
    let (mut ratios, mut api_ratios, mut syncs) = (Vec::new(), Vec::new(), Vec::new());
    let mut api_site = (String::new(), 0, 0.0);
    println!(
        "trainer overhead ({}, batch {}, {} steps, 1 worker, no compression; the API loop with {}):",
        a.model_label(),
        a.batch,
        a.steps,
        a.compressor
    );
    for round in 0..a.rounds {
        let plain = burn_loop(a, false)?.steps_per_s;
        let api = burn_loop(a, true)?;
        let dir = tmp.join(format!("dense-{round}"));
        let cfg = base_config(&dir, a, a.steps, &[("compressor.name", "\"dense\"")])?;
        trainer::train(&cfg, RunOptions::default(), Box::new(Silent))?;
        let walls: Vec<f64> = read_steps(&dir)?.iter().map(|s| s.wall_seconds).collect();
        let ours = 1.0 / median(walls[WARM..].to_vec());
        println!(
            "  round {}: plain burn loop {plain:7.1} steps/s, with DataParallel::sync {:7.1} steps/s ({:.3}), gradcomp trainer {ours:7.1} steps/s ({:.3})",
            round + 1,
            api.steps_per_s,
            api.steps_per_s / plain,
            ours / plain
        );
        ratios.push(ours / plain);
        api_ratios.push(api.steps_per_s / plain);
        syncs.extend(api.sync_s);
        api_site = (api.site, api.params, api.steps_per_s);
    }
    let r = median(ratios);
    println!(
        "  median ratio, trainer / plain loop {r:.3}   (target >= 0.90: {})",
        if r >= 0.9 { "met" } else { "MISSED" }
    );
    let ms = |f: fn(&SyncParts) -> f64| median(syncs.iter().map(f).collect()) * 1e3;
    println!(
        "  library API: median ratio {:.3}; sync {:.3} ms per step = read-out {:.3} + non-finite check and agreement {:.3} + exchange {:.3} + hand-back {:.3} ({} parameters, {} compressing {})",
        median(api_ratios),
        ms(|p| p.total),
        ms(|p| p.read),
        ms(|p| p.control),
        ms(|p| p.exchange),
        ms(|p| p.write),
        api_site.1,
        a.compressor,
        api_site.0,
    );
    // The GPU target: the exchange at N = 1 costs at most 5% of the step.
    let share = ms(|p| p.total) / 1e3 * api_site.2;
    println!(
        "  sync's share of the API loop's step: {:.1}% (target on a GPU <= 5%: {})",
        share * 100.0,
        if share <= 0.05 { "met" } else { "MISSED" }
    );
    Ok(())
}

/// Prints the time TernGrad and Gaussian-k spend compressing and decoding
/// against the compute time, from trainer runs under `tmp`.
fn compression_overhead(a: &Args, tmp: &Path) -> Result<()> {
    println!("compression overhead ({}, 1 worker; median per step):", a.model_label());
    for (name, extra) in [
        ("terngrad", vec![("compressor.name", "\"terngrad\"")]),
        (
            "gaussiank",
            vec![
                ("compressor.name", "\"gaussiank\""),
                ("compressor.density", "0.001"),
                ("comm.topology", "\"allgather\""),
            ],
        ),
    ] {
        let dir = tmp.join(name);
        let cfg = base_config(&dir, a, a.steps, &extra)?;
        trainer::train(&cfg, RunOptions::default(), Box::new(Silent))?;
        let steps = read_steps(&dir)?;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let compute = median(steps.iter().map(|s| mean(&s.compute_seconds)).collect());
        let compress = median(steps.iter().map(|s| mean(&s.compress_seconds)).collect());
        let decode = median(steps.iter().map(|s| mean(&s.decode_seconds)).collect());
        let frac = (compress + decode) / compute;
        println!(
            "  {name:<10} compute {:7.2} ms  compress {:6.3} ms  memory update {:6.3} ms  = {:5.1}% of compute (target <= 10%: {})",
            compute * 1e3,
            compress * 1e3,
            decode * 1e3,
            frac * 100.0,
            if frac <= 0.10 { "met" } else { "MISSED" }
        );
    }
    Ok(())
}

/// Prints the peak memory of `--memory-workers` in-process workers: a child
/// `gradcomp train` with its configuration and run directory under `tmp`
/// (removed afterwards).
fn peak_memory(a: &Args, tmp: &Path) -> Result<()> {
    let exe = std::env::current_exe().context("locating the gradcomp binary")?;
    let dir = tmp.join("memory");
    let cfg = tmp.join("memory.toml");
    std::fs::create_dir_all(tmp)?;
    std::fs::write(
        &cfg,
        base_config(&dir, a, a.memory_workers * 20, &[("workers", &a.memory_workers.to_string())])?.to_toml(),
    )?;
    let out = std::process::Command::new(exe).args(["train", "--quiet", "--config"]).arg(&cfg).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("the memory run failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let peak = text.lines().find_map(|l| l.strip_prefix("peak memory: ")).unwrap_or("?").to_string();
    println!(
        "peak memory with {} in-process {} workers: {peak} (target <= 2048 MB)",
        a.memory_workers,
        a.model_label()
    );
    std::fs::remove_dir_all(tmp).ok();
    Ok(())
}

/// A run's step records.
fn read_steps(dir: &Path) -> Result<Vec<StepRecord>> {
    Ok(read_jsonl(&dir.join("steps.jsonl"))?)
}
