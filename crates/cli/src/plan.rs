//! `strategy.plan = "auto"` at the CLI's edge: the run's communication-free
//! step measured on this machine (its N workers stepping in process, no
//! exchange), its length read from the data, its link from the
//! configuration; the core's rule ([`gradcomp_dp::exchange::auto_plan`])
//! chooses, and the choice is printed line by line and written into the
//! configuration, so the run directory's `config.toml` is the plan frozen.

use anyhow::{bail, Context, Result};
use gradcomp_comm::NetworkModel;
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::exchange::auto_plan::{choose_here, AutoPlan, PlanInputs};
use gradcomp_train::config::{Backend, OuterConfig, PlanChoice, StrategyConfig, TrainConfig};
use gradcomp_train::records::{read_json, read_jsonl, Manifest, StepRecord};
use gradcomp_train::trainer::{self, Observer, Progress, RunOptions};

use crate::bench::timing::median;

/// Steps the profile times (the first two, warming up, are left out).
const PROFILE_STEPS: u64 = 8;

/// Reads the profile run's steps per epoch.
struct Length(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Observer for Length {
    fn step(&mut self, p: &Progress) {
        self.0.store(p.steps_per_epoch, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `cfg` as a run that only measures: `steps` steps in process into `dir`,
/// one epoch at most, no evaluation, target, checksum, statistics or
/// checkpoint. The caller sets what it measures (workers, exchange).
pub fn measuring_run(cfg: &TrainConfig, dir: &std::path::Path, steps: u64) -> TrainConfig {
    let mut p = cfg.clone();
    p.run_dir = Some(dir.to_path_buf());
    p.backend = Backend::InProcess;
    p.train.max_steps = steps;
    p.train.epochs = 1;
    p.train.eval = false;
    p.train.eval_every = 0;
    p.train.target_accuracy = None;
    p.train.target_perplexity = None;
    p.train.checksum_every = 0;
    p.train.stats_every = 0;
    p.train.checkpoint_every_epochs = 0;
    p.train.checkpoint_every_steps = 0;
    p
}

/// What the rule decides from, measured: `cfg`'s N workers stepping in
/// this process with no exchange (local updates whose first round would
/// come after the profile), the median step of rank 0 after the first two,
/// the model's tensors, and the run's steps from its data and epochs. The
/// link: `link_bps`, else the first of `network.links_bps`.
pub fn measure_inputs(cfg: &TrainConfig, link_bps: Option<f64>) -> Result<PlanInputs> {
    let Some(bps) = link_bps.or_else(|| cfg.network.links_bps.first().copied()) else {
        bail!("strategy.plan = \"auto\" prices a link: set network.links_bps (its first is the run's link)");
    };
    let dir = std::env::temp_dir().join(format!("gradcomp-plan-{}", std::process::id()));
    let mut p = measuring_run(cfg, &dir, PROFILE_STEPS);
    // The change through fp4 (its rounds' units are the model's tensors, which
    // the manifest lists); the first round comes after the profile's steps.
    p.compressor = CompressorConfig::named("fp4").expect("fp4 is built in");
    p.comm.topology = None;
    p.strategy = StrategyConfig::local(PROFILE_STEPS + 1)
        .with_outer(OuterConfig::sgd(1.0, 0.0))
        .with_compress_change(true);
    let per_epoch = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    trainer::train(&p, RunOptions::default(), Box::new(Length(per_epoch.clone())))
        .context("measuring the communication-free step for plan = \"auto\"")?;
    let steps: Vec<StepRecord> = read_jsonl(&dir.join("steps.jsonl"))?;
    let manifest: Manifest = read_json(&dir.join("manifest.json"))?;
    std::fs::remove_dir_all(&dir).ok();
    let step: Vec<f64> = steps.iter().skip(2).filter_map(|s| s.compute_seconds.first().copied()).collect();
    if step.is_empty() || manifest.units.is_empty() {
        bail!("the profile for plan = \"auto\" recorded no steps or no tensors");
    }
    let per_epoch = per_epoch.load(std::sync::atomic::Ordering::Relaxed);
    let planned = per_epoch * u64::from(cfg.train.epochs.max(1));
    let total_steps = if cfg.train.max_steps > 0 { cfg.train.max_steps.min(planned) } else { planned };
    Ok(PlanInputs {
        step_seconds: median(step),
        link: NetworkModel::from_bits_per_second(bps, cfg.network.alpha),
        workers: cfg.workers,
        shapes: manifest.units.iter().map(|u| u.shape.clone()).collect(),
        total_steps,
    })
}

/// The inputs' summary, each decision and the predicted local step, one line each.
pub fn lines(inputs: &PlanInputs, plan: &AutoPlan) -> Vec<String> {
    let mut out = plan.explain(inputs, "measured, no exchange", "");
    out.push(format!("  predicted local step: {:.1} ms", plan.local_step_seconds * 1e3));
    out
}

/// Resolves `cfg`'s `strategy.plan = "auto"` in place (a no-op for
/// `given`), returning the lines that explain it and the inputs it was
/// chosen for (with which the workers decide its period again on drift).
/// Under MPI every rank
/// would measure its own step and might choose another plan: refused, with
/// the way to freeze the plan first.
pub fn resolve(cfg: &mut TrainConfig) -> Result<(Vec<String>, Option<PlanInputs>)> {
    if cfg.strategy.plan != PlanChoice::Auto {
        return Ok((Vec::new(), None));
    }
    if cfg.backend == Backend::Mpi {
        bail!(crate::user_error::UserError(
            "strategy.plan = \"auto\" measures the step in one process; under MPI each rank would choose alone. \
             Freeze the plan first: `gradcomp model --plan --config FILE` prints its --set keys"
                .into()
        ));
    }
    let inputs = measure_inputs(cfg, None)?;
    let plan = choose_here(&inputs);
    let mut dp = cfg.data_parallel();
    plan.apply(&mut dp);
    cfg.strategy = dp.strategy;
    cfg.compressor = match dp.compressor.builtin() {
        Some(c) => c.clone(),
        None => bail!("the plan chose a compressor of the user's own"),
    };
    cfg.comm.topology = dp.topology;
    Ok((lines(&inputs, &plan), Some(inputs)))
}

/// On a resume, `strategy.plan = "auto"` is the plan the run chose at its
/// start, frozen in its `config.toml`: its keys replace `cfg`'s (a new
/// measurement could choose another plan, and the checkpoint fits only its own).
pub fn frozen(cfg: &mut TrainConfig) -> Result<()> {
    if cfg.strategy.plan != PlanChoice::Auto {
        return Ok(());
    }
    let path = cfg.run_dir().join("config.toml");
    let saved = TrainConfig::load(&path, &[])
        .map_err(|e| anyhow::anyhow!("{}: {e} (the plan the run chose at its start)", path.display()))?;
    cfg.strategy = saved.strategy;
    cfg.compressor = saved.compressor;
    cfg.comm.topology = saved.comm.topology;
    Ok(())
}

/// `gradcomp model --plan`: the plan for `cfg` on this machine, each
/// decision with its reason, then the `--set` keys that freeze it.
pub fn print(cfg: &TrainConfig, link_bps: Option<f64>) -> Result<()> {
    let inputs = measure_inputs(cfg, link_bps)?;
    let plan = choose_here(&inputs);
    for line in lines(&inputs, &plan) {
        println!("{line}");
    }
    let sets: Vec<String> = plan.overrides().iter().map(|o| format!("--set '{o}'")).collect();
    println!("frozen: {}", sets.join(" "));
    Ok(())
}
