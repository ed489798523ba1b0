//! `gradcomp report RUN_DIR...`: a Markdown report with figures from run
//! directories: loss and test metric against epochs, bytes and wall-clock
//! (measured and predicted), bytes per step, the contraction ratio against
//! its two bounds, gradient histograms over training, and TernGrad's bound
//! ratio per layer.

mod plot;
mod runs;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use gradcomp_train::config::TrainConfig;
use gradcomp_train::records::{read_jsonl, EpochRecord, StepRecord};

use crate::bench::timing::median;

pub use plot::{Bars, Figure, Lines};
pub use runs::Run;
use runs::{human_link, links, metric_label};

#[derive(ClapArgs)]
pub struct Args {
    /// Run directories (each with config.toml, epochs.jsonl, steps.jsonl).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Where to write report.md and figures/.
    #[arg(long, default_value = "report")]
    out: PathBuf,
    /// A title for the report.
    #[arg(long, default_value = "gradcomp report")]
    title: String,
    /// Add the model-validation table: median measured step time against the
    /// median predicted one at each run's (single) configured link.
    #[arg(long)]
    validation: bool,
    /// Add the time-to-accuracy table: per run, the steps, measured and
    /// predicted wall-clock, and bytes to its `train.target_accuracy`.
    #[arg(long)]
    time_to_accuracy: bool,
    /// Also draw compression time against the number of elements d, one line
    /// per sparsifier and density, from `gradcomp bench compress --json` output.
    #[arg(long, value_name = "BENCH.jsonl")]
    selection_time: Option<PathBuf>,
}

/// The figures for a set of runs, written into `dir`; returns (stem, caption) pairs.
pub fn figures(runs: &[Run], dir: &Path) -> Result<Vec<(String, String)>> {
    std::fs::create_dir_all(dir)?;
    let lm = runs.first().is_some_and(Run::is_lm);
    let ml = metric_label(lm);
    let mut out = Vec::new();
    let mut add = |stem: &str, caption: String, f: Figure| -> Result<()> {
        f.write(dir, stem)?;
        out.push((stem.to_string(), caption));
        Ok(())
    };
    metric_figures(runs, lm, ml, &mut add)?;
    predicted_figures(runs, lm, ml, &mut add)?;
    add(
        "bytes_per_step",
        "Mean bytes sent per step, all workers".into(),
        Figure::Bars(Bars {
            title: "bytes sent per step".into(),
            y_label: "MB per step (all workers)".into(),
            log_y: true,
            bars: runs.iter().map(|r| (r.name.clone(), r.step_bytes() / 1e6)).collect(),
        }),
    )?;
    contraction_figure(runs, &mut add)?;
    histogram_figure(runs, &mut add)?;
    bound_ratio_figure(runs, &mut add)?;
    Ok(out)
}

/// What [`figures`]' helpers hand each figure to: writes it under its stem
/// and records its caption.
type AddFigure<'a> = dyn FnMut(&str, String, Figure) -> Result<()> + 'a;

/// A line figure: one `(name, points)` series per line.
fn line(
    title: &str,
    x: &str,
    y: &str,
    log_x: bool,
    log_y: bool,
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> Figure {
    Figure::Lines(Lines { title: title.into(), x_label: x.into(), y_label: y.into(), log_x, log_y, series })
}

/// Training loss per epoch, and the test metric `ml` (log scale if `lm`) per
/// epoch, against bytes sent and against measured wall-clock.
fn metric_figures(runs: &[Run], lm: bool, ml: &str, add: &mut AddFigure) -> Result<()> {
    add(
        "loss_epochs",
        "Training loss per epoch".into(),
        line(
            "training loss",
            "epoch",
            "train loss",
            false,
            true,
            runs.iter()
                .map(|r| {
                    let pts = r.epochs.iter().map(|e| (f64::from(e.epoch) + 1.0, e.train_loss)).collect();
                    (r.name.clone(), pts)
                })
                .collect(),
        ),
    )?;
    add(
        "metric_epochs",
        format!("{ml} per epoch"),
        line(ml, "epoch", ml, false, lm, runs.iter().map(|r| (r.name.clone(), r.metric())).collect()),
    )?;
    add(
        "metric_bytes",
        format!("{ml} against the bytes all workers sent"),
        line(
            &format!("{ml} vs bytes sent"),
            "MB sent (all workers, cumulative)",
            ml,
            true,
            lm,
            runs.iter().map(|r| (r.name.clone(), r.series(|e| Some(e.bytes_sent as f64 / 1e6)))).collect(),
        ),
    )?;
    add(
        "metric_wall",
        format!("{ml} against measured wall-clock (training time on this machine)"),
        line(
            &format!("{ml} vs measured time"),
            "seconds (measured)",
            ml,
            false,
            lm,
            runs.iter().map(|r| (r.name.clone(), r.series(|e| Some(e.wall_seconds)))).collect(),
        ),
    )?;
    Ok(())
}

/// The test metric against the wall-clock predicted at each link the first
/// run predicts for.
fn predicted_figures(runs: &[Run], lm: bool, ml: &str, add: &mut AddFigure) -> Result<()> {
    let links = links(runs);
    for link in &links {
        add(
            &format!("metric_predicted_{link}"),
            format!("{ml} against the wall-clock predicted for a cluster at {}", human_link(link)),
            line(
                &format!("{ml} vs predicted time at {}", human_link(link)),
                "seconds (predicted)",
                ml,
                false,
                lm,
                runs.iter()
                    .map(|r| (r.name.clone(), r.series(|e| e.predicted_wall_seconds.get(link).copied())))
                    .collect(),
            ),
        )?;
    }
    Ok(())
}

/// The measured contraction against its classic and tight bounds, for the
/// runs that record them (sparsifiers only); nothing if none does.
fn contraction_figure(runs: &[Run], add: &mut AddFigure) -> Result<()> {
    let with_contraction: Vec<&Run> =
        runs.iter().filter(|r| r.steps.iter().any(|s| s.bound_tight.is_some())).collect();
    if !with_contraction.is_empty() {
        let mut series = Vec::new();
        for r in &with_contraction {
            let pts = r.steps.iter().filter_map(|s| Some((s.step as f64, s.contraction?))).collect();
            series.push((format!("{} measured", r.name), pts));
        }
        let first = with_contraction[0];
        for (tight, label) in [(false, "(1 - k/d)"), (true, "(1 - k/d)^2")] {
            let bound = |s: &StepRecord| if tight { s.bound_tight } else { s.bound_classic };
            let pts: Vec<(f64, f64)> =
                first.steps.iter().filter_map(|s| Some((s.step as f64, bound(s)?))).collect();
            if !pts.is_empty() {
                series.push((format!("bound {label}"), pts));
            }
        }
        add(
            "contraction",
            "Measured contraction ||u - C(u)||^2/||u||^2 against the classic (1 - k/d) and tight (1 - k/d)^2 bounds".into(),
            line("contraction ratio", "step", "ratio", false, true, series),
        )?;
    }
    Ok(())
}

/// The gradient histograms of the first run that records them, at its
/// first, middle and last measured steps; nothing if none does.
fn histogram_figure(runs: &[Run], add: &mut AddFigure) -> Result<()> {
    if let Some(r) = runs.iter().find(|r| r.steps.iter().any(|s| s.histogram.is_some())) {
        let measured: Vec<&StepRecord> = r.steps.iter().filter(|s| s.histogram.is_some()).collect();
        let picks = [0, measured.len() / 2, measured.len() - 1];
        let mut series = Vec::new();
        for &i in picks.iter().collect::<std::collections::BTreeSet<_>>() {
            let s = measured[i];
            let Some((edges, counts)) = &s.histogram else { continue };
            let pts = edges
                .windows(2)
                .zip(counts)
                .map(|(e, &c)| ((f64::from(e[0]) + f64::from(e[1])) / 2.0, (c as f64).max(0.5)))
                .collect();
            series.push((format!("step {}", s.step), pts));
        }
        add(
            "histograms",
            format!("Distribution of the gradient values over training ({})", r.name),
            line("gradient histogram", "gradient value", "count", false, true, series),
        )?;
    }
    Ok(())
}

/// TernGrad's bound ratio per tensor, mean over the measured steps of the
/// first run that records it; nothing if none does.
fn bound_ratio_figure(runs: &[Run], add: &mut AddFigure) -> Result<()> {
    if let Some(r) = runs.iter().find(|r| r.steps.iter().any(|s| !s.bound_ratio.is_empty())) {
        let names: Vec<String> =
            r.manifest.iter().flat_map(|m| &m.units).filter(|u| !u.dense).map(|u| u.name.clone()).collect();
        let rows: Vec<&Vec<f64>> = r.steps.iter().map(|s| &s.bound_ratio).filter(|b| !b.is_empty()).collect();
        let units = rows.first().map_or(0, |r| r.len());
        let bars = (0..units)
            .map(|u| {
                let mean = rows.iter().filter_map(|r| r.get(u)).sum::<f64>() / rows.len() as f64;
                (names.get(u).cloned().unwrap_or_else(|| format!("unit {u}")), mean)
            })
            .collect();
        add(
            "bound_ratio",
            format!(
                "TernGrad's ||g||_inf ||g||_1 / ||g||_2^2 per tensor, mean over measured steps ({})",
                r.name
            ),
            Figure::Bars(Bars {
                title: "TernGrad bound ratio per tensor".into(),
                y_label: "ratio (>= 1)".into(),
                log_y: true,
                bars,
            }),
        )?;
    }
    Ok(())
}

/// Compression (selection) time against d, log–log, from `bench compress
/// --json` lines: one series per sparsifier and density.
fn selection_time_figure(bench: &Path, dir: &Path) -> Result<(String, String)> {
    let lines: Vec<crate::bench::compress_cases::Row> = read_jsonl(bench).with_context(|| {
        format!("{} is not the output of `gradcomp bench compress --json`", bench.display())
    })?;
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for l in lines.iter().filter(|l| l.op == "compress") {
        let Some(rho) = l.density else { continue };
        let name = format!("{} ρ={rho}", l.compressor);
        let point = (l.elements as f64, l.seconds * 1e3);
        match series.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push(point),
            None => series.push((name, vec![point])),
        }
    }
    if series.is_empty() {
        bail!(
            "{}: no sparsifier `compress` lines (make it with `gradcomp bench compress --json`)",
            bench.display()
        );
    }
    for s in &mut series {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let stem = "selection_time";
    Figure::Lines(Lines {
        title: "compression time against d (one core)".into(),
        x_label: "elements d".into(),
        y_label: "ms per call".into(),
        log_x: true,
        log_y: true,
        series,
    })
    .write(dir, stem)?;
    Ok((stem.into(), format!("Compression time against d, from {}", bench.display())))
}

/// The summary table: one row per run.
pub fn summary_table(runs: &[Run]) -> String {
    let links = links(runs);
    let lm = runs.first().is_some_and(Run::is_lm);
    let mut s = String::new();
    let _ = write!(
        s,
        "| run | compressor | workers | topology | epochs | {} | MB sent | measured s |",
        if lm { "test perplexity" } else { "test accuracy" }
    );
    for l in &links {
        let _ = write!(s, " predicted s @ {} |", human_link(l));
    }
    s.push_str("\n|---|---|---:|---|---:|---:|---:|---:|");
    for _ in &links {
        s.push_str("---:|");
    }
    s.push('\n');
    for r in runs {
        let last = r.epochs.last().cloned().unwrap_or_default();
        let metric = r.metric().last().map_or("-".to_string(), |m| {
            if lm {
                format!("{:.2}", m.1)
            } else {
                format!("{:.2}%", m.1)
            }
        });
        let c = &r.config;
        let compressor = match c.compressor.density() {
            Some(d) => format!("{} ρ={d}", c.compressor.name()),
            None => c.compressor.name().to_string(),
        };
        let topology = if c.strategy.kind.steps_locally() {
            format!("{} I={}", kebab(&c.strategy.kind), c.strategy.period)
        } else {
            kebab(&c.comm.topology)
        };
        let _ = write!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r.name,
            compressor,
            c.workers,
            topology,
            r.epochs.len(),
            metric,
            last.bytes_sent as f64 / 1e6,
            last.wall_seconds,
        );
        for l in &links {
            let _ = write!(s, " {:.1} |", last.predicted_wall_seconds.get(l).copied().unwrap_or(f64::NAN));
        }
        s.push('\n');
    }
    s
}

/// A configuration value as the TOML spells it (`parameter-server`).
fn kebab<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// Mean bytes sent per step by each collective operation, all workers
/// together (what one worker sends another receives, so this is also the
/// traffic received). For the parameter server, `ps_push` is the upload and
/// `ps_pull` the download of the N − 1 workers that are not co-located with it.
pub fn traffic_table(runs: &[Run]) -> String {
    let ops: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|r| &r.steps).flat_map(|st| st.bytes_up.keys()).collect();
    let mut s = String::from("| run |");
    for op in &ops {
        let _ = write!(s, " {op} KB/step |");
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(ops.len()));
    s.push('\n');
    for r in runs {
        let _ = write!(s, "| {} |", r.name);
        let n = r.steps.len().max(1) as f64;
        for op in &ops {
            let total: u64 = r.steps.iter().filter_map(|st| st.bytes_up.get(*op)).sum();
            if total > 0 {
                let _ = write!(s, " {:.1} |", total as f64 / n / 1e3);
            } else {
                s.push_str(" – |");
            }
        }
        s.push('\n');
    }
    s
}

/// Median measured step time against the median prediction at the run's
/// first configured link, per run, and where the difference lies: the
/// measured time inside collectives against the predicted communication
/// time (the prediction less the step's local work), and the compute. All
/// per-rank times are the slowest rank's. Warm-up steps (the first 5) are
/// left out.
pub fn validation_table(runs: &[Run]) -> String {
    let mut s = String::from(
        "| run | workers | link | measured s/step | predicted s/step | error | measured comm ms | predicted comm ms | compute ms |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let Some(link) = r.steps.first().and_then(|st| st.predicted_seconds.keys().next().cloned()) else {
            continue;
        };
        let steps = || r.steps.iter().skip(5);
        let predicted_at = |st: &StepRecord| st.predicted_seconds.get(&link).copied();
        let measured = median(steps().map(|st| st.wall_seconds).collect());
        let predicted = median(steps().filter_map(predicted_at).collect());
        let comm = median(steps().filter_map(|st| st.slowest(&[&st.communicate_seconds])).collect());
        let predicted_comm =
            median(steps().filter_map(|st| Some(predicted_at(st)? - st.slowest_local()?)).collect());
        let compute = median(steps().filter_map(|st| st.slowest(&[&st.compute_seconds])).collect());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.4} | {:.4} | {:+.0}% | {:.1} | {:.1} | {:.1} |",
            r.name,
            r.config.workers,
            human_link(&link),
            measured,
            predicted,
            (predicted / measured - 1.0) * 100.0,
            comm * 1e3,
            predicted_comm * 1e3,
            compute * 1e3,
        );
    }
    s
}

/// Per run: the first evaluation that reaches its target (`train.target_accuracy`,
/// or `train.target_perplexity` for a language model; from `evals.jsonl`,
/// else the epochs): the steps, the measured wall-clock of training and the
/// predicted one at each link the run predicts for, and the bytes sent; or
/// the best figure if never reached.
pub fn time_to_accuracy_table(runs: &[Run]) -> String {
    let links = links(runs);
    let mut s = String::from("| run | target | steps | measured s |");
    for l in &links {
        let _ = write!(s, " predicted s @ {} |", human_link(l));
    }
    s.push_str(" MB sent |\n|---|---:|---:|---:|");
    s.push_str(&"---:|".repeat(links.len() + 1));
    s.push('\n');
    for r in runs {
        let curve = if r.evals.is_empty() { &r.epochs } else { &r.evals };
        let target = Target::of(&r.config);
        let _ = write!(s, "| {} | {} |", r.name, target.label());
        match curve.iter().find(|e| target.reached(e)) {
            Some(e) => {
                let _ = write!(s, " {} | {:.1} |", e.steps, e.wall_seconds);
                for l in &links {
                    let _ =
                        write!(s, " {:.1} |", e.predicted_wall_seconds.get(l).copied().unwrap_or(f64::NAN));
                }
                let _ = writeln!(s, " {:.1} |", e.bytes_sent as f64 / 1e6);
            }
            None => {
                let _ = writeln!(
                    s,
                    " not reached (best {} in {} steps) |{}",
                    target.best(curve),
                    curve.last().map_or(0, |e| e.steps),
                    " |".repeat(links.len() + 2)
                );
            }
        }
    }
    s
}

/// What a run races to: a test accuracy (image tasks, 100% when unset) or
/// a test perplexity (language models, `train.target_perplexity`).
enum Target {
    Accuracy(f64),
    Perplexity(f64),
}

impl Target {
    fn of(c: &TrainConfig) -> Self {
        match c.train.target_perplexity {
            Some(p) => Self::Perplexity(p),
            None => Self::Accuracy(c.train.target_accuracy.unwrap_or(1.0)),
        }
    }

    fn label(&self) -> String {
        match self {
            Self::Accuracy(a) => format!("{:.1}%", a * 100.0),
            Self::Perplexity(p) => format!("ppl ≤ {p}"),
        }
    }

    fn reached(&self, e: &EpochRecord) -> bool {
        match self {
            Self::Accuracy(a) => e.test_accuracy.is_some_and(|x| x >= *a),
            Self::Perplexity(p) => e.test_perplexity.is_some_and(|x| x <= *p),
        }
    }

    /// The best figure of a curve that never reached the target.
    fn best(&self, curve: &[EpochRecord]) -> String {
        match self {
            Self::Accuracy(_) => {
                let best = curve.iter().filter_map(|e| e.test_accuracy).fold(f64::NAN, f64::max);
                format!("{:.2}%", best * 100.0)
            }
            Self::Perplexity(_) => {
                format!("{:.1}", curve.iter().filter_map(|e| e.test_perplexity).fold(f64::NAN, f64::min))
            }
        }
    }
}

pub fn run(a: &Args) -> Result<()> {
    let runs: Vec<Run> = a.runs.iter().map(|d| Run::load(d)).collect::<Result<_>>()?;
    let fig_dir = a.out.join("figures");
    let mut figs = figures(&runs, &fig_dir)?;
    if let Some(bench) = &a.selection_time {
        figs.push(selection_time_figure(bench, &fig_dir)?);
    }
    let mut md = format!("# {}\n\n", a.title);
    md.push_str(&summary_table(&runs));
    md.push_str("\n**Traffic per step by operation** (all workers together)\n\n");
    md.push_str(&traffic_table(&runs));
    if a.time_to_accuracy {
        md.push_str("\n## Time to accuracy\n\n");
        let t = time_to_accuracy_table(&runs);
        println!("{t}");
        md.push_str(&t);
    }
    if a.validation {
        md.push_str("\n## Measured against predicted step time\n\n");
        let v = validation_table(&runs);
        println!("{v}");
        md.push_str(&v);
    }
    for (stem, caption) in &figs {
        let _ = write!(md, "\n**{caption}**\n\n![{caption}](figures/{stem}.png)\n");
    }
    let path = a.out.join("report.md");
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    println!("report: {} ({} figures in {})", path.display(), figs.len(), fig_dir.display());
    Ok(())
}

#[cfg(test)]
mod tests;
