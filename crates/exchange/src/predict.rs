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
use gradcomp_compress::lowrank::PowerSgdConfig;
use gradcomp_compress::{Combine, CompressionUnit, CompressorConfig, Message, RngKey, UnitContext, UnitRng};

use crate::config::Topology;
use crate::route::{MessageSize, Route};

/// The least predicted speedup over dense at which a method "pays off":
/// closer than 10%, the α–β model's own error (latency, contention, the
/// host's other work) is as large as the gain. `gradcomp model --dry-run`
/// and `gradcomp.model` answer with this one rule.
pub const PAYS_OFF: f64 = 1.1;

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

/// One method as the model prices it: a compressor on a topology, each
/// unit on its route (the exchange's route table, [`Route::of`]), measured.
pub struct MethodCost {
    pub label: String,
    pub compressor: CompressorConfig,
    pub topology: Topology,
    /// Per worker: bytes uploaded per step in the buckets' collectives
    /// among up to 127 workers (TernGrad's code sums widen beyond:
    /// [`MethodCost::upload_for`]).
    pub upload: u64,
    /// Per worker: bytes of each exchange round, an allreduce each before
    /// the buckets (TernGrad's scaler max, PowerSGD's P and Q sums).
    pub rounds: Vec<u64>,
    /// Seconds to compress one step's gradient.
    pub compress_seconds: f64,
    /// Seconds to decode and aggregate one worker's message.
    pub decode_seconds: f64,
    /// Per tensor: its route, message and measured seconds (the timeline's
    /// buckets add them up).
    pub units: Vec<UnitCost>,
}

impl MethodCost {
    /// Per worker: bytes uploaded per step among `workers`.
    pub fn upload_for(&self, workers: usize) -> u64 {
        self.units.iter().map(|u| u.upload(workers)).sum()
    }
}

/// One tensor: how it travels, its message's size and its measured
/// compress and decode seconds.
#[derive(Clone, Copy)]
pub struct UnitCost {
    pub route: Route,
    pub combine: Combine,
    pub size: MessageSize,
    pub compress_seconds: f64,
    pub decode_seconds: f64,
}

impl UnitCost {
    /// Bytes one worker uploads for it among `workers`.
    pub fn upload(&self, workers: usize) -> u64 {
        self.route.upload_bytes(&self.size, workers)
    }
}

/// Builds the method, measuring its message size and speed (per tensor,
/// medians of 5 repetitions, from the first step it compresses) on an
/// N(0,1) gradient cut into the profile's tensors, each tensor on the route
/// the exchange gives it on `topology` (a tensor the compressor leaves
/// uncompressed, PowerSGD's vectors, is summed as f32). Panics if
/// `topology` cannot carry the compressor (a configuration's check refuses
/// that first: `DataParallelConfig::validate`).
pub fn measure(
    label: &str,
    compressor: CompressorConfig,
    topology: Topology,
    shapes: &[Vec<usize>],
) -> MethodCost {
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
            // The exchange rounds as the sole worker, their bytes counted once.
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
        .map(|u| {
            let combine = comps[u].compressor().combine();
            UnitCost {
                route: Route::of(!compressor.compresses(&shapes[u]), topology, combine)
                    .expect("the topology carries the compressor"),
                combine,
                size: MessageSize::of(&msgs[u]),
                compress_seconds: median(std::mem::take(&mut ctimes[u])),
                decode_seconds: median(std::mem::take(&mut dtimes[u])),
            }
        })
        .collect();
    MethodCost {
        label: label.into(),
        compressor,
        topology,
        upload: costs.iter().map(|c| c.upload(1)).sum(),
        rounds,
        compress_seconds: costs.iter().map(|c| c.compress_seconds).sum(),
        decode_seconds: costs.iter().map(|c| c.decode_seconds).sum(),
        units: costs,
    }
}

pub fn methods(units: &[Vec<usize>], density: f64) -> Vec<MethodCost> {
    let with = |name: &str| {
        let mut c = CompressorConfig::named(name).expect("known name");
        c.set_density(density);
        c
    };
    use Topology::{Allgather, Allreduce, ParameterServer, ReduceScatter};
    vec![
        measure("dense (allreduce)", with("dense"), Allreduce, units),
        measure("dense (parameter server)", with("dense"), ParameterServer, units),
        measure("fp16 (allreduce)", with("fp16"), Allreduce, units),
        measure("terngrad (allreduce)", with("terngrad"), Allreduce, units),
        measure("terngrad (parameter server)", with("terngrad"), ParameterServer, units),
        measure("qsgd (allgather)", with("qsgd"), Allgather, units),
        measure("onebit (allgather)", with("onebit"), Allgather, units),
        measure("fp4 (allgather)", with("fp4"), Allgather, units),
        measure("fp4 (reduce-scatter)", with("fp4"), ReduceScatter, units),
        measure("eightbit (allgather)", with("eightbit"), Allgather, units),
        measure("eightbit (reduce-scatter)", with("eightbit"), ReduceScatter, units),
        measure(&format!("topk ρ={density} (allgather)"), with("topk"), Allgather, units),
        measure(&format!("topk ρ={density} (reduce-scatter)"), with("topk"), ReduceScatter, units),
        measure(&format!("gaussiank ρ={density} (allgather)"), with("gaussiank"), Allgather, units),
        measure(&format!("dgck ρ={density} (allgather)"), with("dgck"), Allgather, units),
        measure("powersgd r=2 (allreduce, 2 rounds)", powersgd_rank(2), Allreduce, units),
    ]
}

/// PowerSGD at `rank`, PyTorch's other defaults (the model prices the steps
/// from `start_iter` on).
pub fn powersgd_rank(rank: u32) -> CompressorConfig {
    PowerSgdConfig::new(rank).into()
}

/// Predicted seconds per step for `m` with `n` workers on `net`.
pub fn step_seconds(p: &Workload, m: &MethodCost, n: usize, net: &NetworkModel) -> f64 {
    let local = p.compute_seconds + m.compress_seconds;
    if n == 1 {
        return local;
    }
    local + rounds_seconds(m, n, net) + wire_seconds(&m.units, n, net) + decode_seconds(&m.units, n)
}

/// The collectives that carry `units` (one bucket's, or a whole step's
/// priced as one bucket) among `n` workers on `net`, as the bucket runs
/// them: one allreduce of the summed values, one allgatherv of the
/// gathered encodings, one round trip to the co-located server, or the
/// reduce-scatter's alltoallv and allgatherv of shards; each only where
/// some unit takes that route.
pub fn wire_seconds(units: &[UnitCost], n: usize, net: &NetworkModel) -> f64 {
    let (mut summed, mut gathered, mut up, mut down, mut shard) = (0, 0, 0, 0, 0.0);
    let (mut sums, mut gathers, mut server, mut scatters) = (false, false, false, false);
    for u in units {
        let bytes = u.upload(n);
        match u.route {
            Route::InRounds => {}
            Route::Gather => (gathered, gathers) = (gathered + bytes, true),
            Route::Scatter => (shard, scatters) = (shard + u.size.scattered(n).0 as f64 / n as f64, true),
            Route::Server => {
                (up, server) = (up + bytes, true);
                down += Route::download_bytes(u.combine, u.size.len, n, bytes);
            }
            _ => (summed, sums) = (summed + bytes, true),
        }
    }
    let mut t = 0.0;
    if sums {
        t += net.allreduce(n, summed);
    }
    if gathers {
        t += net.allgatherv_uniform(n, gathered);
    }
    if server {
        t += net.push_pull(n, ServerPlacement::CoLocated, up, down);
    }
    if scatters {
        let s = shard.round() as u64;
        t += net.alltoallv_uniform(n, s) + net.allgatherv_uniform(n, s);
    }
    t
}

/// Seconds one worker decodes `units`' messages among `n` workers: each
/// unit's measured decode time once per message its route has it decode.
pub fn decode_seconds(units: &[UnitCost], n: usize) -> f64 {
    units.iter().map(|u| u.route.decodes(n) as f64 * u.decode_seconds).sum()
}

/// The exchange rounds' allreduces, one after another before the buckets.
pub fn rounds_seconds(m: &MethodCost, n: usize, net: &NetworkModel) -> f64 {
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
/// tensors' share of `m`'s measured bytes and codec seconds (exchange
/// rounds in proportion to its size), priced on `net` among `n` workers,
/// plus the outer step (`outer_per_value` seconds per parameter); a round
/// hides behind `delay` inner steps of compute when the front overlaps it.
pub fn local_step_seconds(
    p: &Workload,
    m: &MethodCost,
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
        let part = MethodCost {
            label: m.label.clone(),
            compressor: m.compressor.clone(),
            topology: m.topology,
            upload: costs.iter().map(|c| c.upload(1)).sum(),
            rounds: m.rounds.iter().map(|&b| (b as f64 * share).round() as u64).collect(),
            compress_seconds: costs.iter().map(|c| c.compress_seconds).sum(),
            decode_seconds: costs.iter().map(|c| c.decode_seconds).sum(),
            units: costs.to_vec(),
        };
        let round = step_seconds(&no_compute, &part, n, net) + outer_per_value * len as f64;
        let hidden = if s.overlap { s.delay as f64 * p.compute_seconds } else { 0.0 };
        price.round_seconds += round;
        price.exposed_seconds += (round - hidden).max(0.0);
        let bytes = part.upload_for(n) + part.rounds.iter().sum::<u64>();
        price.bytes_per_period += bytes;
        price.peak_round_bytes = price.peak_round_bytes.max(bytes);
    }
    price.step_seconds = p.compute_seconds + price.exposed_seconds / s.period.max(1) as f64;
    price
}

/// A method priced by its bytes alone, without timing its codec (`gradcomp
/// project`, for models too large to compress five times here): each
/// tensor on its route on `topology` ([`Route::of`]), its message measured
/// by compressing an N(0, 10⁻⁶) change once per distinct shape (the
/// encodings here depend on the sizes alone); a tensor the compressor
/// leaves alone, its f32 values. Exchange rounds are not priced: a
/// compressor that has them is refused (`measure` prices it).
pub fn sized(
    label: &str,
    compressor: CompressorConfig,
    topology: Topology,
    shapes: &[Vec<usize>],
) -> MethodCost {
    let mut seen: std::collections::HashMap<&[usize], UnitCost> = Default::default();
    let units: Vec<UnitCost> = shapes
        .iter()
        .map(|shape| {
            *seen.entry(shape).or_insert_with(|| {
                let len: usize = shape.iter().product();
                let (uncompressed, combine, size) = if !compressor.compresses(shape) {
                    let size = MessageSize { summed: len, len, encoded: 4 * len + codec::HEADER_LEN };
                    (true, Combine::DenseSum, size)
                } else {
                    let mut rng = UnitRng::from_parts(&[3, len as u64]);
                    let x: Vec<f32> = (0..len).map(|_| rng.next_gaussian() as f32 * 1e-3).collect();
                    let mut msg = Message::default();
                    let ctx = UnitContext { key: RngKey::new(1, 0, 0, 0), loss: Some(1.0) };
                    let mut c = compressor.build_for(shape);
                    assert_eq!(c.rounds(), 0, "{label}: sized() prices no exchange rounds; measure() does");
                    c.compress(&x, &ctx, &mut msg);
                    (false, c.combine(), MessageSize::of(&msg))
                };
                let route =
                    Route::of(uncompressed, topology, combine).expect("the topology carries the compressor");
                UnitCost { route, combine, size, compress_seconds: 0.0, decode_seconds: 0.0 }
            })
        })
        .collect();
    MethodCost {
        label: label.into(),
        compressor,
        topology,
        upload: units.iter().map(|c| c.upload(1)).sum(),
        rounds: Vec::new(),
        compress_seconds: 0.0,
        decode_seconds: 0.0,
        units,
    }
}

/// Bytes one worker receives on its link per step of `m` among `n`
/// workers: each unit's route's ([`Route::received_bytes`]) and the
/// exchange rounds' allreduces (a ring's 2(N − 1)/N of each).
pub fn received_bytes(m: &MethodCost, n: usize) -> u64 {
    if n <= 1 {
        return 0;
    }
    let rounds: u64 = m.rounds.iter().map(|&b| 2 * (n as u64 - 1) * b / n as u64).sum();
    rounds + m.units.iter().map(|u| u.route.received_bytes(&u.size, u.combine, n)).sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_updates_cost_a_round_per_period_spread_over_fragments_and_hidden_by_overlap() {
        let shapes = vec![vec![256, 64], vec![64], vec![64, 256], vec![256]];
        let total: u64 = shapes.iter().map(|s| s.iter().product::<usize>() as u64).sum();
        let dense = measure("dense", CompressorConfig::dense(), Topology::Allreduce, &shapes);
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

    /// A method priced by its bytes receives what its routes move: the
    /// ring's 2(N − 1)/N of the dense buffer, the allgather's N − 1
    /// messages, and the reduce-scatter's shards, as `scatter_bytes` counts
    /// them at each shard's measured encoding (for fp4 at N = 8 under 0.3×
    /// the allgather's, and flat in N where the allgather's grows).
    #[test]
    fn a_sized_method_receives_what_each_route_moves() {
        let shapes = vec![vec![256, 64], vec![64], vec![1024, 256]];
        let lens: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
        let total: usize = lens.iter().sum();
        let net = NetworkModel::from_bits_per_second(1e8, 1e-4);
        let fp4 = CompressorConfig::named("fp4").unwrap();
        let dense = sized("dense", CompressorConfig::dense(), Topology::Allreduce, &shapes);
        assert_eq!(received_bytes(&dense, 8), 2 * 7 * 4 * total as u64 / 8);
        let ag = sized("ag", fp4.clone(), Topology::Allgather, &shapes);
        let message: u64 = ag.units.iter().map(|u| u.size.encoded as u64).sum();
        assert_eq!(received_bytes(&ag, 8), 7 * message);
        let rs = sized("rs", fp4.clone(), Topology::ReduceScatter, &shapes);
        let rs8 = received_bytes(&rs, 8);
        // Against each shard compressed at its own length.
        let encode = |l: usize| {
            let m = sized("shard", fp4.clone(), Topology::Allgather, &[vec![l]]);
            m.units[0].size.encoded as u64
        };
        let (_, exact) = crate::route::scatter_bytes(&lens, 8, 0, encode);
        assert!((rs8 as f64 - exact as f64).abs() <= 0.002 * exact as f64, "{rs8} against {exact}");
        assert!((rs8 as f64) < 0.3 * (7 * message) as f64, "{rs8} against {}", 7 * message);
        assert!(wire_seconds(&rs.units, 8, &net) < wire_seconds(&ag.units, 8, &net));
        let rs64 = received_bytes(&rs, 64);
        assert!((rs64 as f64) < 1.2 * rs8 as f64, "{rs64} against {rs8}");
        // The measured method and the sized one agree on bytes.
        let measured = measure("fp4", fp4, Topology::ReduceScatter, &shapes);
        assert_eq!(received_bytes(&measured, 8), rs8);
    }
}
