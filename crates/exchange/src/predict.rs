//! The performance model's methods (TernGrad §5, ALGORITHMS.md §1.5
//! generalized): what each compressor sends and how fast it compresses and
//! decodes, measured on a model's tensor shapes, and the step time that
//! follows for N workers on a link. `gradcomp model` and the Python
//! package's `gradcomp.model` both price with it.
//!
//! Per step and worker: `t = t_compute + t_compress + t_comm(N, B)`, where
//! `t_comm` prices the bytes the codec really produces (messages built from
//! a synthetic N(0, 10⁻⁶) gradient of the model's shapes) with the α–β
//! formulas of `gradcomp-comm`, and decoding N gathered messages costs N ×
//! the measured per-message decode time.

use std::time::Instant;

use gradcomp_comm::{NetworkModel, ServerPlacement};
use gradcomp_compress::codec;
use gradcomp_compress::message::TernarySumMessage;
use gradcomp_compress::{Combine, CompressionUnit, CompressorConfig, Message, RngKey, UnitContext, UnitRng};

/// What a step computes and the tensors it exchanges.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Seconds of forward and backward pass per step on one worker.
    pub compute_seconds: f64,
    /// Each tensor's element count.
    pub units: Vec<usize>,
    /// Each tensor's shape (PowerSGD compresses by it).
    pub shapes: Vec<Vec<usize>>,
}

impl Workload {
    pub fn new(compute_seconds: f64, shapes: Vec<Vec<usize>>) -> Self {
        let units = shapes.iter().map(|s| s.iter().product()).collect();
        Workload { compute_seconds, units, shapes }
    }
}

/// The median of `v` (the upper one for an even count); NaN when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// How a method's messages travel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Route {
    Allreduce,
    Allgather,
    ParameterServer,
}

/// One method: a compressor and the collective it uses.
pub struct Method {
    pub label: String,
    pub compressor: CompressorConfig,
    pub route: Route,
    /// Per worker: bytes uploaded per step in the buckets' collectives.
    pub upload: u64,
    /// Per worker: bytes of each agreement round, an allreduce each before
    /// the buckets (TernGrad's scaler max, PowerSGD's P and Q sums).
    pub rounds: Vec<u64>,
    /// Seconds to compress one step's gradient.
    pub compress_seconds: f64,
    /// Seconds to decode and aggregate one worker's message.
    pub decode_seconds: f64,
    /// The same three per tensor (the timeline's buckets add them up).
    pub units: Vec<UnitCost>,
}

/// One tensor's message size and measured compress and decode seconds.
#[derive(Clone, Copy, Default)]
pub struct UnitCost {
    pub upload: u64,
    pub compress_seconds: f64,
    pub decode_seconds: f64,
}

/// Builds the method, measuring its message size and speed (per tensor,
/// medians of 5 repetitions, from the first step it compresses) on an
/// N(0,1) gradient cut into the profile's tensors. A tensor the compressor
/// leaves uncompressed (PowerSGD's vectors) travels dense, as in the exchange.
pub fn measure(label: &str, compressor: CompressorConfig, route: Route, shapes: &[Vec<usize>]) -> Method {
    let units: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    let mut rng = UnitRng::from_parts(&[7]);
    let grads: Vec<Vec<f32>> =
        units.iter().map(|&n| (0..n).map(|_| rng.next_gaussian() as f32 * 1e-3).collect()).collect();
    let mut comps: Vec<CompressionUnit> = shapes
        .iter()
        .map(|s| {
            let c = if compressor.compresses(s) {
                compressor.build_for(s)
            } else {
                CompressorConfig::dense().build()
            };
            CompressionUnit::new(c, None)
        })
        .collect();
    let mut rounds: Vec<u64> = Vec::new();
    let first = compressor.first_compressed_step();
    let mut msgs: Vec<Message> = units.iter().map(|_| Message::default()).collect();
    let mut wires: Vec<Vec<u8>> = units.iter().map(|_| Vec::new()).collect();
    let mut out: Vec<Vec<f32>> = units.iter().map(|&n| vec![0.0; n]).collect();
    const REPS: usize = 5;
    let (mut ctimes, mut dtimes) = (vec![Vec::new(); units.len()], vec![Vec::new(); units.len()]);
    for rep in 0..REPS as u64 {
        for (u, g) in grads.iter().enumerate() {
            let t = Instant::now();
            let ctx = UnitContext { key: RngKey::new(1, 0, first + rep, u as u32), loss: Some(1.0) };
            // The agreement rounds as the sole worker, their bytes counted once.
            comps[u].step_alone(g, 1.0, &ctx, &mut msgs[u], |round, values| {
                if rep == 0 {
                    rounds.resize(rounds.len().max(round + 1), 0);
                    rounds[round] += 4 * values.len() as u64;
                }
            });
            wires[u].clear();
            codec::encode(&msgs[u], u as u32, &mut wires[u]);
            ctimes[u].push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            codec::accumulate(&wires[u], 0.5, &mut out[u]).expect("own encoding");
            dtimes[u].push(t.elapsed().as_secs_f64());
        }
    }
    let costs: Vec<UnitCost> = (0..units.len())
        .map(|u| UnitCost {
            upload: match (comps[u].compressor().combine(), route) {
                // The rounds carried it: each worker forms the result itself.
                (Combine::InRounds, _) => 0,
                (combine, Route::Allreduce) => allreduce_bytes(combine, units[u], &wires[u]),
                _ => wires[u].len() as u64,
            },
            compress_seconds: median(std::mem::take(&mut ctimes[u])),
            decode_seconds: median(std::mem::take(&mut dtimes[u])),
        })
        .collect();
    Method {
        label: label.into(),
        compressor,
        route,
        upload: costs.iter().map(|c| c.upload).sum(),
        rounds,
        compress_seconds: costs.iter().map(|c| c.compress_seconds).sum(),
        decode_seconds: costs.iter().map(|c| c.decode_seconds).sum(),
        units: costs,
    }
}

pub fn methods(units: &[Vec<usize>], density: f64) -> Vec<Method> {
    let with = |name: &str| {
        let mut c = CompressorConfig::named(name).expect("known name");
        c.set_density(density);
        c
    };
    vec![
        measure("dense (allreduce)", with("dense"), Route::Allreduce, units),
        measure("dense (parameter server)", with("dense"), Route::ParameterServer, units),
        measure("fp16 (allreduce)", with("fp16"), Route::Allreduce, units),
        measure("terngrad (allreduce)", with("terngrad"), Route::Allreduce, units),
        measure("terngrad (parameter server)", with("terngrad"), Route::ParameterServer, units),
        measure("qsgd (allgather)", with("qsgd"), Route::Allgather, units),
        measure("onebit (allgather)", with("onebit"), Route::Allgather, units),
        measure(&format!("topk ρ={density} (allgather)"), with("topk"), Route::Allgather, units),
        measure(&format!("gaussiank ρ={density} (allgather)"), with("gaussiank"), Route::Allgather, units),
        measure(&format!("dgck ρ={density} (allgather)"), with("dgck"), Route::Allgather, units),
        measure("powersgd r=2 (allreduce, 2 rounds)", powersgd_rank(2), Route::Allreduce, units),
    ]
}

/// PowerSGD at `rank`, PyTorch's other defaults (the model prices the steps
/// from `start_iter` on).
pub fn powersgd_rank(rank: u32) -> CompressorConfig {
    let mut c = CompressorConfig::named("powersgd").expect("known name");
    if let CompressorConfig::Powersgd(p) = &mut c {
        p.rank = rank;
    }
    c
}

/// What one rank's allreduce carries for a unit of `d` values: f32 values,
/// f16 values (fp16), TernGrad's codes in i8 (up to 127 workers, as the
/// exchange sums them), or the encoded message otherwise.
pub fn allreduce_bytes(combine: Combine, d: usize, encoded: &[u8]) -> u64 {
    match combine {
        Combine::HalfSum => 2 * d as u64,
        Combine::TernarySum => d as u64,
        Combine::DenseSum => 4 * d as u64,
        Combine::SharedIndexSum
        | Combine::Gather
        | Combine::MajorityVote
        | Combine::SenderMean { .. }
        | Combine::InRounds => encoded.len() as u64,
    }
}

/// How many times its one-byte codes TernGrad's allreduce sends with `n`
/// workers (i8 sums up to 127 workers, i16 up to 32767, i32 beyond); 1 for
/// every other compressor.
pub fn code_width(compressor: &CompressorConfig, n: usize) -> u64 {
    match compressor {
        CompressorConfig::Terngrad(_) => crate::plan::CodeWidth::for_workers(n).bytes(),
        _ => 1,
    }
}

/// Bytes the parameter server downloads for TernGrad with N workers.
pub fn ternary_download(units: &[usize], n: usize) -> u64 {
    units
        .iter()
        .map(|&d| {
            let m =
                Message::TernarySum(TernarySumMessage { scale: 1.0, workers: n as u32, sums: vec![0; d] });
            codec::encoded_len(&m) as u64
        })
        .sum()
}

/// Predicted seconds per step for `m` with `n` workers on `net`.
pub fn step_seconds(p: &Workload, m: &Method, n: usize, net: &NetworkModel) -> f64 {
    let local = p.compute_seconds + m.compress_seconds;
    if n == 1 {
        return local;
    }
    let comm = rounds_seconds(m, n, net)
        + match m.route {
            Route::Allreduce => net.allreduce(n, m.upload * code_width(&m.compressor, n)) + m.decode_seconds,
            Route::Allgather => net.allgatherv_uniform(n, m.upload) + n as f64 * m.decode_seconds,
            Route::ParameterServer => {
                // TernGrad downloads integer code sums; everything else the averaged
                // values, as large as an upload.
                let down = if matches!(m.compressor, CompressorConfig::Terngrad(_)) {
                    ternary_download(&p.units, n)
                } else {
                    m.upload
                };
                // The co-located server decodes N uploads; every worker decodes the download.
                net.push_pull(n, ServerPlacement::CoLocated, m.upload, down)
                    + (n as f64 + 1.0) * m.decode_seconds
            }
        };
    local + comm
}

/// The agreement rounds' allreduces, one after another before the buckets.
pub fn rounds_seconds(m: &Method, n: usize, net: &NetworkModel) -> f64 {
    m.rounds.iter().map(|&b| net.allreduce(n, b)).sum()
}

/// Local updates' rounds as the model prices them (ALGORITHMS.md §2.1–2.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalSetup {
    /// H: inner steps per round of each fragment.
    pub period: u64,
    /// P: fragments, cut as the strategy cuts them (whole tensors, about
    /// equal sizes).
    pub fragments: usize,
    /// τ: inner steps between a round's start and its merge.
    pub delay: u64,
    /// Whether the front runs a round's exchange while those τ steps
    /// compute (the PyTorch front's communication thread); the burn
    /// trainer runs it where the step begins.
    pub overlap: bool,
}

/// What local updates cost per inner step, averaged over a period.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LocalPrice {
    /// Mean seconds per inner step: compute plus the rounds' exposed time / H.
    pub step_seconds: f64,
    /// The rounds' seconds per period, all fragments (exchange, codec, outer step).
    pub round_seconds: f64,
    /// Of those, the seconds the inner steps wait for per period.
    pub exposed_seconds: f64,
    /// Bytes a worker sends per period (every fragment's round once).
    pub bytes_per_period: u64,
    /// The largest one round sends (the peak Streaming lowers).
    pub peak_round_bytes: u64,
}

/// Seconds to form a change, step θ_outer (Nesterov, the costliest) and merge
/// back, per parameter: measured here on `len` values (median of 3).
pub fn outer_seconds_per_value(len: usize) -> f64 {
    use crate::config::OuterConfig;
    let mut outer = crate::strategy::outer_for_pricing(OuterConfig::nesterov());
    let (mut anchor, mut model, mut change) = (vec![0.5f32; len], vec![0.25f32; len], vec![0.0f32; len]);
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        change.iter_mut().zip(&model).zip(&anchor).for_each(|((c, x), a)| *c = x - a);
        outer.apply(&mut anchor, &change);
        model.copy_from_slice(&anchor);
        times.push(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&model);
    median(times) / len.max(1) as f64
}

/// Local updates with `m` carrying each round's change: per fragment its
/// tensors' share of `m`'s measured bytes and codec seconds (agreement
/// rounds in proportion to its size), priced on `net` among `n` workers,
/// plus the outer step (`outer_per_value` seconds per parameter); a round
/// hides behind `delay` inner steps of compute when the front overlaps it.
pub fn local_step_seconds(
    p: &Workload,
    m: &Method,
    n: usize,
    net: &NetworkModel,
    s: &LocalSetup,
    outer_per_value: f64,
) -> LocalPrice {
    let total: usize = p.units.iter().sum();
    let groups = crate::strategy::partition(&p.units, s.fragments.clamp(1, p.units.len().max(1)));
    let mut price = LocalPrice::default();
    // A round is a step of its fragment without the compute.
    let no_compute = Workload { compute_seconds: 0.0, ..p.clone() };
    for g in groups {
        let len: usize = p.units[g.clone()].iter().sum();
        let share = len as f64 / total.max(1) as f64;
        let costs = &m.units[g];
        let part = Method {
            label: m.label.clone(),
            compressor: m.compressor.clone(),
            route: m.route,
            upload: costs.iter().map(|c| c.upload).sum(),
            rounds: m.rounds.iter().map(|&b| (b as f64 * share).round() as u64).collect(),
            compress_seconds: costs.iter().map(|c| c.compress_seconds).sum(),
            decode_seconds: costs.iter().map(|c| c.decode_seconds).sum(),
            units: costs.to_vec(),
        };
        let round = step_seconds(&no_compute, &part, n, net) + outer_per_value * len as f64;
        let hidden = if s.overlap { s.delay as f64 * p.compute_seconds } else { 0.0 };
        price.round_seconds += round;
        price.exposed_seconds += (round - hidden).max(0.0);
        let bytes = part.upload + part.rounds.iter().sum::<u64>();
        price.bytes_per_period += bytes;
        price.peak_round_bytes = price.peak_round_bytes.max(bytes);
    }
    price.step_seconds = p.compute_seconds + price.exposed_seconds / s.period.max(1) as f64;
    price
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_updates_cost_a_round_per_period_spread_over_fragments_and_hidden_by_overlap() {
        let shapes = vec![vec![256, 64], vec![64], vec![64, 256], vec![256]];
        let total: u64 = shapes.iter().map(|s| s.iter().product::<usize>() as u64).sum();
        let dense = measure("dense", CompressorConfig::dense(), Route::Allreduce, &shapes);
        let net = NetworkModel::from_bits_per_second(1e8, 1e-4);
        let p = Workload::new(0.05, shapes);
        let sync = step_seconds(&p, &dense, 4, &net);
        let whole = |fragments, delay, overlap| {
            local_step_seconds(
                &p,
                &dense,
                4,
                &net,
                &LocalSetup { period: 16, fragments, delay, overlap },
                0.0,
            )
        };
        let diloco = whole(1, 0, false);
        assert_eq!(diloco.bytes_per_period, 4 * total, "one dense round of the model per period");
        assert!(
            (diloco.step_seconds - (0.05 + (sync - 0.05) / 16.0)).abs() < 1e-9,
            "{diloco:?} against {sync}"
        );
        let streaming = whole(2, 0, false);
        assert_eq!(streaming.bytes_per_period, 4 * total, "the same bytes, in two rounds");
        assert!(streaming.peak_round_bytes < diloco.peak_round_bytes, "{streaming:?}");
        // A round of a few ms hides behind 4 steps of 50 ms when overlapped, not in the trainer.
        let hidden = whole(2, 4, true);
        assert_eq!(hidden.exposed_seconds, 0.0, "{hidden:?}");
        assert_eq!(hidden.step_seconds, 0.05);
        assert!(whole(2, 4, false).step_seconds > 0.05);
    }
}
