//! Compressed gradient exchange (ARCHITECTURE.md, "One synchronous step"):
//! the unit machinery of [`Synchronous`](super::Synchronous), also used by
//! CELGC to send compressed model changes.
//!
//! The model's flat gradient is cut into compression units (each tensor at
//! `layer` granularity, the whole buffer at `global`). Excluded units travel
//! dense. Units are grouped into buckets of about `compression.bucket_mb`
//! MiB, cut from the last layer backwards as PyTorch DDP cuts them; each
//! bucket makes at most one call of each collective:
//!
//! | messages | allreduce topology | allgather topology | parameter server |
//! |---|---|---|---|
//! | dense, fp16, excluded units, Rand-k `same_seed` values | allreduce f32 | allreduce f32 | upload |
//! | TernGrad with a shared scaler | max-reduce of scalers, allreduce i32 of codes | max-reduce, allgatherv | max-reduce, upload; integer sum in ⌈log2(2N+1)⌉ bits down |
//! | per-worker messages (sparse, QSGD, 1-bit, unshared TernGrad) | (rejected by config) | allgatherv | upload |
//!
//! TernGrad's scalers are max-reduced once per step, for all units, before
//! any bucket is compressed. With `compression.pipeline` a communication
//! thread moves bucket i while this thread compresses bucket i+1 and then
//! decodes bucket i−1 ([`pipeline`]).
//!
//! **Buckets never change a result.** A bucket holds whole units, and every
//! compressor, memory and random stream is per unit, so each unit's message
//! is the same bytes however the units are bucketed; the server aggregates
//! and the decoders add per unit. The averaged gradient is bitwise the
//! unbucketed one wherever the collective adds each element's N values in
//! an order that does not depend on the element's position or the call's
//! length: the threads backend, and MPI's recursive doubling. Open MPI's
//! ring allreduce starts each segment's sum at a different rank, so under
//! it buckets can change the last bit of a dense sum (every worker still
//! gets the same value). At `global` granularity the single unit is a
//! single bucket: cutting it would change what Top-k selects.
//!
//! Every worker adds the same numbers in the same order, so the averaged
//! gradient is bitwise identical everywhere. The result is in gradient units
//! whatever the residual form: units whose error feedback holds lr-scaled
//! residuals (`acc = e + η·g`, ALGORITHMS.md §6.1) are divided by η after
//! aggregation, so any optimizer applies the whole buffer at η.

use std::ops::Range;
use std::time::Instant;

use gradcomp_comm::{Collective, ServerPlacement};
use gradcomp_compress::memory::{Memory, MemoryKind, NoMemory, ResidualForm};
use gradcomp_compress::stats;
use gradcomp_compress::{Compressor, CompressorConfig, Message, RngKey, UnitContext};
use serde::{Deserialize, Serialize};

use super::{GradStages, StateBuffers, StrategyError, Whole};
use crate::config::{CompressionConfig, Granularity, Topology};
use crate::layout::GradientLayout;

#[cfg(feature = "device-kernels")]
mod device;
mod pipeline;
mod wire;

use pipeline::Lanes;
use wire::{Payload, Route, ServerState};

/// One compression unit: a range of the flat gradient.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    pub id: u32,
    pub name: String,
    pub offset: usize,
    pub len: usize,
    /// Sent uncompressed (excluded by policy).
    pub dense: bool,
}

/// What one exchange did, for the step record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExchangeStats {
    /// Encoded bytes of this worker's compressed messages.
    pub wire_bytes: u64,
    /// Elements this worker sent a value for.
    pub selected: u64,
    /// Elements in all units.
    pub elements: u64,
    /// Seconds in each stage, summed over buckets; when the buckets were
    /// pipelined the stages overlapped and [`ExchangeStats::wall_seconds`]
    /// is less than their sum.
    pub compress_seconds: f64,
    pub communicate_seconds: f64,
    pub decode_seconds: f64,
    /// Wall-clock seconds of the whole exchange.
    pub wall_seconds: f64,
    /// Seconds of each stage of a staged backward pass computed inside the
    /// exchange, in order (empty for a whole gradient).
    pub backward: Vec<f64>,
    /// ‖residual‖₂ over all units with a memory.
    pub residual_norm: f64,
    /// Σ‖acc − C(acc)‖² / Σ‖acc‖² over compressed units (when measured).
    pub contraction: Option<f64>,
    /// TernGrad's ‖g‖∞‖g‖₁/‖g‖² per compressed unit (when measured).
    pub bound_ratios: Vec<f64>,
    /// The exchange's collectives in call order, for the network model.
    pub calls: Vec<WireCall>,
    /// Per bucket, in exchange order: this worker's stage times.
    pub buckets: Vec<BucketTimes>,
    /// Whether the buckets went through the communication thread.
    pub pipelined: bool,
    /// Compressor-specific figures of the last step (eSGD's replacements and
    /// importance scores), from the first unit that reports any.
    pub extra: Vec<(&'static str, f64)>,
}

/// The collectives an exchange calls, as the network model prices them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireKind {
    AllreduceSumF32,
    AllreduceSumI32,
    AllreduceMaxF32,
    Allgatherv,
    PushPull,
}

/// One collective call of an exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireCall {
    /// The bucket it moved (exchange order); `None` for the scaler round
    /// that precedes the buckets.
    pub bucket: Option<u32>,
    pub kind: WireKind,
    /// Bytes per rank: one entry for an allreduce; every rank's message
    /// for an allgatherv; every upload for the parameter server (known on
    /// the server only; empty elsewhere).
    pub sizes: Vec<u64>,
    /// The parameter server's download, in bytes.
    pub download: u64,
}

impl WireCall {
    /// The max-reduce of `values` two-phase compressors' scalars (TernGrad's
    /// shared scaler), before the buckets that need them.
    pub(super) fn scalar_round(values: usize) -> Self {
        WireCall {
            bucket: None,
            kind: WireKind::AllreduceMaxF32,
            sizes: vec![4 * values as u64],
            download: 0,
        }
    }
}

/// One bucket's stage times on this worker, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BucketTimes {
    /// Compressing its units and packing their messages.
    pub compress: f64,
    /// Inside its collectives (on the communication thread when pipelined).
    pub wire: f64,
    /// Decoding, aggregating, and the memories' update.
    pub decode: f64,
    /// The stages of a staged backward pass computed before the bucket
    /// was complete (0 for a whole gradient).
    #[serde(default)]
    pub ready_after: u32,
}

/// What does not change from step to step: the units, how each travels,
/// and the buckets.
struct Plan {
    units: Vec<Unit>,
    /// Units sent as they are (excluded, or the dense compressor): no
    /// memory, no message unless the topology needs an encoding.
    raw: Vec<bool>,
    /// Units whose memory is not the identity; their compensated gradient is
    /// the memory's buffer (`Memory::residual` between compensate and update).
    has_memory: Vec<bool>,
    /// Units whose error feedback holds lr-scaled residuals: their aggregate
    /// is divided by the learning rate to come back to gradient units.
    lr_scaled: Vec<bool>,
    route: Vec<Route>,
    topology: Topology,
    placement: ServerPlacement,
    /// Runs of consecutive units, in the order they are exchanged.
    buckets: Vec<Range<usize>>,
}

/// Cuts units of `unit_lens` values into runs of at least `bucket_bytes` bytes of f32 values
/// (the first run holds whatever is left), from the last unit backwards:
/// backpropagation finishes the output layers first, so DDP sends them
/// first. Units are never split. Returned in exchange order.
pub fn cut_buckets(unit_lens: &[usize], bucket_bytes: u64) -> Vec<Range<usize>> {
    let mut buckets = Vec::new();
    let (mut end, mut bytes) = (unit_lens.len(), 0u64);
    for u in (0..unit_lens.len()).rev() {
        bytes += 4 * unit_lens[u] as u64;
        if bytes >= bucket_bytes && u > 0 {
            buckets.push(u..end);
            (end, bytes) = (u, 0);
        }
    }
    if end > 0 || buckets.is_empty() {
        buckets.push(0..end);
    }
    buckets
}

/// `compression.bucket_mb` in bytes.
pub fn bucket_bytes(bucket_mb: f64) -> u64 {
    (bucket_mb * (1u64 << 20) as f64) as u64
}

/// The per-unit state this worker's thread works on: compressors, memories
/// and the messages they made.
struct Front {
    compressors: Vec<Box<dyn Compressor>>,
    memories: Vec<Box<dyn Memory>>,
    msgs: Vec<Message>,
    scalars: Vec<f32>,
    /// Position of each unit's scalar in `scalars`, for two-phase compressors.
    scalar_of: Vec<Option<usize>>,
    scratch: Vec<f32>,
    /// Per unit, on a measured step: ‖acc − C(acc)‖², ‖acc‖², TernGrad's
    /// bound ratio (summed in unit order afterwards, whatever the bucket order).
    measured: Vec<Option<[f64; 3]>>,
}

/// Per-worker state of the synchronous exchange.
pub struct GradientExchange {
    plan: Plan,
    front: Front,
    seed: u64,
    /// Move the buckets through a communication thread.
    pipeline: bool,
    /// One reused set of buffers per bucket.
    payloads: Vec<Payload>,
    server: ServerState,
    /// What the compressors and memories were built from, for their device form.
    spec: FrontSpec,
    /// The compressors and memories on the device, once
    /// [`GradientExchange::to_device`] moved them there.
    #[cfg(feature = "device-kernels")]
    device: Option<device::DeviceFront>,
}

/// The configuration of the units' compressors and memories.
#[cfg_attr(not(feature = "device-kernels"), allow(dead_code))]
struct FrontSpec {
    compressor: CompressorConfig,
    memory: MemoryKind,
    residual: ResidualForm,
    momentum: f32,
    /// The density last set (warm-up), which a device form starts from.
    density: Option<f64>,
}

/// What every bucket of one step needs to know.
struct StepArgs {
    loss: Option<f64>,
    key: RngKey,
    lr: f32,
    measure: bool,
    inv_n: f32,
}

impl GradientExchange {
    /// Units from the layout; `exclude.last_layer` keeps the layout's output
    /// layer ([`GradientLayout::output_layer_start`]) dense.
    pub fn new(
        layout: &GradientLayout,
        compressor: &CompressorConfig,
        c: &CompressionConfig,
        topology: Topology,
        placement: ServerPlacement,
        seed: u64,
    ) -> Self {
        let output_start = layout.output_layer_start();
        let units: Vec<Unit> = match c.granularity {
            Granularity::Global => {
                vec![Unit { id: 0, name: "global".into(), offset: 0, len: layout.total(), dense: false }]
            }
            Granularity::Layer => layout
                .slots()
                .iter()
                .enumerate()
                .map(|(i, s)| Unit {
                    id: i as u32,
                    name: s.name.clone(),
                    offset: s.offset,
                    len: s.len,
                    dense: s.len < c.exclude.min_size
                        || (c.exclude.last_layer && i >= output_start)
                        || (c.exclude.biases && s.shape.len() <= 1),
                })
                .collect(),
        };
        let compressors = units.iter().map(|_| compressor.build()).collect();
        let memory = compressor.resolve_memory(c.memory);
        let combine = compressor.build().combine();
        let identity = matches!(compressor, CompressorConfig::Dense {});
        let raw: Vec<bool> = units.iter().map(|u| u.dense || identity).collect();
        let has_memory: Vec<bool> = raw.iter().map(|&r| !r && memory != MemoryKind::None).collect();
        let memories = has_memory
            .iter()
            .map(|&m| if m { memory.build(c.residual, c.dgc_momentum) } else { Box::new(NoMemory) })
            .collect();
        let lr_scaled = has_memory
            .iter()
            .map(|&m| m && memory == MemoryKind::ErrorFeedback && c.residual == ResidualForm::LrScaled)
            .collect();
        let route = units.iter().map(|u| Route::of(u, topology, combine)).collect();
        let lens: Vec<usize> = units.iter().map(|u| u.len).collect();
        let buckets = cut_buckets(&lens, bucket_bytes(c.bucket_mb));
        let front = Front {
            compressors,
            memories,
            msgs: units.iter().map(|_| Message::default()).collect(),
            scalars: Vec::new(),
            scalar_of: Vec::new(),
            scratch: Vec::new(),
            measured: Vec::new(),
        };
        Self {
            payloads: buckets.iter().map(|_| Payload::default()).collect(),
            plan: Plan { units, raw, has_memory, lr_scaled, route, topology, placement, buckets },
            front,
            seed,
            pipeline: c.pipeline,
            server: ServerState::default(),
            spec: FrontSpec {
                compressor: compressor.clone(),
                memory,
                residual: c.residual,
                momentum: c.dgc_momentum,
                density: None,
            },
            #[cfg(feature = "device-kernels")]
            device: None,
        }
    }

    pub fn units(&self) -> &[Unit] {
        &self.plan.units
    }

    /// The buckets' unit ranges, in the order they are exchanged.
    pub fn buckets(&self) -> &[Range<usize>] {
        &self.plan.buckets
    }

    pub fn set_density(&mut self, rho: f64) {
        self.front.compressors.iter_mut().for_each(|c| c.set_density(rho));
        self.spec.density = Some(rho);
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &mut self.device {
            d.set_density(rho);
        }
    }

    /// The memories' state as named buffers (`{prefix}memory.{unit}.{i}`),
    /// read from the device when they live there (an unreadable device
    /// buffer is a panic: the device is gone).
    pub fn state(&self, prefix: &str, out: &mut StateBuffers) {
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &self.device {
            for (u, bufs) in
                d.state().expect("reading the device memories for a checkpoint").into_iter().enumerate()
            {
                for (i, b) in bufs.into_iter().enumerate() {
                    out.insert(format!("{prefix}memory.{u}.{i}"), b);
                }
            }
            return;
        }
        for (u, mem) in self.front.memories.iter().enumerate() {
            for (i, b) in mem.state().into_iter().enumerate() {
                out.insert(format!("{prefix}memory.{u}.{i}"), b.to_vec());
            }
        }
    }

    /// Restores [`GradientExchange::state`]; every buffer must be present and
    /// empty (a memory that has not run yet) or exactly its unit's length.
    pub fn restore(&mut self, prefix: &str, state: &StateBuffers) -> Result<(), String> {
        for (u, mem) in self.front.memories.iter_mut().enumerate() {
            let unit = &self.plan.units[u];
            let mut bufs = Vec::new();
            for i in 0..mem.state().len() {
                let name = format!("{prefix}memory.{u}.{i}");
                let b = state
                    .get(&name)
                    .ok_or_else(|| format!("the memory of unit {} ({name}) is missing", unit.name))?;
                if !b.is_empty() && b.len() != unit.len {
                    return Err(format!(
                        "the memory of unit {} ({name}) holds {} values, the unit has {}",
                        unit.name,
                        b.len(),
                        unit.len
                    ));
                }
                bufs.push(b.clone());
            }
            mem.restore(&bufs)?;
        }
        // A device form takes the restored state from the host memories.
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &mut self.device {
            d.load_memories(&self.front.memories).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// ‖residual‖₂ over all units with a memory.
    pub fn residual_norm(&self) -> f64 {
        self.front
            .memories
            .iter()
            .map(|m| gradcomp_compress::reduce::sum_of_squares(m.residual()))
            .sum::<f64>()
            .sqrt()
    }

    /// Averages `grad` (this worker's flat gradient, at training loss `loss`
    /// if known) over all workers into `out`, in gradient units.
    /// `lr` is the step's learning rate (lr-scaled error feedback); `measure`
    /// asks for the contraction ratio and bound ratios this step.
    #[allow(clippy::too_many_arguments)]
    pub fn exchange(
        &mut self,
        grad: &[f32],
        loss: Option<f64>,
        out: &mut [f32],
        step: u64,
        lr: f32,
        measure: bool,
        c: &mut dyn Collective,
    ) -> Result<ExchangeStats, StrategyError> {
        self.exchange_staged(&mut Whole(grad), loss, out, step, lr, measure, c)
    }

    /// [`exchange`](Self::exchange) for a gradient that arrives in stages
    /// (a staged backward pass): each bucket is compressed and sent as soon
    /// as its units are complete, while the next stage is computed. The
    /// messages and the result are bitwise those of `exchange` on the whole
    /// gradient; only the scalar rounds are split, one per group of buckets
    /// that become ready together.
    #[allow(clippy::too_many_arguments)]
    pub fn exchange_staged(
        &mut self,
        stages: &mut dyn GradStages,
        loss: Option<f64>,
        out: &mut [f32],
        step: u64,
        lr: f32,
        measure: bool,
        c: &mut dyn Collective,
    ) -> Result<ExchangeStats, StrategyError> {
        let wall = Instant::now();
        let total = self.plan.units.last().map_or(0, |u| u.offset + u.len);
        if stages.grad().len() != total || out.len() != total {
            return Err(StrategyError::Usage(format!(
                "the gradient has {} values and the output {}, the exchange's units {total}",
                stages.grad().len(),
                out.len()
            )));
        }
        let mut st = ExchangeStats { elements: total as u64, ..Default::default() };
        // Per group of buckets as they become ready: memories fold in the
        // gradient, two-phase compressors agree on their scalars (TernGrad's
        // shared scaler); per bucket: compress, move, decode and aggregate
        // into `out`, update the memories.
        out.fill(0.0);
        self.front.scalars.clear();
        self.front.scalar_of.clear();
        self.front.scalar_of.resize(self.plan.units.len(), None);
        self.front.measured.clear();
        self.front.measured.resize(self.plan.units.len(), None);
        let args = StepArgs {
            loss,
            key: RngKey::new(self.seed, c.rank() as u32, step, 0),
            lr,
            measure,
            inv_n: 1.0 / c.world_size() as f32,
        };
        st.pipelined = self.pipeline && self.plan.buckets.len() > 1;
        st.buckets = vec![BucketTimes::default(); self.plan.buckets.len()];
        let lanes =
            Lanes { plan: &self.plan, front: &mut self.front, payloads: &mut self.payloads, in_flight: 0 };
        if st.pipelined {
            pipeline::run_pipelined(lanes, stages, &mut self.server, &args, out, c, &mut st)?;
        } else {
            pipeline::run_sequential(lanes, stages, &mut self.server, &args, out, c, &mut st)?;
        }
        self.finish_stats(measure, &mut st);
        st.compress_seconds += st.buckets.iter().map(|b| b.compress).sum::<f64>();
        st.communicate_seconds += st.buckets.iter().map(|b| b.wire).sum::<f64>();
        st.decode_seconds = st.buckets.iter().map(|b| b.decode).sum();
        st.wall_seconds = wall.elapsed().as_secs_f64();
        Ok(st)
    }

    /// The step's statistics that are per unit, in unit order: compressor
    /// figures, contraction, bound ratios, residual norm.
    fn finish_stats(&self, measure: bool, st: &mut ExchangeStats) {
        if let Some(extra) = self.front.compressors.iter().map(|c| c.stats()).find(|s| !s.is_empty()) {
            st.extra = extra;
        }
        if measure {
            self.front.fold_measured(st);
        }
        st.residual_norm = self.residual_norm();
    }
}

impl Front {
    /// Compresses bucket `b`'s units into their messages (`args.key` with the
    /// unit's id seeds its randomness) and counts what is sent.
    fn compress_bucket(
        &mut self,
        plan: &Plan,
        b: usize,
        grad: &[f32],
        args: &StepArgs,
        st: &mut ExchangeStats,
    ) {
        for u in plan.buckets[b].clone() {
            let x = unit_input(plan, &self.memories, grad, u);
            if plan.raw[u] {
                if plan.topology == Topology::ParameterServer {
                    let m = self.msgs[u].dense_mut();
                    m.values.clear();
                    m.values.extend_from_slice(x);
                }
                continue;
            }
            let ctx = UnitContext {
                key: RngKey { unit: plan.units[u].id, ..args.key },
                shared_scalar: self.scalar_of[u].map(|i| self.scalars[i]),
                loss: args.loss,
            };
            self.compressors[u].compress(x, &ctx, &mut self.msgs[u]);
            self.measured[u] = account(&self.msgs[u], args.measure.then_some(x), &mut self.scratch, st);
        }
    }

    /// A measured step's contraction ratio Σ‖acc − C(acc)‖² / Σ‖acc‖² (0 for
    /// a zero gradient) and TernGrad's bound ratios, from the per-unit
    /// figures, in unit order.
    fn fold_measured(&self, st: &mut ExchangeStats) {
        let (mut err, mut norm) = (0.0, 0.0);
        for [e, n, bound] in self.measured.iter().flatten() {
            err += e;
            norm += n;
            st.bound_ratios.push(*bound);
        }
        st.contraction = Some(if norm > 0.0 { err / norm } else { 0.0 });
    }

    /// Bucket `b`'s memories keep what was not sent; its lr-scaled units
    /// return to gradient units.
    fn settle_bucket(&mut self, plan: &Plan, b: usize, out: &mut [f32], lr: f32) {
        for u in plan.buckets[b].clone() {
            if plan.has_memory[u] {
                self.memories[u].update(&self.msgs[u]);
            }
            plan.to_gradient_units(u, out, lr);
        }
    }

    /// Units `units`' memories fold in their gradient (the compensated
    /// gradient stays in the memory), and their two-phase compressors'
    /// local scalars join `scalars`.
    fn prepare(&mut self, plan: &Plan, units: Range<usize>, grad: &[f32], lr: f32) {
        for u in units {
            let unit = &plan.units[u];
            if plan.has_memory[u] {
                self.memories[u].compensate(&grad[unit.offset..unit.offset + unit.len], lr);
            }
            if !plan.raw[u] {
                let x = unit_input(plan, &self.memories, grad, u);
                if let Some(s) = self.compressors[u].local_scalar(x) {
                    self.scalar_of[u] = Some(self.scalars.len());
                    self.scalars.push(s);
                }
            }
        }
    }
}

impl Plan {
    /// Adds the values of `ranges` (flat gradient ranges a stage filled) to
    /// the units' counts of filled values.
    fn count_filled(&self, ranges: &[Range<usize>], filled: &mut [usize]) {
        for r in ranges {
            // Units are sorted by offset: start at the one holding r.start.
            let first = self.units.partition_point(|u| u.offset + u.len <= r.start);
            for (u, unit) in self.units.iter().enumerate().skip(first) {
                if unit.offset >= r.end {
                    break;
                }
                filled[u] += r.end.min(unit.offset + unit.len) - r.start.max(unit.offset);
            }
        }
    }

    /// Divides unit `u`'s aggregate by `lr` if its residuals are lr-scaled.
    fn to_gradient_units(&self, u: usize, out: &mut [f32], lr: f32) {
        if self.lr_scaled[u] {
            let unit = &self.units[u];
            let inv = 1.0 / lr;
            out[unit.offset..unit.offset + unit.len].iter_mut().for_each(|o| *o *= inv);
        }
    }
}

/// Counts a compressed unit's message into the step's statistics; `measured`
/// is the compressed vector on a measured step, whose ‖acc − C(acc)‖²,
/// ‖acc‖² and TernGrad bound ratio are returned.
fn account(
    msg: &Message,
    measured: Option<&[f32]>,
    scratch: &mut Vec<f32>,
    st: &mut ExchangeStats,
) -> Option<[f64; 3]> {
    st.selected += msg.selected() as u64;
    st.wire_bytes += gradcomp_compress::codec::encoded_len(msg) as u64;
    measured.map(|x| {
        let norm = gradcomp_compress::reduce::sum_of_squares(x);
        [norm * stats::contraction_ratio(x, msg, scratch), norm, stats::terngrad_bound_ratio(x)]
    })
}

/// The buffer unit `u` compresses: its memory's compensated gradient, or its
/// slice of the gradient. (The memories rather than the front, so the
/// compressors and messages can be borrowed mutably beside it.)
fn unit_input<'a>(plan: &Plan, memories: &'a [Box<dyn Memory>], grad: &'a [f32], u: usize) -> &'a [f32] {
    if plan.has_memory[u] {
        memories[u].residual()
    } else {
        let unit = &plan.units[u];
        &grad[unit.offset..unit.offset + unit.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradcomp_comm::InProcessGroup;
    use gradcomp_compress::codec;

    #[test]
    fn buckets_are_cut_from_the_last_unit_and_never_split_one() {
        let u = [10, 20, 30, 40];
        // 4-byte values: 160, 120, 80, 40 bytes from the back.
        assert_eq!(cut_buckets(&u, 1 << 30), vec![0..4]);
        assert_eq!(cut_buckets(&u, 100), vec![3..4, 2..3, 0..2]);
        assert_eq!(cut_buckets(&u, 1), vec![3..4, 2..3, 1..2, 0..1]);
        assert_eq!(cut_buckets(&u, 280), vec![2..4, 0..2]);
        // The first unit always stays with the last bucket, even when small.
        assert_eq!(cut_buckets(&[1, 1000], 100), vec![1..2, 0..1]);
        assert_eq!(cut_buckets(&[1000], 1), vec![0..1]);
        assert_eq!(cut_buckets(&[], 1), vec![0..0]);
    }

    /// Five tensors of 1200, 40, 800, 20 and 200 values: at 0.0002 MiB
    /// (52 values) three buckets.
    fn layout() -> GradientLayout {
        GradientLayout::new([
            ("a.weight".to_string(), vec![40, 30]),
            ("a.bias".to_string(), vec![40]),
            ("b.weight".to_string(), vec![20, 40]),
            ("b.bias".to_string(), vec![20]),
            ("c.weight".to_string(), vec![10, 20]),
        ])
    }

    /// Runs `f` on three in-process workers, one thread each; results in rank order.
    fn on_workers<T: Send>(f: impl Fn(gradcomp_comm::InProcessCollective) -> T + Sync) -> Vec<T> {
        let group = InProcessGroup::new(3).timeout(std::time::Duration::from_secs(20)).build().unwrap();
        std::thread::scope(|s| {
            let workers: Vec<_> = group.into_iter().map(|c| s.spawn(|| f(c))).collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        })
    }

    /// An exchange of Top-k ρ = 0.1 over allgather in the test layout's three buckets, pipelined.
    fn pipelined_topk(layout: &GradientLayout) -> GradientExchange {
        let cfg = CompressionConfig { bucket_mb: 0.0002, pipeline: true, ..Default::default() };
        let compressor = CompressorConfig::topk(0.1);
        GradientExchange::new(layout, &compressor, &cfg, Topology::Allgather, ServerPlacement::CoLocated, 7)
    }

    /// What one worker saw over a few steps: per step the averaged gradient's
    /// bits and every unit's encoded message, then its memories' state.
    type Trace = (Vec<(Vec<u32>, Vec<u8>, u64)>, StateBuffers);

    /// A gradient revealed `chunk` values at a time from the end, as a
    /// staged backward pass yields it (chunks straddle units and buckets).
    struct Revealed {
        full: Vec<f32>,
        grad: Vec<f32>,
        end: usize,
        chunk: usize,
    }

    impl GradStages for Revealed {
        fn grad(&self) -> &[f32] {
            &self.grad
        }
        fn next_stage(&mut self, filled: &mut Vec<Range<usize>>) -> Result<bool, StrategyError> {
            if self.end == 0 {
                return Ok(false);
            }
            let start = self.end.saturating_sub(self.chunk);
            self.grad[start..self.end].copy_from_slice(&self.full[start..self.end]);
            filled.push(start..self.end);
            self.end = start;
            Ok(true)
        }
    }

    /// Three workers exchange four steps of made-up gradients; with
    /// `staged`, the gradient arrives that many values at a time.
    fn trace(
        compressor: &CompressorConfig,
        topology: Topology,
        bucket_mb: f64,
        pipeline: bool,
        staged: Option<usize>,
    ) -> Vec<Trace> {
        let layout = layout();
        let cfg = CompressionConfig { bucket_mb, pipeline, ..Default::default() };
        on_workers(|mut c| {
            let mut x =
                GradientExchange::new(&layout, compressor, &cfg, topology, ServerPlacement::CoLocated, 7);
            if bucket_mb < 1.0 {
                assert_eq!(x.buckets(), &[4..5, 2..4, 0..2]);
            }
            let rank = c.rank();
            let mut steps = Vec::new();
            for step in 0..4u64 {
                let grad: Vec<f32> = (0..layout.total())
                    .map(|i| {
                        let h = (i as u64 * 2654435761 + step * 97 + rank as u64 * 13) % 1000;
                        (h as f32 - 500.0) / 250.0
                    })
                    .collect();
                let mut out = vec![f32::NAN; grad.len()];
                let st = match staged {
                    None => x.exchange(&grad, Some(1.5), &mut out, step, 0.1, step == 3, &mut c),
                    Some(chunk) => {
                        let (end, zeros) = (grad.len(), vec![0.0; grad.len()]);
                        let mut stages = Revealed { full: grad.clone(), grad: zeros, end, chunk };
                        x.exchange_staged(&mut stages, Some(1.5), &mut out, step, 0.1, step == 3, &mut c)
                    }
                }
                .unwrap();
                assert_eq!(st.pipelined, pipeline && x.buckets().len() > 1);
                assert_eq!(st.buckets.len(), x.buckets().len());
                let mut wire = Vec::new();
                for (u, unit) in x.units().iter().enumerate() {
                    codec::encode(&x.front.msgs[u], unit.id, &mut wire);
                }
                steps.push((out.iter().map(|v| v.to_bits()).collect(), wire, st.wire_bytes));
            }
            let mut state = StateBuffers::new();
            x.state("", &mut state);
            (steps, state)
        })
    }

    #[test]
    fn buckets_pipelining_and_stages_leave_every_message_and_result_bit_identical() {
        for name in CompressorConfig::NAMES {
            let compressor = CompressorConfig::named(name).unwrap();
            let gathers = compressor.build().combine() == gradcomp_compress::Combine::Gather;
            let topologies: &[Topology] = if gathers {
                &[Topology::Allgather, Topology::ParameterServer]
            } else {
                &[Topology::Allreduce, Topology::Allgather, Topology::ParameterServer]
            };
            for &topology in topologies {
                let whole = trace(&compressor, topology, 25.0, true, None);
                for pipeline in [false, true] {
                    // Whole, and in stages that straddle units (300 values)
                    // or hold several buckets (2000 of 2260).
                    for staged in [None, Some(300), Some(2000)] {
                        let bucketed = trace(&compressor, topology, 0.0002, pipeline, staged);
                        assert!(
                            whole == bucketed,
                            "{name} over {topology:?}: buckets (pipeline {pipeline}, stages {staged:?}) \
                             changed a message or result"
                        );
                    }
                }
                // Replicas agree, and the result is a real average (not left unwritten).
                assert!(whole.iter().all(|w| w.0.iter().zip(&whole[0].0).all(|(a, b)| a.0 == b.0)));
                assert!(whole[0].0.iter().all(|s| s.0.iter().all(|&b| f32::from_bits(b).is_finite())));
            }
        }
    }

    #[test]
    fn a_peer_that_leaves_mid_pipeline_is_an_error_on_every_other_worker_not_a_hang() {
        let layout = layout();
        let start = std::time::Instant::now();
        let results = on_workers(|mut c| {
            let mut x = pipelined_topk(&layout);
            let grad = vec![1.0f32; layout.total()];
            let mut out = vec![0.0; grad.len()];
            for step in 0..3u64 {
                // Worker 2 leaves after the first step (its collective is dropped).
                if c.rank() == 2 && step == 1 {
                    return None;
                }
                if let Err(e) = x.exchange(&grad, None, &mut out, step, 0.1, false, &mut c) {
                    return Some(e.to_string());
                }
            }
            Some("no error".into())
        });
        assert!(start.elapsed() < std::time::Duration::from_secs(15), "took {:?}", start.elapsed());
        for (rank, r) in results.iter().take(2).enumerate() {
            let e = r.as_deref().unwrap();
            assert!(e.contains("worker 2"), "rank {rank}: {e}");
        }
    }

    /// A worker whose allgatherv contributions arrive cut short (a corrupt
    /// message on the wire).
    struct Truncating(gradcomp_comm::InProcessCollective);

    impl Collective for Truncating {
        fn rank(&self) -> usize {
            self.0.rank()
        }
        fn world_size(&self) -> usize {
            self.0.world_size()
        }
        fn allreduce_sum_f32(&mut self, buf: &mut [f32]) -> Result<(), gradcomp_comm::CommError> {
            self.0.allreduce_sum_f32(buf)
        }
        fn allreduce_sum_i32(&mut self, buf: &mut [i32]) -> Result<(), gradcomp_comm::CommError> {
            self.0.allreduce_sum_i32(buf)
        }
        fn allreduce_max_f32(&mut self, buf: &mut [f32]) -> Result<(), gradcomp_comm::CommError> {
            self.0.allreduce_max_f32(buf)
        }
        fn allgatherv(
            &mut self,
            send: &[u8],
            recv: &mut gradcomp_comm::Gathered,
        ) -> Result<(), gradcomp_comm::CommError> {
            self.0.allgatherv(&send[..send.len() / 2], recv)
        }
        fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), gradcomp_comm::CommError> {
            self.0.broadcast(buf, root)
        }
        fn barrier(&mut self) -> Result<(), gradcomp_comm::CommError> {
            self.0.barrier()
        }
        fn push_pull(
            &mut self,
            placement: ServerPlacement,
            upload: &[u8],
            aggregate: &mut gradcomp_comm::Aggregate<'_>,
            download: &mut Vec<u8>,
        ) -> Result<(), gradcomp_comm::CommError> {
            self.0.push_pull(placement, upload, aggregate, download)
        }
        fn meter(&self) -> &gradcomp_comm::ByteMeter {
            self.0.meter()
        }
        fn meter_mut(&mut self) -> &mut gradcomp_comm::ByteMeter {
            self.0.meter_mut()
        }
    }

    #[test]
    fn a_corrupt_message_in_a_pipelined_bucket_names_its_sender_on_every_worker() {
        let layout = layout();
        let errors = on_workers(|c| {
            let mut x = pipelined_topk(&layout);
            let grad = vec![1.0f32; layout.total()];
            let mut out = vec![0.0; grad.len()];
            let result = if c.rank() == 1 {
                x.exchange(&grad, None, &mut out, 0, 0.1, false, &mut Truncating(c))
            } else {
                let mut c = c;
                x.exchange(&grad, None, &mut out, 0, 0.1, false, &mut c)
            };
            match result {
                Err(e @ StrategyError::Codec { rank: 1, .. }) => e.to_string(),
                other => panic!("expected a codec error naming worker 1, got {other:?}"),
            }
        });
        assert!(errors.iter().all(|e| e.contains("worker 1")), "{errors:?}");
    }
}
