//! `gradcomp report RUN_DIR...`: a Markdown report with figures from run
//! directories: loss and test metric against epochs, bytes and wall-clock
//! (measured and predicted), bytes per step, the contraction ratio against
//! its two bounds, gradient histograms over training, and TernGrad's bound
//! ratio per layer.

mod plot;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use serde_json::Value;

use crate::bench::timing::median;

pub use plot::{Bars, Figure, Lines};

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
    /// Also draw compression time against the number of elements d, one line
    /// per sparsifier and density, from `gradcomp bench compress --json` output.
    #[arg(long, value_name = "BENCH.jsonl")]
    selection_time: Option<PathBuf>,
}

/// One run's records.
pub struct Run {
    pub name: String,
    pub config: toml::Table,
    pub manifest: Value,
    pub epochs: Vec<Value>,
    pub steps: Vec<Value>,
}

fn read_jsonl(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a JSON record", path.display(), i + 1))
        })
        .collect()
}

impl Run {
    pub fn load(dir: &Path) -> Result<Self> {
        if !dir.join("epochs.jsonl").is_file() {
            bail!("{} is not a run directory (no epochs.jsonl); pass runs/<name>", dir.display());
        }
        let config: toml::Table = toml::from_str(
            &std::fs::read_to_string(dir.join("config.toml"))
                .with_context(|| format!("reading {}/config.toml", dir.display()))?,
        )
        .with_context(|| format!("{}/config.toml", dir.display()))?;
        let manifest = std::fs::read_to_string(dir.join("manifest.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let name =
            config.get("name").and_then(|v| v.as_str()).map(str::to_string).unwrap_or_else(|| {
                dir.file_name().map_or("run".into(), |n| n.to_string_lossy().into_owned())
            });
        Ok(Self {
            name,
            config,
            manifest,
            epochs: read_jsonl(&dir.join("epochs.jsonl"))?,
            steps: read_jsonl(&dir.join("steps.jsonl"))?,
        })
    }

    fn get(&self, path: &str) -> Option<&toml::Value> {
        let mut v: Option<&toml::Value> = None;
        for (i, part) in path.split('.').enumerate() {
            v = if i == 0 { self.config.get(part) } else { v?.get(part) };
        }
        v
    }

    fn str_of(&self, path: &str, default: &str) -> String {
        self.get(path).and_then(|v| v.as_str()).unwrap_or(default).to_string()
    }

    pub fn is_lm(&self) -> bool {
        self.epochs.iter().any(|e| e.get("test_perplexity").is_some())
    }

    /// (epoch number from 1, test metric): accuracy in % or perplexity.
    pub fn metric(&self) -> Vec<(f64, f64)> {
        let key = if self.is_lm() { "test_perplexity" } else { "test_accuracy" };
        let scale = if self.is_lm() { 1.0 } else { 100.0 };
        self.epochs
            .iter()
            .filter_map(|e| Some((e["epoch"].as_f64()? + 1.0, e.get(key)?.as_f64()? * scale)))
            .collect()
    }

    fn series(&self, x: impl Fn(&Value) -> Option<f64>) -> Vec<(f64, f64)> {
        let key = if self.is_lm() { "test_perplexity" } else { "test_accuracy" };
        let scale = if self.is_lm() { 1.0 } else { 100.0 };
        self.epochs.iter().filter_map(|e| Some((x(e)?, e.get(key)?.as_f64()? * scale))).collect()
    }

    fn step_bytes(&self) -> f64 {
        let total: f64 = self
            .steps
            .iter()
            .map(|s| s["bytes_up"].as_object().map_or(0.0, |m| m.values().filter_map(Value::as_f64).sum()))
            .sum();
        total / self.steps.len().max(1) as f64
    }
}

fn metric_label(lm: bool) -> &'static str {
    if lm {
        "test perplexity"
    } else {
        "test accuracy (%)"
    }
}

fn human_link(bps: &str) -> String {
    let b: f64 = bps.parse().unwrap_or(0.0);
    if b >= 1e9 {
        format!("{} Gbit/s", b / 1e9)
    } else {
        format!("{} Mbit/s", b / 1e6)
    }
}

/// The link speeds (bit/s keys) the first run predicted its wall-clock for.
fn links(runs: &[Run]) -> Vec<String> {
    runs.first()
        .and_then(|r| r.epochs.last())
        .and_then(|e| e["predicted_wall_seconds"].as_object())
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
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
    let line =
        |title: &str, x: &str, y: &str, log_x: bool, log_y: bool, series: Vec<(String, Vec<(f64, f64)>)>| {
            Figure::Lines(Lines {
                title: title.into(),
                x_label: x.into(),
                y_label: y.into(),
                log_x,
                log_y,
                series,
            })
        };
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
                    let pts = r
                        .epochs
                        .iter()
                        .filter_map(|e| Some((e["epoch"].as_f64()? + 1.0, e["train_loss"].as_f64()?)))
                        .collect();
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
            runs.iter()
                .map(|r| (r.name.clone(), r.series(|e| Some(e["bytes_sent"].as_f64()? / 1e6))))
                .collect(),
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
            runs.iter().map(|r| (r.name.clone(), r.series(|e| e["wall_seconds"].as_f64()))).collect(),
        ),
    )?;
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
                    .map(|r| {
                        (r.name.clone(), r.series(|e| e["predicted_wall_seconds"][link.as_str()].as_f64()))
                    })
                    .collect(),
            ),
        )?;
    }
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
    // The bounds are those of keeping k of d elements: sparsifiers only.
    let with_contraction: Vec<&Run> =
        runs.iter().filter(|r| r.steps.iter().any(|s| s.get("bound_tight").is_some())).collect();
    if !with_contraction.is_empty() {
        let mut series = Vec::new();
        for r in &with_contraction {
            let pts: Vec<(f64, f64)> = r
                .steps
                .iter()
                .filter_map(|s| Some((s["step"].as_f64()?, s.get("contraction")?.as_f64()?)))
                .collect();
            series.push((format!("{} measured", r.name), pts));
        }
        let first = with_contraction[0];
        for (key, label) in [("bound_classic", "(1 - k/d)"), ("bound_tight", "(1 - k/d)^2")] {
            let pts: Vec<(f64, f64)> = first
                .steps
                .iter()
                .filter_map(|s| Some((s["step"].as_f64()?, s.get(key)?.as_f64()?)))
                .collect();
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
    if let Some(r) = runs.iter().find(|r| r.steps.iter().any(|s| s.get("histogram").is_some())) {
        let measured: Vec<&Value> = r.steps.iter().filter(|s| s.get("histogram").is_some()).collect();
        let picks = [0, measured.len() / 2, measured.len() - 1];
        let mut series = Vec::new();
        for &i in picks.iter().collect::<std::collections::BTreeSet<_>>() {
            let s = measured[i];
            let h = &s["histogram"];
            let (Some(edges), Some(counts)) = (h[0].as_array(), h[1].as_array()) else { continue };
            let pts = edges
                .windows(2)
                .zip(counts)
                .filter_map(|(e, c)| Some(((e[0].as_f64()? + e[1].as_f64()?) / 2.0, c.as_f64()?.max(0.5))))
                .collect();
            series.push((format!("step {}", s["step"]), pts));
        }
        add(
            "histograms",
            format!("Distribution of the gradient values over training ({})", r.name),
            line("gradient histogram", "gradient value", "count", false, true, series),
        )?;
    }
    if let Some(r) = runs.iter().find(|r| r.steps.iter().any(|s| s.get("bound_ratio").is_some())) {
        let names: Vec<String> = r.manifest["units"]
            .as_array()
            .map(|u| {
                u.iter()
                    .filter(|u| !u["dense"].as_bool().unwrap_or(false))
                    .filter_map(|u| u["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let rows: Vec<&Vec<Value>> =
            r.steps.iter().filter_map(|s| s.get("bound_ratio")?.as_array()).collect();
        let units = rows.first().map_or(0, |r| r.len());
        let bars = (0..units)
            .map(|u| {
                let mean = rows.iter().filter_map(|r| r.get(u)?.as_f64()).sum::<f64>() / rows.len() as f64;
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
    Ok(out)
}

/// Compression (selection) time against d, log–log, from `bench compress
/// --json` lines: one series per sparsifier and density.
fn selection_time_figure(bench: &Path, dir: &Path) -> Result<(String, String)> {
    let lines = read_jsonl(bench)?;
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for l in &lines {
        let (Some(c), Some(d), Some(rho), Some(t)) =
            (l["compressor"].as_str(), l["elements"].as_f64(), l["density"].as_f64(), l["seconds"].as_f64())
        else {
            continue;
        };
        if l["op"] != "compress" {
            continue;
        }
        let name = format!("{c} ρ={rho}");
        match series.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((d, t * 1e3)),
            None => series.push((name, vec![(d, t * 1e3)])),
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
        let last = r.epochs.last().cloned().unwrap_or(Value::Null);
        let metric = r.metric().last().map_or("-".to_string(), |m| {
            if lm {
                format!("{:.2}", m.1)
            } else {
                format!("{:.2}%", m.1)
            }
        });
        let compressor = {
            let c = r.str_of("compressor.name", "dense");
            match r.get("compressor.density").and_then(|v| v.as_float()) {
                Some(d) => format!("{c} ρ={d}"),
                None => c,
            }
        };
        let strategy = r.str_of("strategy.kind", "sync");
        let topology = if strategy == "celgc" {
            format!("celgc I={}", r.get("strategy.period").and_then(|v| v.as_integer()).unwrap_or(1))
        } else {
            r.str_of("comm.topology", "allreduce")
        };
        let _ = write!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r.name,
            compressor,
            r.get("workers").and_then(|v| v.as_integer()).unwrap_or(1),
            topology,
            r.epochs.len(),
            metric,
            last["bytes_sent"].as_f64().unwrap_or(0.0) / 1e6,
            last["wall_seconds"].as_f64().unwrap_or(0.0),
        );
        for l in &links {
            let _ = write!(
                s,
                " {:.1} |",
                last["predicted_wall_seconds"][l.as_str()].as_f64().unwrap_or(f64::NAN)
            );
        }
        s.push('\n');
    }
    s
}

/// Mean bytes sent per step by each collective operation, all workers
/// together (what one worker sends another receives, so this is also the
/// traffic received). For the parameter server, `ps_push` is the upload and
/// `ps_pull` the download of the N − 1 workers that are not co-located with it.
pub fn traffic_table(runs: &[Run]) -> String {
    let mut ops: Vec<String> = Vec::new();
    for r in runs {
        for st in &r.steps {
            for k in st["bytes_up"].as_object().into_iter().flat_map(|m| m.keys()) {
                if !ops.contains(k) {
                    ops.push(k.clone());
                }
            }
        }
    }
    ops.sort();
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
            let total: f64 = r.steps.iter().filter_map(|st| st["bytes_up"][op.as_str()].as_f64()).sum();
            if total > 0.0 {
                let _ = write!(s, " {:.1} |", total / n / 1e3);
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
    let slowest = |st: &Value, keys: &[&str]| -> Option<f64> {
        let per_rank: Vec<f64> = (0..st[keys[0]].as_array()?.len())
            .map(|i| keys.iter().filter_map(|k| st[*k][i].as_f64()).sum())
            .collect();
        per_rank.into_iter().reduce(f64::max)
    };
    const LOCAL: [&str; 4] = ["compute_s", "compress_s", "decode_s", "optimizer_s"];
    for r in runs {
        let Some(link) = r
            .steps
            .first()
            .and_then(|st| st["predicted_s"].as_object())
            .and_then(|m| m.keys().next().cloned())
        else {
            continue;
        };
        let steps = || r.steps.iter().skip(5);
        let measured = median(steps().filter_map(|st| st["wall_s"].as_f64()).collect());
        let predicted = median(steps().filter_map(|st| st["predicted_s"][link.as_str()].as_f64()).collect());
        let comm = median(steps().filter_map(|st| slowest(st, &["communicate_s"])).collect());
        let predicted_comm = median(
            steps()
                .filter_map(|st| Some(st["predicted_s"][link.as_str()].as_f64()? - slowest(st, &LOCAL)?))
                .collect(),
        );
        let compute = median(steps().filter_map(|st| slowest(st, &["compute_s"])).collect());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.4} | {:.4} | {:+.0}% | {:.1} | {:.1} | {:.1} |",
            r.name,
            r.get("workers").and_then(|v| v.as_integer()).unwrap_or(1),
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
mod tests {
    use super::{selection_time_figure, validation_table, Run};

    #[test]
    fn validation_table_splits_the_step_into_communication_and_compute() {
        // Two ranks; rank 1 is the slowest locally (4 + 1 + 0 + 1 = 6 ms).
        let step = serde_json::json!({
            "wall_s": 0.020,
            "predicted_s": {"100000000": 0.022},
            "compute_s": [0.003, 0.004],
            "compress_s": [0.001, 0.001],
            "decode_s": [0.0, 0.0],
            "optimizer_s": [0.001, 0.001],
            "communicate_s": [0.014, 0.012],
        });
        let run = Run {
            name: "r".into(),
            config: toml::from_str("workers = 2").unwrap(),
            manifest: serde_json::Value::Null,
            epochs: Vec::new(),
            steps: vec![step; 8],
        };
        let t = validation_table(&[run]);
        let row = t.lines().last().unwrap();
        assert_eq!(row, "| r | 2 | 100 Mbit/s | 0.0200 | 0.0220 | +10% | 14.0 | 16.0 | 4.0 |", "{t}");
    }

    #[test]
    fn selection_time_figure_reads_bench_lines() {
        let dir = std::env::temp_dir().join(format!("gradcomp-seltime-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bench = dir.join("bench.jsonl");
        let mut text = String::from(
            r#"{"compressor":"read_pass","op":"sum","elements":1024,"density":null,"seconds":1e-7}"#,
        );
        for (d, t) in [(1024, 1e-6), (65536, 1e-4), (1048576, 2e-3)] {
            text.push_str(&format!(
                "\n{{\"compressor\":\"topk\",\"op\":\"compress\",\"elements\":{d},\"density\":0.001,\"seconds\":{t}}}"
            ));
        }
        std::fs::write(&bench, text).unwrap();
        let (stem, _) = selection_time_figure(&bench, &dir).unwrap();
        assert!(std::fs::metadata(dir.join(format!("{stem}.png"))).unwrap().len() > 1000);

        // A file without sparsifier lines, or not JSON, is an error that names it.
        std::fs::write(&bench, r#"{"compressor":"read_pass","op":"sum"}"#).unwrap();
        let e = selection_time_figure(&bench, &dir).unwrap_err().to_string();
        assert!(e.contains("bench compress --json"), "{e}");
        std::fs::write(&bench, "not json").unwrap();
        let e = format!("{:#}", selection_time_figure(&bench, &dir).unwrap_err());
        assert!(e.contains("not a JSON record"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
