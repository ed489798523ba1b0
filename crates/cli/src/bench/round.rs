//! `gradcomp bench round`: one outer round's exchange of a model's change
//! (compress, the collectives, decode; no training), per compressor and
//! topology, timed beside what it counted and what the network model
//! predicts for it: the model's price of the calls the round made, plus the
//! round's own measured codec seconds (the slowest rank's: the ranks share
//! this machine's cores, and a round waits for the last to compress).
//!
//! It measures the wire, not the trainers: eight ranks that each trained
//! on two cores would measure the CPU. On shaped links:
//! `scripts/netsim.sh run 8 100mbit gradcomp bench round --backend mpi
//! --shapes docs/bench/scale/shapes-lstm.json`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use gradcomp_comm::{Collective, Metered, NetworkModel, OpKind, ServerPlacement};
use gradcomp_compress::{CompressorConfig, UnitRng};
use gradcomp_dp::config::{DataParallelConfig, Topology};
use gradcomp_dp::exchange::grad_stages::CompleteGrad;
use gradcomp_dp::exchange::{Gradient, GradientExchange, StepInput};
use gradcomp_dp::layout::GradientLayout;
use serde::Serialize;

use super::output::Backend;

#[derive(ClapArgs, Clone)]
pub struct Args {
    #[arg(long, value_enum, default_value = "in-process")]
    backend: Backend,
    /// Workers (in-process); with MPI the world size, which must match if given.
    #[arg(long)]
    workers: Option<usize>,
    /// The model's parameter shapes: a JSON list of lists
    /// (docs/bench/scale/shapes-*.json).
    #[arg(long)]
    shapes: PathBuf,
    /// Comma-separated `compressor:topology` cases.
    #[arg(long, value_delimiter = ',', default_value = "dense:allreduce,fp4:allgather,fp4:reduce-scatter")]
    cases: Vec<String>,
    /// The link's rate in bit/s the prediction prices (e.g. 1e8).
    #[arg(long, default_value_t = 1e8)]
    link_bits_per_second: f64,
    /// The per-message latency α the prediction prices, in seconds.
    #[arg(long, default_value_t = 1e-4)]
    alpha: f64,
    /// Price with this calibration's α, bandwidth and eager-range cost
    /// (`gradcomp bench comm --calibrate-out`, fitted to allreduce alone),
    /// whatever the ranks it was measured with, instead of the nominal rate.
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// The allreduce algorithm the MPI library runs (scripts/netsim.sh pins
    /// recursive doubling).
    #[arg(long, value_enum, default_value = "recursive-doubling")]
    allreduce_algorithm: super::comm::Algorithm,
    /// The allgatherv algorithm the MPI library runs.
    #[arg(long, value_enum, default_value = "open-mpi")]
    allgatherv_algorithm: super::comm::GatherAlgorithm,
    /// Minimum measuring time per case, in seconds (at least 3 rounds run).
    #[arg(long, default_value_t = 2.0)]
    min_time: f64,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    compressor: String,
    topology: &'static str,
    workers: usize,
    elements: usize,
    /// Rank 0's bytes per round, as the meter counts them.
    sent: u64,
    received: u64,
    rounds: usize,
    /// Median seconds of a round on rank 0.
    seconds: f64,
    /// The model's price of the round's calls plus its measured codec seconds.
    predicted_seconds: f64,
    /// Of which the wire, as the model prices it.
    predicted_wire_seconds: f64,
    /// Median seconds the slowest rank compressed and decoded in a round.
    codec_seconds: f64,
    /// Median seconds rank 0 spent inside the round's collectives
    /// (waiting for slower peers included).
    communicate_seconds: f64,
}

pub fn run(args: &Args) -> Result<()> {
    let text = std::fs::read_to_string(&args.shapes)
        .with_context(|| format!("reading {}", args.shapes.display()))?;
    let shapes: Vec<Vec<usize>> = serde_json::from_str(&text).with_context(|| {
        format!("{}: expected a JSON list of shapes, e.g. [[200, 10000], [200]]", args.shapes.display())
    })?;
    if shapes.is_empty() || shapes.iter().any(|s| s.iter().product::<usize>() == 0) {
        bail!("{}: needs at least one tensor, none of them empty", args.shapes.display());
    }
    let cases = args.cases.iter().map(|c| parse_case(c)).collect::<Result<Vec<_>>>()?;
    let rows = super::output::rows_on(args.backend, args.workers, |c| measure(c, args, &shapes, &cases))?;
    if let Some(rows) = rows {
        print_rows(&rows, args.json);
    }
    Ok(())
}

/// `fp4:reduce-scatter` → (fp4, ReduceScatter), checked as a configuration.
fn parse_case(case: &str) -> Result<(CompressorConfig, Topology)> {
    let (name, topology) = case
        .split_once(':')
        .with_context(|| format!("case {case:?}: write compressor:topology, e.g. fp4:reduce-scatter"))?;
    let compressor = CompressorConfig::named(name)
        .with_context(|| format!("case {case:?}: no compressor named {name:?}"))?;
    let topology = [Topology::Allreduce, Topology::Allgather, Topology::ReduceScatter]
        .into_iter()
        .find(|t| t.name() == topology)
        .with_context(|| format!("case {case:?}: topology is allreduce, allgather or reduce-scatter"))?;
    DataParallelConfig::new(compressor.clone())
        .with_topology(topology)
        .validate()
        .map_err(|e| anyhow::anyhow!("case {case:?}: {}: {}", e.key, e.problem))?;
    Ok((compressor, topology))
}

fn measure(
    c: impl Collective,
    args: &Args,
    shapes: &[Vec<usize>],
    cases: &[(CompressorConfig, Topology)],
) -> Result<Vec<Row>> {
    let mut c = Metered::new(c);
    let n = c.world_size();
    let layout = GradientLayout::new(shapes.iter().enumerate().map(|(i, s)| (format!("t{i}"), s.clone())));
    let total = layout.total();
    // A change of DiLoCo's scale (about 1e-3 a value), different per worker.
    let mut rng = UnitRng::from_parts(&[17, c.rank() as u64]);
    let change: Vec<f32> = (0..total).map(|_| rng.next_gaussian() as f32 * 1e-3).collect();
    let mut out = vec![0.0f32; total];
    let net = pricing(args)?;
    let mut rows = Vec::new();
    for (compressor, topology) in cases {
        let cfg = DataParallelConfig::new(compressor.clone()).with_topology(*topology);
        let mut x = GradientExchange::new(&layout, &cfg, n, 5);
        let mut round = |c: &mut Metered<_>, step: u64| -> Result<_> {
            let input = StepInput { step, lr: 1.0, loss: None, measure: false };
            Ok(x.exchange(Gradient::Host(&mut CompleteGrad(&change)), &input, &mut out, c)?)
        };
        // A warm-up round, whose calls and bytes the rows report.
        let st = round(&mut c, 0)?;
        let bytes = c.meter_mut().take_step();
        let (sent, received) = OpKind::ALL.iter().fold((0, 0), |(s, r), &op| {
            let b = bytes.get(op);
            (s + b.sent, r + b.received)
        });
        let wire: f64 = st.calls.iter().map(|call| net.price(call, n, ServerPlacement::CoLocated)).sum();
        let (mut times, mut codec, mut wait) = (Vec::new(), Vec::new(), Vec::new());
        let start = Instant::now();
        let mut step = 1;
        loop {
            c.barrier()?;
            let t = Instant::now();
            let st = round(&mut c, step)?;
            // The slowest rank's round and codec seconds.
            let mut d = [t.elapsed().as_secs_f32(), (st.compress_seconds + st.decode_seconds) as f32];
            c.allreduce_max_f32(&mut d)?;
            times.push(f64::from(d[0]));
            codec.push(f64::from(d[1]));
            wait.push(st.communicate_seconds);
            let mut more =
                [f32::from(u8::from(times.len() < 3 || start.elapsed().as_secs_f64() < args.min_time))];
            c.allreduce_max_f32(&mut more)?;
            c.meter_mut().take_step();
            step += 1;
            if more[0] == 0.0 {
                break;
            }
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        rows.push(Row {
            compressor: compressor.name().to_string(),
            topology: topology.name(),
            workers: n,
            elements: total,
            sent,
            received,
            rounds: times.len(),
            seconds: median(times),
            predicted_seconds: wire + median(codec.clone()),
            predicted_wire_seconds: wire,
            codec_seconds: median(codec),
            communicate_seconds: median(wait),
        });
    }
    Ok(rows)
}

/// The model the prediction prices with: the nominal link (or a
/// calibration's α, bandwidth and eager-range cost) and the algorithms the
/// MPI library runs.
fn pricing(args: &Args) -> Result<NetworkModel> {
    let mut net = NetworkModel::from_bits_per_second(args.link_bits_per_second, args.alpha);
    if let Some(path) = &args.calibration {
        let cal = gradcomp_comm::Calibration::load(path).map_err(anyhow::Error::msg)?;
        (net.alpha, net.bandwidth) = (cal.model.alpha, cal.model.bandwidth);
        (net.rendezvous, net.eager_limit) = (cal.model.rendezvous, cal.model.eager_limit);
    }
    Ok(net
        .with_allreduce(super::comm::allreduce_algorithm(args.allreduce_algorithm))
        .with_allgatherv(super::comm::allgatherv_algorithm(args.allgatherv_algorithm)))
}

fn print_rows(rows: &[Row], json: bool) {
    use super::output::Column;
    let columns = [
        Column::name("compressor", 10),
        Column::name("topology", 15),
        Column::number("workers", 7),
        Column::number("elements", 10),
        Column::number("sent", 12),
        Column::number("received", 12),
        Column::number("rounds", 6),
        Column::number("seconds", 10),
        Column::number("predicted s", 11),
        Column::number("error", 7),
    ];
    super::output::print_rows(rows, json, &columns, |r| {
        vec![vec![
            r.compressor.clone(),
            r.topology.to_string(),
            r.workers.to_string(),
            r.elements.to_string(),
            r.sent.to_string(),
            r.received.to_string(),
            r.rounds.to_string(),
            format!("{:.4}", r.seconds),
            format!("{:.4}", r.predicted_seconds),
            format!("{:+.0}%", (r.predicted_seconds / r.seconds - 1.0) * 100.0),
        ]]
    });
}
