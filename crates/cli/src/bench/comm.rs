//! `gradcomp bench comm`: each collective's measured time beside the
//! network model's prediction, for message sizes 4 KB … 100 MB.
//!
//! In-process (`--backend in-process --workers N`) runs N threads here; MPI
//! (`--backend mpi`) runs one rank per process under `mpirun` (for shaped
//! links: `scripts/netsim.sh run N 100mbit gradcomp bench comm --backend mpi`).
//! The model's α, B and eager-range cost ρ are fitted in the same run to the
//! allreduce times (`NetworkModel::fit`, with the allreduce algorithm the
//! backend runs), so the allreduce rows check the fit and the other
//! collectives check the model out of sample; or B is the nominal link rate
//! with `--link-bits-per-second`. `--calibrate-out FILE` saves the fitted
//! model for `network.calibration` (training predictions) and
//! `gradcomp model --calibration`.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use gradcomp_comm::{
    AllgathervAlgorithm, AllreduceAlgorithm, Calibration, Collective, Gathered, NetworkModel, ServerPlacement,
};
use serde::Serialize;

pub use super::output::Backend;

const SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 100 << 20];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Algorithm {
    Ring,
    RecursiveDoubling,
    Rabenseifner,
    Nonoverlapping,
    /// Open MPI 4.1's tuned choice for the size and rank count.
    OpenMpi,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GatherAlgorithm {
    Ring,
    Neighbor,
    Bruck,
    GatherBroadcast,
    OpenMpi,
}

#[derive(ClapArgs, Clone)]
pub struct Args {
    #[arg(long, value_enum, default_value = "in-process")]
    backend: Backend,
    /// Workers (in-process); with MPI the world size, which must match if given.
    #[arg(long)]
    workers: Option<usize>,
    /// Only this message size in bytes.
    #[arg(long)]
    bytes: Option<usize>,
    /// Use this nominal link rate for predictions instead of the calibrated bandwidth.
    #[arg(long)]
    link_bits_per_second: Option<f64>,
    /// The allreduce algorithm the backend runs, for the prediction (Open MPI:
    /// `--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 3`
    /// selects recursive doubling, as scripts/netsim.sh does).
    #[arg(long, value_enum, default_value = "ring")]
    allreduce_algorithm: Algorithm,
    /// The allgatherv algorithm the backend runs, for the prediction.
    #[arg(long, value_enum, default_value = "open-mpi")]
    allgatherv_algorithm: GatherAlgorithm,
    /// Comma-separated message sizes in bytes (multiples of 4), instead of
    /// the default 4 KiB, 64 KiB, 1 MiB, 16 MiB, 100 MiB.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Predict with this saved calibration instead of fitting one: a fresh
    /// measurement checks it.
    #[arg(long, conflicts_with = "calibrate_out")]
    calibration: Option<std::path::PathBuf>,
    /// Write the fitted model to this JSON file (needs `--nominal-bps`).
    #[arg(long)]
    calibrate_out: Option<std::path::PathBuf>,
    /// The nominal rate of the link measured (bit/s), which the
    /// calibration stands for in training predictions (e.g. 1e8).
    #[arg(long)]
    nominal_bps: Option<f64>,
    /// Skip the interleaved comparison with the raw `mpi` crate allreduce
    /// (MPI backend), e.g. when only calibrating.
    #[arg(long)]
    skip_raw: bool,
    /// Rank r enters each repetition r × this many ms after rank 0 (as after
    /// uneven compute in training); each time is then the last rank's.
    #[arg(long, default_value_t = 0.0)]
    skew_ms: f64,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// Minimum measuring time per case, in seconds (at least 3 repetitions run).
    #[arg(long, default_value_t = 0.3)]
    min_time: f64,
}

#[derive(Serialize)]
struct Row {
    op: &'static str,
    backend: &'static str,
    workers: usize,
    bytes: usize,
    seconds: f64,
    /// Algorithmic bandwidth: message bytes per rank / seconds.
    gbytes_per_s: f64,
    predicted_seconds: f64,
}

pub fn run(args: &Args) -> Result<()> {
    if let Some(b) = args.bytes.into_iter().chain(args.sizes.iter().copied()).find(|&b| b == 0 || b % 4 != 0)
    {
        bail!("message size {b}: sizes must be positive multiples of 4 (allreduce moves f32)");
    }
    if args.calibrate_out.is_some() && !args.nominal_bps.is_some_and(|b| b > 0.0 && b.is_finite()) {
        bail!("--calibrate-out needs --nominal-bps, the measured link's rate in bit/s (e.g. 1e8 for 100 Mbit/s)");
    }
    match args.backend {
        // Under MPI the bench also times the mpi crate's allreduce against this backend's.
        Backend::Mpi => run_mpi(args),
        Backend::InProcess => {
            if let Some(rows) =
                super::output::rows_on(args.backend, args.workers, |c| measure(c, args, "in-process"))?
            {
                print_rows(&rows, args.json);
            }
            Ok(())
        }
    }
}

#[cfg(feature = "mpi")]
fn run_mpi(args: &Args) -> Result<()> {
    let mut c = gradcomp_comm::mpi::MpiCollective::init(args.workers, std::time::Duration::from_secs(600))?;
    let mut rows = measure(&mut c, args, "mpi")?;
    if !args.skip_raw {
        rows.extend(raw_mpi_allreduce(&mut c, args)?);
    }
    if c.rank() == 0 {
        print_rows(&rows, args.json);
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_args: &Args) -> Result<()> {
    bail!("this gradcomp was built without MPI; rebuild with `cargo build --release -p gradcomp-cli --features mpi`")
}

/// Rounds of the interleaved comparison with the `mpi` crate.
#[cfg(feature = "mpi")]
const AB_ROUNDS: usize = 9;

/// This backend's allreduce against the same call through the `mpi` crate
/// directly (separate send and receive buffers, no checks), for the overhead
/// target. The two are interleaved: each of [`AB_ROUNDS`] rounds times both,
/// in alternating order, so drift on a shared machine hits both alike; each
/// row is that side's median over the rounds.
#[cfg(feature = "mpi")]
fn raw_mpi_allreduce(c: &mut gradcomp_comm::mpi::MpiCollective, args: &Args) -> Result<Vec<Row>> {
    let n = c.world_size();
    let mut rows = Vec::new();
    for bytes in sizes(args) {
        let mut ours = vec![1.0f32; bytes / 4];
        let send = vec![1.0f32; bytes / 4];
        let mut recv = vec![0.0f32; bytes / 4];
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for round in 0..AB_ROUNDS {
            for side in [round % 2, 1 - round % 2] {
                if side == 0 {
                    a.push(timed(c, args, |c| Ok(c.allreduce_sum_f32(black_box(&mut ours))?))?);
                } else {
                    b.push(timed(c, args, |c| {
                        c.raw_allreduce_sum_f32(&send, &mut recv);
                        Ok(())
                    })?);
                }
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        rows.push(row("allreduce_ab_ours", "mpi", n, bytes, median(&mut a), f64::NAN));
        rows.push(row("allreduce_raw_mpi", "mpi", n, bytes, median(&mut b), f64::NAN));
    }
    Ok(rows)
}

fn sizes(args: &Args) -> Vec<usize> {
    if !args.sizes.is_empty() {
        return args.sizes.clone();
    }
    args.bytes.map_or_else(|| SIZES.to_vec(), |b| vec![b])
}

fn row(
    op: &'static str,
    backend: &'static str,
    workers: usize,
    bytes: usize,
    seconds: f64,
    predicted: f64,
) -> Row {
    Row {
        op,
        backend,
        workers,
        bytes,
        seconds,
        gbytes_per_s: bytes as f64 / seconds / 1e9,
        predicted_seconds: predicted,
    }
}

/// Seconds of each repetition of `op` followed by a barrier. The number of
/// repetitions comes from rank 0's warm-up run and is broadcast, so every
/// rank makes the same calls.
fn agreed_times<C: Collective + ?Sized>(
    c: &mut C,
    min_time: f64,
    mut op: impl FnMut(&mut C) -> Result<()>,
) -> Result<Vec<f64>> {
    let t0 = Instant::now();
    op(c)?;
    c.barrier()?;
    let warm = t0.elapsed().as_secs_f64().max(1e-9);
    let mut reps = ((min_time / warm) as u64).clamp(3, 1000).to_le_bytes().to_vec();
    c.broadcast(&mut reps, 0)?;
    let reps = u64::from_le_bytes(reps.as_slice().try_into()?) as usize;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        c.barrier()?;
        let t = Instant::now();
        op(c)?;
        c.barrier()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// The median time of `op`, less the median time of a bare barrier (the
/// closing barrier every repetition includes).
fn timed<C: Collective + ?Sized>(
    c: &mut C,
    args: &Args,
    op: impl FnMut(&mut C) -> Result<()>,
) -> Result<f64> {
    if args.skew_ms > 0.0 {
        return skewed_time(c, args, op);
    }
    let barrier = agreed_times(c, args.min_time.min(0.1), |_| Ok(()))?;
    let times = agreed_times(c, args.min_time, op)?;
    let (b, t) = (barrier[barrier.len() / 2], times[times.len() / 2]);
    // A barrier can cost more than a tiny op measured beside it; never report below half the fastest run.
    Ok((t - b).max(times[0] * 0.5))
}

/// `--skew-ms`: rank r enters each repetition r × skew after the others,
/// as ranks do in training after compute of uneven length; the time of a
/// repetition is the last rank's (the shortest: it waits for nobody), the
/// median over repetitions.
fn skewed_time<C: Collective + ?Sized>(
    c: &mut C,
    args: &Args,
    mut op: impl FnMut(&mut C) -> Result<()>,
) -> Result<f64> {
    let skew = std::time::Duration::from_secs_f64(args.skew_ms * 1e-3 * c.rank() as f64);
    let mut times = Vec::new();
    let start = Instant::now();
    loop {
        c.barrier()?;
        std::thread::sleep(skew);
        let t = Instant::now();
        op(c)?;
        // The shortest rank's duration: the maximum of the negated times.
        let mut d = [-(t.elapsed().as_secs_f32())];
        c.allreduce_max_f32(&mut d)?;
        times.push(-f64::from(d[0]));
        // Every rank leaves the loop together: rank 0's clock decides.
        let mut more =
            [f32::from(u8::from(times.len() < 3 || start.elapsed().as_secs_f64() < args.min_time))];
        c.allreduce_max_f32(&mut more)?;
        if more[0] == 0.0 {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn measure(c: &mut dyn Collective, args: &Args, backend: &'static str) -> Result<Vec<Row>> {
    let n = c.world_size();
    let sizes = sizes(args);
    // Allreduce first: the model is fitted to it.
    let mut allreduce = Vec::new();
    for &bytes in &sizes {
        let mut f = vec![1.0f32; bytes / 4];
        allreduce.push((bytes as u64, timed(c, args, |c| Ok(c.allreduce_sum_f32(black_box(&mut f))?))?));
    }
    let algorithms = configured_algorithms(args);
    // Then the other collectives, each checked against the model out of sample.
    let measured = measure_others(c, args, &sizes)?;
    // The model: α, B and ρ fitted to the allreduce; with the calibration,
    // the measured exchange rounds (allreduce) and one-way messages
    // (parameter server) as curves.
    let mut model = if let Some(path) = &args.calibration {
        let cal = Calibration::load(path).map_err(anyhow::Error::msg)?;
        if cal.workers != n {
            bail!("{} was calibrated with {} ranks, this run has {n}", path.display(), cal.workers);
        }
        cal.model
    } else if n > 1 && allreduce.len() >= 3 {
        algorithms.fit(n, &allreduce).map_err(anyhow::Error::msg)?
    } else {
        algorithms
    };
    if let Some(bps) = args.link_bits_per_second {
        model.bandwidth = bps / 8.0;
    }
    if args.calibrate_out.is_some() {
        let push_pull: Vec<(u64, f64)> =
            sizes.iter().zip(&measured).map(|(&b, m)| (b as u64, m[2])).collect();
        model = model.with_curves(n, &allreduce, &push_pull);
    }
    let mut rows = Vec::new();
    for ((&bytes, &(_, s)), m) in sizes.iter().zip(&allreduce).zip(&measured) {
        let b = bytes as u64;
        rows.push(row("allreduce", backend, n, bytes, s, model.allreduce(n, b)));
        rows.push(row("allgatherv", backend, n, bytes, m[0], model.allgatherv_uniform(n, b)));
        rows.push(row("broadcast", backend, n, bytes, m[1], model.broadcast(n, b)));
        let predicted = model.push_pull(n, ServerPlacement::CoLocated, b, b);
        rows.push(row("push_pull", backend, n, bytes, m[2], predicted));
    }
    if c.rank() == 0 {
        report_model(args, n, &model, allreduce)?;
    }
    Ok(rows)
}

/// The model's algorithms as `--allreduce-algorithm` and
/// `--allgatherv-algorithm` choose them, on a placeholder link.
fn configured_algorithms(args: &Args) -> NetworkModel {
    NetworkModel::from_bits_per_second(1e12, 0.0)
        .with_allreduce(allreduce_algorithm(args.allreduce_algorithm))
        .with_allgatherv(allgatherv_algorithm(args.allgatherv_algorithm))
}

pub(super) fn allreduce_algorithm(a: Algorithm) -> AllreduceAlgorithm {
    match a {
        Algorithm::Ring => AllreduceAlgorithm::Ring,
        Algorithm::RecursiveDoubling => AllreduceAlgorithm::RecursiveDoubling,
        Algorithm::Rabenseifner => AllreduceAlgorithm::Rabenseifner,
        Algorithm::Nonoverlapping => AllreduceAlgorithm::Nonoverlapping,
        Algorithm::OpenMpi => AllreduceAlgorithm::OpenMpi,
    }
}

pub(super) fn allgatherv_algorithm(a: GatherAlgorithm) -> AllgathervAlgorithm {
    match a {
        GatherAlgorithm::Ring => AllgathervAlgorithm::Ring,
        GatherAlgorithm::Neighbor => AllgathervAlgorithm::Neighbor,
        GatherAlgorithm::Bruck => AllgathervAlgorithm::Bruck,
        GatherAlgorithm::GatherBroadcast => AllgathervAlgorithm::GatherBroadcast,
        GatherAlgorithm::OpenMpi => AllgathervAlgorithm::OpenMpi,
    }
}

/// Per size, the median times of allgatherv, broadcast and push_pull (in
/// that order), each with a message of that many bytes.
fn measure_others(c: &mut dyn Collective, args: &Args, sizes: &[usize]) -> Result<Vec<[f64; 3]>> {
    let mut measured = Vec::new();
    for &bytes in sizes {
        let msg = vec![7u8; bytes];
        let mut g = Gathered::default();
        let gather = timed(c, args, |c| Ok(c.allgatherv(&msg, &mut g)?))?;
        let mut b = msg.clone();
        let broadcast = timed(c, args, |c| Ok(c.broadcast(&mut b, 0)?))?;
        let mut down = Vec::new();
        let mut first = |ups: &Gathered, out: &mut Vec<u8>| {
            out.extend_from_slice(ups.get(0));
            Ok(())
        };
        let push_pull =
            timed(c, args, |c| Ok(c.push_pull(ServerPlacement::CoLocated, &msg, &mut first, &mut down)?))?;
        measured.push([gather, broadcast, push_pull]);
    }
    Ok(measured)
}

/// Rank 0's account of the model: its parameters (unless `--json`), and
/// the calibration file `--calibrate-out` asks for, with `allreduce` as its samples.
fn report_model(args: &Args, n: usize, model: &NetworkModel, allreduce: Vec<(u64, f64)>) -> Result<()> {
    if !args.json {
        println!(
            "model: alpha = {:.1} us, bandwidth = {:.3} GB/s, rendezvous = {:.1} us per message over {} KiB ({}), allreduce {:?}, allgatherv {:?}",
            model.alpha * 1e6,
            model.bandwidth / 1e9,
            model.rendezvous * 1e6,
            model.eager_limit >> 10,
            if args.link_bits_per_second.is_some() {
                "nominal link rate"
            } else if args.calibration.is_some() {
                "the saved calibration"
            } else {
                "fitted to this run's allreduce"
            },
            model.allreduce,
            model.allgatherv
        );
    }
    if let Some(path) = &args.calibrate_out {
        let link_bps =
            args.nominal_bps.context("--calibrate-out needs --nominal-bps (the link's rate, e.g. 1e8)")?;
        let cal = Calibration { link_bps, workers: n, model: model.clone(), samples: allreduce };
        std::fs::write(path, serde_json::to_string_pretty(&cal)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("calibration written to {}", path.display());
    }
    Ok(())
}

fn print_rows(rows: &[Row], json: bool) {
    use super::output::Column;
    let columns = [
        Column::name("op", 18),
        Column::name("backend", 10),
        Column::number("workers", 7),
        Column::number("bytes", 11),
        Column::number("seconds", 11),
        Column::number("GB/s", 9),
        Column::number("predicted s", 12),
        Column::number("error", 8),
    ];
    super::output::print_rows(rows, json, &columns, |r| {
        let error = if r.predicted_seconds.is_nan() {
            "-".to_string()
        } else {
            format!("{:+.0}%", (r.predicted_seconds / r.seconds - 1.0) * 100.0)
        };
        vec![vec![
            r.op.to_string(),
            r.backend.to_string(),
            r.workers.to_string(),
            r.bytes.to_string(),
            format!("{:.6}", r.seconds),
            format!("{:.3}", r.gbytes_per_s),
            format!("{:.6}", r.predicted_seconds),
            error,
        ]]
    });
}
