//! `gradcomp model`: the performance model as a command (TernGrad §5,
//! ALGORITHMS.md §1.5 generalized): from a measured profile of a model (the
//! compute time of one step, the tensor sizes) and the measured speed of each
//! compressor on tensors of those sizes, the predicted step time, throughput
//! and speedup over dense for N = 1 … 512 workers and links of 100 Mbit/s …
//! 100 Gbit/s, for every method and the topology it uses.
//!
//! The methods and their step times are [`gradcomp_dp::predict`]'s (the
//! Python package prices with the same code); this command profiles the
//! model's compute and renders the tables, the timeline and the figure.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use gradcomp_comm::{NetworkModel, ServerPlacement};
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::predict::{
    decode_seconds, local_step_seconds, measure, methods, outer_seconds_per_value, rounds_seconds,
    step_seconds, wire_seconds, LocalSetup, MethodCost, Workload, PAYS_OFF,
};
use gradcomp_train::config::Topology;
use gradcomp_train::config::TrainConfig;
use gradcomp_train::records::{read_json, read_jsonl, Manifest, StepRecord};
use gradcomp_train::trainer::{self, RunOptions, Silent};

use crate::bench::timing::median;
use crate::report::{Figure, Lines};

#[derive(ClapArgs)]
pub struct Args {
    /// The training configuration to profile (model, batch, compressor).
    #[arg(long)]
    config: PathBuf,
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Only say whether the configured compression is predicted to pay off
    /// for the configured workers at the configured link speeds.
    #[arg(long)]
    dry_run: bool,
    /// Density for the sparsifiers in the comparison.
    #[arg(long, default_value_t = 0.001)]
    density: f64,
    /// Per-message latency α in seconds.
    #[arg(long, default_value_t = 1e-4)]
    alpha: f64,
    /// Steps measured for the compute profile.
    #[arg(long, default_value_t = 20)]
    steps: u64,
    /// Show the configured method's predicted step, stage by stage, at the
    /// configured workers and link speeds (`network.*`, calibrations
    /// included), with the configured buckets and pipelining.
    #[arg(long)]
    timeline: bool,
    /// Also write model.md and a figure of speedup against N here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Price another system's step instead of profiling gradcomp's (issue
    /// #26: PyTorch DDP over gloo): its measured step time without the wire,
    /// in ms. Needs `--peer-call`; `workers` and `network.*` come from the
    /// configuration, calibrations included.
    #[arg(long, value_name = "MS", requires = "peer_calls")]
    peer_compute_ms: Option<f64>,
    /// One collective call of the other system's step, one after another:
    /// `allreduce:BYTES` or `allgather:BYTES` (every worker's message), repeatable.
    #[arg(long = "peer-call", value_name = "OP:BYTES", requires = "peer_compute_ms")]
    peer_calls: Vec<String>,
    /// The collective algorithms of the other system: `ring` for allreduce
    /// and allgather (gloo's), or `configured` (`network.*`, as gradcomp's).
    #[arg(long, default_value = "ring", value_parser = ["ring", "configured"])]
    peer_algorithm: String,
    #[arg(long)]
    json: bool,
    /// Choose the plan of local updates (`strategy.plan = "auto"`, ALGORITHMS.md
    /// §2.5) from this machine's measured step with the configured workers:
    /// each decision with its reason, then the `--set` keys that freeze it.
    #[arg(long)]
    plan: bool,
    /// With --plan: the link in Gbit/s (default: the first of `network.links_bps`).
    #[arg(long, value_name = "GBPS", requires = "plan")]
    link_gbps: Option<f64>,
}

/// The measured profile of one step on one worker.
struct Profile {
    work: Workload,
    batch: usize,
}

/// A table header: `first`, then one column per worker count in [`WORKERS`].
fn workers_header(md: &mut String, first: &str) {
    let _ = write!(md, "| {first} |");
    for n in WORKERS {
        let _ = write!(md, " N={n} |");
    }
    md.push_str("\n|---|");
    md.push_str(&"---:|".repeat(WORKERS.len()));
    md.push('\n');
}

fn profile(cfg: &TrainConfig, steps: u64) -> Result<Profile> {
    let dir = std::env::temp_dir().join(format!("gradcomp-model-{}", std::process::id()));
    let mut p = crate::plan::measuring_run(cfg, &dir, steps.max(6));
    p.workers = 1;
    p.compressor = CompressorConfig::dense();
    p.comm.topology = Some(gradcomp_train::config::Topology::Allreduce);
    p.strategy = Default::default();
    trainer::train(&p, RunOptions::default(), Box::new(Silent)).context("measuring the compute profile")?;
    let steps: Vec<StepRecord> = read_jsonl(&dir.join("steps.jsonl"))?;
    let compute: Vec<f64> = steps.iter().skip(3).filter_map(|s| s.compute_seconds.first().copied()).collect();
    let manifest: Manifest = read_json(&dir.join("manifest.json"))?;
    let shapes = manifest.units.iter().map(|u| u.shape.clone()).collect();
    std::fs::remove_dir_all(&dir).ok();
    if compute.is_empty() {
        bail!("the profile run recorded no steps");
    }
    Ok(Profile { work: Workload::new(median(compute), shapes), batch: cfg.data.batch_size })
}

const WORKERS: [usize; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
const LINKS: [f64; 4] = [1e8, 1e9, 1e10, 1e11];

fn link_name(b: f64) -> String {
    if b >= 1e9 {
        format!("{} Gbit/s", b / 1e9)
    } else {
        format!("{} Mbit/s", b / 1e6)
    }
}

pub fn run(a: &Args) -> Result<()> {
    let ov = crate::train::parse_sets(&a.set)?;
    let cfg = TrainConfig::load(&a.config, &ov).map_err(|e| crate::user_error::UserError(e.to_string()))?;
    if let Some(ms) = a.peer_compute_ms {
        return peer(&cfg, ms, a);
    }
    if a.plan {
        return crate::plan::print(&cfg, a.link_gbps.map(|g| g * 1e9));
    }
    let p = profile(&cfg, a.steps)?;
    let total: usize = p.work.units.iter().sum();
    eprintln!(
        "profile: {} parameters in {} tensors, {:.2} ms compute per step (batch {} per worker)",
        total,
        p.work.units.len(),
        p.work.compute_seconds * 1e3,
        p.batch
    );
    if a.dry_run {
        return dry_run(&cfg, &p, a);
    }
    if a.timeline {
        return timeline(&cfg, &p);
    }
    let ms = methods(&p.work.shapes, a.density);
    let mut md = String::new();
    methods_table(&mut md, &p, &ms, total);
    let fig_series = speedup_tables(&mut md, &p, &ms, a);
    terngrad_table(&mut md, &p, &ms, a.alpha);
    scatter_table(&mut md, &p, &ms, a.alpha);
    if !a.json {
        println!("{md}");
    }
    if let Some(out) = &a.out {
        write_outputs(out, &md, fig_series)?;
    }
    Ok(())
}

/// The profile's summary line and each method's bytes and codec times.
fn methods_table(md: &mut String, p: &Profile, ms: &[MethodCost], total: usize) {
    let _ = writeln!(
        md,
        "Compute {:.2} ms per step (batch {} per worker); {} parameters. Speedup = dense step time / method step time at the same N and link.\n",
        p.work.compute_seconds * 1e3,
        p.batch,
        total
    );
    let _ = writeln!(
        md,
        "| method | bytes up per worker | compress ms | decode ms per message |\n|---|---:|---:|---:|"
    );
    for m in ms {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {:.3} |",
            m.label,
            m.upload,
            m.compress_seconds * 1e3,
            m.decode_seconds * 1e3
        );
    }
}

/// Per link speed, each method's speedup over dense (dense's own throughput)
/// at every worker count, with a JSON line per cell under `--json`; returns
/// the 1 Gbit/s speedups, one series per method, for the figure.
fn speedup_tables(
    md: &mut String,
    p: &Profile,
    ms: &[MethodCost],
    a: &Args,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut fig_series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for &link in &LINKS {
        let net = NetworkModel::from_bits_per_second(link, a.alpha);
        let _ = writeln!(
            md,
            "\n**{}**: speedup over dense (throughput in examples/s for dense)\n",
            link_name(link)
        );
        workers_header(md, "method");
        for m in ms {
            let _ = write!(md, "| {} |", m.label);
            let mut pts = Vec::new();
            for n in WORKERS {
                let dense = step_seconds(&p.work, &ms[0], n, &net);
                let t = step_seconds(&p.work, m, n, &net);
                if m.label.starts_with("dense") {
                    let _ = write!(md, " {:.0}/s |", (n * p.batch) as f64 / t);
                } else {
                    let _ = write!(md, " {:.2}× |", dense / t);
                }
                pts.push((n as f64, dense / t));
                if a.json {
                    println!(
                        "{}",
                        serde_json::json!({"method": m.label, "compressor": m.compressor.name(), "workers": n, "link_bps": link,
                            "step_seconds": t, "examples_per_s": (n * p.batch) as f64 / t, "speedup_over_dense": dense / t})
                    );
                }
            }
            md.push('\n');
            if link == 1e9 {
                fig_series.push((m.label.clone(), pts));
            }
        }
    }
    fig_series
}

/// TernGrad's own comparison (§5): TernGrad over dense, both through the
/// parameter server, per link and worker count (nothing if either is missing).
fn terngrad_table(md: &mut String, p: &Profile, ms: &[MethodCost], alpha: f64) {
    if let (Some(dense_ps), Some(tern)) = (
        ms.iter().find(|m| m.topology == Topology::ParameterServer && m.compressor.name() == "dense"),
        ms.iter().find(|m| m.compressor.name() == "terngrad"),
    ) {
        let _ = writeln!(
            md,
            "\n**TernGrad over fp32, both through the parameter server** (the paper's §5 setting)\n"
        );
        workers_header(md, "link");
        for &link in &LINKS {
            let net = NetworkModel::from_bits_per_second(link, alpha);
            let _ = write!(md, "| {} |", link_name(link));
            for n in WORKERS {
                let _ = write!(
                    md,
                    " {:.2}× |",
                    step_seconds(&p.work, dense_ps, n, &net) / step_seconds(&p.work, tern, n, &net)
                );
            }
            md.push('\n');
        }
    }
}

/// When the reduce-scatter beats the allgather: per compressor measured on
/// both, per link, the allgather's exchange seconds over the
/// reduce-scatter's (> 1: the reduce-scatter is faster) at every worker
/// count, and the fewest workers from which it stays ahead.
fn scatter_table(md: &mut String, p: &Profile, ms: &[MethodCost], alpha: f64) {
    let no_compute = gradcomp_dp::predict::Workload { compute_seconds: 0.0, ..p.work.clone() };
    let pairs: Vec<(&MethodCost, &MethodCost)> = ms
        .iter()
        .filter(|m| m.topology == Topology::ReduceScatter)
        .filter_map(|rs| {
            let ag =
                ms.iter().find(|m| m.topology == Topology::Allgather && m.compressor == rs.compressor)?;
            Some((ag, rs))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n**Reduce-scatter against allgather**: the allgather's exchange seconds over the reduce-scatter's (> 1: the reduce-scatter is faster), compute left out\n"
    );
    let _ = write!(md, "| compressor | link |");
    WORKERS.iter().skip(1).for_each(|n| {
        let _ = write!(md, " N={n} |");
    });
    let _ = writeln!(md, " ahead from |\n|---|---|{}---:|", "---:|".repeat(WORKERS.len() - 1));
    for (ag, rs) in pairs {
        for &link in &LINKS {
            let net = NetworkModel::from_bits_per_second(link, alpha);
            let _ = write!(md, "| {} | {} |", rs.compressor.name(), link_name(link));
            let ratios: Vec<(usize, f64)> = WORKERS
                .iter()
                .skip(1)
                .map(|&n| {
                    (n, step_seconds(&no_compute, ag, n, &net) / step_seconds(&no_compute, rs, n, &net))
                })
                .collect();
            ratios.iter().for_each(|(_, r)| {
                let _ = write!(md, " {r:.2}× |");
            });
            let from = (0..ratios.len()).find(|&i| ratios[i..].iter().all(|(_, r)| *r > 1.0));
            let _ =
                writeln!(md, " {} |", from.map_or("never".to_string(), |i| format!("N = {}", ratios[i].0)));
        }
    }
}

/// `--out`: the speedup figure at 1 Gbit/s and model.md.
fn write_outputs(out: &Path, md: &str, fig_series: Vec<(String, Vec<(f64, f64)>)>) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let fig = Figure::Lines(Lines {
        title: "predicted speedup over dense at 1 Gbit/s".into(),
        x_label: "workers N".into(),
        y_label: "speedup".into(),
        log_x: true,
        log_y: true,
        series: fig_series,
    });
    fig.write(out, "model_speedup_1gbps")?;
    std::fs::write(out.join("model.md"), md)?;
    eprintln!("wrote {}/model.md and model_speedup_1gbps.png", out.display());
    Ok(())
}

/// Each stage's [start, end] when the buckets run one after another.
fn serial_timeline(stages: &[[f64; 3]]) -> Vec<[[f64; 2]; 3]> {
    let mut t = 0.0;
    stages
        .iter()
        .map(|s| {
            s.map(|d| {
                t += d;
                [t - d, t]
            })
        })
        .collect()
}

/// Each bucket's predicted [compress, wire, decode] seconds for method `m`
/// with `n` workers over `net`: the measured compression time, the link
/// model's wire time for the collectives its units' routes take, and the
/// measured decode time once per message a worker decodes.
fn bucket_stages(
    m: &MethodCost,
    buckets: &[std::ops::Range<usize>],
    n: usize,
    net: &NetworkModel,
) -> Vec<[f64; 3]> {
    buckets
        .iter()
        .map(|r| {
            let us = &m.units[r.clone()];
            let compress = us.iter().map(|u| u.compress_seconds).sum::<f64>();
            [compress, wire_seconds(us, n, net), decode_seconds(us, n)]
        })
        .collect()
}

/// `--timeline`: per link speed, the configured method's step as the model
/// predicts it: the measured compute, then per bucket its compression
/// (measured on this machine), wire (the link's model, with the algorithm
/// it runs) and decoding, overlapped as the exchange's pipeline overlaps
/// them; and how much of the stages' serial sum the pipeline hides.
fn timeline(cfg: &TrainConfig, p: &Profile) -> Result<()> {
    let topology = cfg.data_parallel().topology();
    let m = measure(cfg.compressor.name(), cfg.compressor.clone(), topology, &p.work.shapes);
    let n = cfg.workers;
    let buckets = gradcomp_dp::exchange::cut_buckets(
        &p.work.units,
        gradcomp_dp::exchange::bucket_bytes(cfg.compression.bucket_mb),
    );
    let links = cfg.network.models().map_err(|e| crate::user_error::UserError(e.to_string()))?;
    for (bps, net) in links {
        let stages = bucket_stages(&m, &buckets, n, &net);
        let pipelined = cfg.compression.pipeline && stages.len() > 1;
        let times =
            if pipelined { NetworkModel::pipelined_timeline(&stages) } else { serial_timeline(&stages) };
        let serial: f64 = stages.iter().flatten().sum();
        let span = times.last().map_or(0.0, |t| t[2][1]);
        // The exchange rounds run after the backward pass, before any bucket.
        let rounds = if n > 1 { rounds_seconds(&m, n, &net) } else { 0.0 };
        let c = p.work.compute_seconds + rounds;
        let ms = |x: f64| x * 1e3;
        println!(
            "{} with {n} workers at {}: {} bucket(s) of {} MiB, {} ({:?} allreduce, {:?} allgatherv; α {:.0} µs, {:.1} MB/s, ρ {:.0} µs)",
            cfg.compressor.name(),
            link_name(bps),
            stages.len(),
            cfg.compression.bucket_mb,
            if pipelined { "pipelined" } else { "one after another" },
            net.allreduce,
            net.allgatherv,
            net.alpha * 1e6,
            net.bandwidth / 1e6,
            net.rendezvous * 1e6
        );
        println!("  compute (forward, backward)      0.0 – {:>9.1} ms", ms(p.work.compute_seconds));
        if rounds > 0.0 {
            println!(
                "  exchange rounds ({})   {:>9.1} – {:>9.1} ms",
                m.rounds.len(),
                ms(p.work.compute_seconds),
                ms(c)
            );
        }
        println!("  bucket  tensors   compress (ms)          wire (ms)              decode (ms)");
        for (b, (r, t)) in buckets.iter().zip(&times).enumerate() {
            let span = |s: [f64; 2]| format!("{:>9.1} – {:>9.1}", ms(c + s[0]), ms(c + s[1]));
            println!(
                "  {:>6}  {:>7}   {}  {}  {}",
                b + 1,
                format!("{}..{}", r.start, r.end),
                span(t[0]),
                span(t[1]),
                span(t[2])
            );
        }
        println!(
            "  step {:.1} ms; stages one after another {:.1} ms; hidden by the pipeline {:.1} ms ({:.0}% of the wire)\n",
            ms(c + span),
            ms(c + serial),
            ms(serial - span),
            100.0 * (serial - span) / stages.iter().map(|s| s[1]).sum::<f64>().max(1e-12)
        );
    }
    Ok(())
}

/// `--peer-compute-ms`: another system's step priced by gradcomp's model:
/// its measured compute plus each of its collective calls in turn, on each
/// configured link (one DDP bucket: the calls follow the backward pass).
fn peer(cfg: &TrainConfig, compute_ms: f64, a: &Args) -> Result<()> {
    use gradcomp_comm::{AllgathervAlgorithm, AllreduceAlgorithm, CollectiveCall, OpKind};
    if !(compute_ms.is_finite() && compute_ms >= 0.0) {
        bail!("--peer-compute-ms must be a finite number of milliseconds ≥ 0, not {compute_ms}");
    }
    let n = cfg.workers;
    let calls: Vec<CollectiveCall> = a
        .peer_calls
        .iter()
        .map(|c| {
            let (op, bytes) = c.split_once(':').unwrap_or((c, ""));
            let bytes: u64 = bytes.parse().map_err(|_| {
                crate::user_error::UserError(format!(
                    "--peer-call {c}: expected OP:BYTES, e.g. allreduce:1724320"
                ))
            })?;
            match op {
                "allreduce" => Ok(CollectiveCall::allreduce(OpKind::AllreduceSumF32, bytes, None)),
                "allgather" => Ok(CollectiveCall {
                    op: OpKind::Allgatherv,
                    sizes: vec![bytes; n],
                    download: 0,
                    bucket: None,
                }),
                _ => Err(crate::user_error::UserError(format!(
                    "--peer-call {c}: the operation is allreduce or allgather"
                ))),
            }
        })
        .collect::<Result<_, _>>()?;
    let links = cfg.network.models().map_err(|e| crate::user_error::UserError(e.to_string()))?;
    for (bps, net) in links {
        let net = match a.peer_algorithm.as_str() {
            "ring" => net.with_allreduce(AllreduceAlgorithm::Ring).with_allgatherv(AllgathervAlgorithm::Ring),
            _ => net,
        };
        let wire: f64 = calls.iter().map(|c| net.price(c, n, ServerPlacement::CoLocated)).sum();
        let step = compute_ms / 1e3 + wire;
        if a.json {
            println!(
                "{}",
                serde_json::json!({"link_bps": bps, "workers": n, "compute_seconds": compute_ms / 1e3,
                                   "wire_seconds": wire, "step_seconds": step, "algorithm": a.peer_algorithm})
            );
        } else {
            println!(
                "{:>12}, {n} workers: compute {compute_ms:.1} ms + wire {:.1} ms ({} call(s), {} collectives) = {:.1} ms per step",
                link_name(bps),
                wire * 1e3,
                calls.len(),
                a.peer_algorithm,
                step * 1e3
            );
        }
    }
    Ok(())
}

fn dry_run(cfg: &TrainConfig, p: &Profile, a: &Args) -> Result<()> {
    let topology = cfg.data_parallel().topology();
    let dense = measure("dense", CompressorConfig::dense(), Topology::Allreduce, &p.work.shapes);
    let mine = measure(cfg.compressor.name(), cfg.compressor.clone(), topology, &p.work.shapes);
    let n = cfg.workers;
    println!(
        "{} with {n} workers, {} ({} bytes up per worker per step vs {} dense):",
        cfg.compressor.name(),
        topology.name(),
        mine.upload_for(n),
        dense.upload
    );
    for &b in &cfg.network.links_bps {
        let net = NetworkModel::from_bits_per_second(b, a.alpha);
        let (td, tm) = (step_seconds(&p.work, &dense, n, &net), step_seconds(&p.work, &mine, n, &net));
        let verdict =
            if td / tm >= PAYS_OFF { "pays off" } else { "does not pay off (under the model's 10% margin)" };
        println!(
            "  {:>12}: dense {:8.2} ms/step, {} {:8.2} ms/step -> {:.2}x: compression {verdict}",
            link_name(b),
            td * 1e3,
            cfg.compressor.name(),
            tm * 1e3,
            td / tm
        );
    }
    if cfg.strategy.kind.steps_locally() && cfg.strategy.average == gradcomp_train::config::Average::Models {
        print!("{}", local_lines(cfg, p, &dense, &mine, a.alpha));
    }
    Ok(())
}

/// Local updates priced (ALGORITHMS.md §2.1–2.2): the configured rounds
/// (period, fragments, delay) with the change sent densely or through the
/// configured compressor, per inner step at each configured link, beside
/// synchronous dense; the burn trainer runs a round where the step begins,
/// the PyTorch front (`LocalUpdates`) overlaps it with `delay` steps.
fn local_lines(cfg: &TrainConfig, p: &Profile, dense: &MethodCost, mine: &MethodCost, alpha: f64) -> String {
    let st = &cfg.strategy;
    let n = cfg.workers;
    let outer = outer_seconds_per_value(p.work.units.iter().sum());
    let carrier = if st.compress_change { mine } else { dense };
    let rounds = |overlap| LocalSetup {
        period: st.period,
        fragments: st.fragments as usize,
        delay: st.delay,
        overlap,
    };
    let mut out = String::new();
    let first = local_step_seconds(
        &p.work,
        carrier,
        n,
        &NetworkModel::from_bits_per_second(1e9, alpha),
        &rounds(false),
        outer,
    );
    let _ = writeln!(
        out,
        "local updates ({}, H = {}, P = {}, τ = {}, change {}): {} bytes per worker per period, at most {} in one round (dense every step: {} per step):",
        cfg.strategy.outer().kind_name(),
        st.period,
        st.fragments,
        st.delay,
        carrier.compressor.name(),
        first.bytes_per_period,
        first.peak_round_bytes,
        dense.upload
    );
    for &b in &cfg.network.links_bps {
        let net = NetworkModel::from_bits_per_second(b, alpha);
        let sync = step_seconds(&p.work, dense, n, &net);
        let burn = local_step_seconds(&p.work, carrier, n, &net, &rounds(false), outer);
        let torch = local_step_seconds(&p.work, carrier, n, &net, &rounds(true), outer);
        let _ = writeln!(
            out,
            "  {:>12}: dense sync {:8.2} ms/step; local {:8.2} ms/step in the trainer, {:8.2} with the round overlapped (LocalUpdates); compute {:.2}",
            link_name(b),
            sync * 1e3,
            burn.step_seconds * 1e3,
            torch.step_seconds * 1e3,
            p.work.compute_seconds * 1e3
        );
    }
    out
}
