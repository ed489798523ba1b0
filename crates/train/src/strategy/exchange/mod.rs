//! Compressed gradient exchange (ARCHITECTURE.md, "One synchronous step"):
//! the unit machinery of [`Synchronous`](super::Synchronous), also used by
//! CELGC to send compressed model changes.
//!
//! The model's flat gradient is cut into compression units (each tensor at
//! `layer` granularity, the whole buffer at `global`). Excluded units travel
//! dense. Per step the exchange makes at most one call of each collective:
//!
//! | messages | allreduce topology | allgather topology | parameter server |
//! |---|---|---|---|
//! | dense, fp16, excluded units, Rand-k `same_seed` values | allreduce f32 | allreduce f32 | upload |
//! | TernGrad with a shared scaler | max-reduce of scalers, allreduce i32 of codes | max-reduce, allgatherv | max-reduce, upload; integer sum in ⌈log2(2N+1)⌉ bits down |
//! | per-worker messages (sparse, QSGD, 1-bit, unshared TernGrad) | (rejected by config) | allgatherv | upload |
//!
//! Every worker adds the same numbers in the same order, so the averaged
//! gradient is bitwise identical everywhere. The result is in gradient units
//! whatever the residual form: units whose error feedback holds lr-scaled
//! residuals (`acc = e + η·g`, ALGORITHMS.md §6.1) are divided by η after
//! aggregation, so any optimizer applies the whole buffer at η.

use std::time::Instant;

use gradcomp_comm::{Collective, Gathered, ServerPlacement};
use gradcomp_compress::aggregate::TernarySum;
use gradcomp_compress::codec::{self, CodecError};
use gradcomp_compress::memory::{Memory, MemoryKind, NoMemory, ResidualForm};
use gradcomp_compress::message::{DenseMessage, SparseMessage};
use gradcomp_compress::stats;
use gradcomp_compress::{Combine, Compressor, CompressorConfig, Message, RngKey, UnitContext};

use super::{StateBuffers, StrategyError};
use crate::config::{CompressionConfig, Granularity, Topology};
use crate::layout::GradientLayout;

#[cfg(feature = "device-kernels")]
mod device;

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
    pub compress_seconds: f64,
    pub communicate_seconds: f64,
    pub decode_seconds: f64,
    /// ‖residual‖₂ over all units with a memory.
    pub residual_norm: f64,
    /// Σ‖acc − C(acc)‖² / Σ‖acc‖² over compressed units (when measured).
    pub contraction: Option<f64>,
    /// TernGrad's ‖g‖∞‖g‖₁/‖g‖² per compressed unit (when measured).
    pub bound_ratios: Vec<f64>,
    /// Sizes of this step's allgatherv messages and PS uploads (all workers), for pricing.
    pub gathered_sizes: Vec<u64>,
    pub download_bytes: u64,
    /// Compressor-specific figures of the last step (eSGD's replacements and
    /// importance scores), from the first unit that reports any.
    pub extra: Vec<(&'static str, f64)>,
}

/// Per-worker state of the synchronous exchange.
pub struct GradientExchange {
    units: Vec<Unit>,
    compressors: Vec<Box<dyn Compressor>>,
    memories: Vec<Box<dyn Memory>>,
    combine: Combine,
    topology: Topology,
    placement: ServerPlacement,
    seed: u64,
    msgs: Vec<Message>,
    /// Units sent as they are (excluded, or the dense compressor): no
    /// memory, no message unless the topology needs an encoding.
    raw: Vec<bool>,
    /// Units whose memory is not the identity; their compensated gradient is
    /// the memory's buffer (`Memory::residual` between compensate and update).
    has_memory: Vec<bool>,
    /// Units whose error feedback holds lr-scaled residuals: their aggregate
    /// is divided by the learning rate to come back to gradient units.
    lr_scaled: Vec<bool>,
    scalars: Vec<f32>,
    /// Position of each unit's scalar in `scalars`, for two-phase compressors.
    scalar_of: Vec<Option<usize>>,
    dense_buf: Vec<f32>,
    codes: Vec<i32>,
    wire: Vec<u8>,
    gathered: Gathered,
    down: Vec<u8>,
    scratch: Vec<f32>,
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

/// The co-located server's reused buffers.
#[derive(Default)]
struct ServerState {
    sum: TernarySum,
    avg: Vec<f32>,
    msg: Message,
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
        Self {
            raw,
            has_memory,
            lr_scaled,
            msgs: units.iter().map(|_| Message::default()).collect(),
            units,
            compressors,
            memories,
            combine,
            topology,
            placement,
            seed,
            scalars: Vec::new(),
            scalar_of: Vec::new(),
            dense_buf: Vec::new(),
            codes: Vec::new(),
            wire: Vec::new(),
            gathered: Gathered::default(),
            down: Vec::new(),
            scratch: Vec::new(),
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
        &self.units
    }

    pub fn set_density(&mut self, rho: f64) {
        self.compressors.iter_mut().for_each(|c| c.set_density(rho));
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
        for (u, mem) in self.memories.iter().enumerate() {
            for (i, b) in mem.state().into_iter().enumerate() {
                out.insert(format!("{prefix}memory.{u}.{i}"), b.to_vec());
            }
        }
    }

    /// Restores [`GradientExchange::state`]; every buffer must be present and
    /// empty (a memory that has not run yet) or exactly its unit's length.
    pub fn restore(&mut self, prefix: &str, state: &StateBuffers) -> Result<(), String> {
        for (u, mem) in self.memories.iter_mut().enumerate() {
            let unit = &self.units[u];
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
            d.load_memories(&self.memories).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// ‖residual‖₂ over all units with a memory.
    pub fn residual_norm(&self) -> f64 {
        self.memories
            .iter()
            .map(|m| gradcomp_compress::reduce::sum_of_squares(m.residual()))
            .sum::<f64>()
            .sqrt()
    }

    /// Does unit `u`'s message travel in the allreduce'd f32 buffer?
    fn in_dense_allreduce(&self, u: usize) -> bool {
        self.topology != Topology::ParameterServer
            && (self.units[u].dense || matches!(self.combine, Combine::DenseSum | Combine::SharedIndexSum))
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
        let mut st = ExchangeStats { elements: grad.len() as u64, ..Default::default() };
        let t = Instant::now();
        // 1. Memories fold in their state; the compensated gradient stays in the memory.
        for (u, unit) in self.units.iter().enumerate() {
            if self.has_memory[u] {
                self.memories[u].compensate(&grad[unit.offset..unit.offset + unit.len], lr);
            }
        }
        // 2. Two-phase compressors agree on their scalars (TernGrad's shared scaler).
        self.scalars.clear();
        self.scalar_of.clear();
        for u in 0..self.units.len() {
            let x = unit_input(&self.units, &self.has_memory, &self.memories, grad, u);
            let s = if self.raw[u] { None } else { self.compressors[u].local_scalar(x) };
            self.push_scalar(s);
        }
        let before_scalars = t.elapsed().as_secs_f64();
        let scalar_round = self.share_scalars(c)?;
        // 3. Compress every unit.
        let t = Instant::now();
        self.compress_units(grad, RngKey::new(self.seed, c.rank() as u32, step, 0), loss, measure, &mut st);
        st.compress_seconds = before_scalars + t.elapsed().as_secs_f64();
        // 4. Move the messages and aggregate into `out`.
        let t = Instant::now();
        self.move_and_aggregate(grad, out, c, &mut st)?;
        st.communicate_seconds = scalar_round + t.elapsed().as_secs_f64();
        // 5. Memories keep what was not sent; lr-scaled units return to gradient units.
        let t = Instant::now();
        for u in 0..self.units.len() {
            if self.has_memory[u] {
                self.memories[u].update(&self.msgs[u]);
            }
        }
        self.to_gradient_units(out, lr);
        st.residual_norm = self.residual_norm();
        st.decode_seconds = t.elapsed().as_secs_f64();
        Ok(st)
    }

    /// Records the next unit's local scalar (two-phase compressors), in unit order.
    fn push_scalar(&mut self, s: Option<f32>) {
        self.scalar_of.push(s.map(|s| {
            self.scalars.push(s);
            self.scalars.len() - 1
        }));
    }

    /// The scalars' max-reduce across workers (TernGrad's shared scaler), if
    /// any unit has one; returns its seconds.
    fn share_scalars(&mut self, c: &mut dyn Collective) -> Result<f64, StrategyError> {
        let t = Instant::now();
        if !self.scalars.is_empty() {
            c.allreduce_max_f32(&mut self.scalars)?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// Divides the aggregate of units with lr-scaled residuals by `lr`.
    fn to_gradient_units(&self, out: &mut [f32], lr: f32) {
        for (u, unit) in self.units.iter().enumerate() {
            if self.lr_scaled[u] {
                let inv = 1.0 / lr;
                out[unit.offset..unit.offset + unit.len].iter_mut().for_each(|o| *o *= inv);
            }
        }
    }

    /// Compresses every unit into its message (`key` with the unit's id seeds
    /// its randomness); counts what is sent and, when measuring, the
    /// contraction ratio and TernGrad's bound ratios.
    fn compress_units(
        &mut self,
        grad: &[f32],
        key: RngKey,
        loss: Option<f64>,
        measure: bool,
        st: &mut ExchangeStats,
    ) {
        let mut sums = ContractionSums::default();
        let encode_raw = self.topology == Topology::ParameterServer;
        for u in 0..self.units.len() {
            let x = unit_input(&self.units, &self.has_memory, &self.memories, grad, u);
            if self.raw[u] {
                if encode_raw {
                    let m = self.msgs[u].dense_mut();
                    m.values.clear();
                    m.values.extend_from_slice(x);
                }
                continue;
            }
            let ctx = UnitContext {
                key: RngKey { unit: self.units[u].id, ..key },
                shared_scalar: self.scalar_of[u].map(|i| self.scalars[i]),
                loss,
            };
            self.compressors[u].compress(x, &ctx, &mut self.msgs[u]);
            if st.extra.is_empty() {
                st.extra = self.compressors[u].stats();
            }
            let measured = measure.then_some(x);
            account(&self.msgs[u], measured, &mut self.scratch, st, &mut sums);
        }
        if measure {
            st.contraction = Some(sums.ratio());
        }
    }

    /// The collectives of the topology, aggregating every worker's messages into `out`.
    fn move_and_aggregate(
        &mut self,
        grad: &[f32],
        out: &mut [f32],
        c: &mut dyn Collective,
        st: &mut ExchangeStats,
    ) -> Result<(), StrategyError> {
        out.fill(0.0);
        let inv_n = 1.0 / c.world_size() as f32;
        match self.topology {
            Topology::ParameterServer => self.via_server(c, out, st),
            Topology::Allreduce | Topology::Allgather => {
                self.via_dense_allreduce(c, grad, out, inv_n)?;
                if self.topology == Topology::Allreduce && self.combine == Combine::TernarySum {
                    self.via_code_allreduce(c, out, inv_n)
                } else {
                    self.via_allgather(c, out, inv_n, st)
                }
            }
        }
    }

    /// Dense units, dense compressors (fp16 values in f32) and Rand-k
    /// `same_seed` values: one allreduce of their concatenation.
    fn via_dense_allreduce(
        &mut self,
        c: &mut dyn Collective,
        grad: &[f32],
        out: &mut [f32],
        inv_n: f32,
    ) -> Result<(), StrategyError> {
        self.dense_buf.clear();
        for u in 0..self.units.len() {
            if !self.in_dense_allreduce(u) {
                continue;
            }
            if self.raw[u] {
                let unit = &self.units[u];
                self.dense_buf.extend_from_slice(&grad[unit.offset..unit.offset + unit.len]);
                continue;
            }
            match &self.msgs[u] {
                Message::Dense(m) => self.dense_buf.extend_from_slice(&m.values),
                Message::Sparse(m) => self.dense_buf.extend_from_slice(&m.values),
                m => {
                    let start = self.dense_buf.len();
                    self.dense_buf.resize(start + m.len(), 0.0);
                    m.add_to(1.0, &mut self.dense_buf[start..]);
                }
            }
        }
        if self.dense_buf.is_empty() {
            return Ok(());
        }
        c.allreduce_sum_f32(&mut self.dense_buf)?;
        let mut at = 0;
        for u in 0..self.units.len() {
            if !self.in_dense_allreduce(u) {
                continue;
            }
            let unit = &self.units[u];
            let dst = &mut out[unit.offset..unit.offset + unit.len];
            match &self.msgs[u] {
                Message::Sparse(SparseMessage { indices, .. }) if !self.raw[u] => {
                    for &i in indices {
                        dst[i as usize] = self.dense_buf[at] * inv_n;
                        at += 1;
                    }
                }
                _ => {
                    for (o, &s) in dst.iter_mut().zip(&self.dense_buf[at..at + unit.len]) {
                        *o = s * inv_n;
                    }
                    at += unit.len;
                }
            }
        }
        Ok(())
    }

    /// TernGrad over allreduce: the integer code sums in one i32 allreduce.
    fn via_code_allreduce(
        &mut self,
        c: &mut dyn Collective,
        out: &mut [f32],
        inv_n: f32,
    ) -> Result<(), StrategyError> {
        self.codes.clear();
        for (u, unit) in self.units.iter().enumerate() {
            if let (false, Message::Ternary(m)) = (unit.dense, &self.msgs[u]) {
                let start = self.codes.len();
                self.codes.resize(start + unit.len, 0);
                m.codes_into(&mut self.codes[start..]);
            }
        }
        if self.codes.is_empty() {
            return Ok(());
        }
        c.allreduce_sum_i32(&mut self.codes)?;
        let mut at = 0;
        for (u, unit) in self.units.iter().enumerate() {
            if let (false, Message::Ternary(m)) = (unit.dense, &self.msgs[u]) {
                let w = m.scale * inv_n;
                for (o, &s) in
                    out[unit.offset..unit.offset + unit.len].iter_mut().zip(&self.codes[at..at + unit.len])
                {
                    *o = w * s as f32;
                }
                at += unit.len;
            }
        }
        Ok(())
    }

    /// Per-worker messages: allgatherv of this worker's encodings, then every
    /// worker decodes and averages all of them in rank order.
    fn via_allgather(
        &mut self,
        c: &mut dyn Collective,
        out: &mut [f32],
        inv_n: f32,
        st: &mut ExchangeStats,
    ) -> Result<(), StrategyError> {
        self.wire.clear();
        let mut any = false;
        for u in 0..self.units.len() {
            if !self.in_dense_allreduce(u) {
                codec::encode(&self.msgs[u], self.units[u].id, &mut self.wire);
                any = true;
            }
        }
        if !any {
            return Ok(());
        }
        c.allgatherv(&self.wire, &mut self.gathered)?;
        st.gathered_sizes = self.gathered.iter().map(|m| m.len() as u64).collect();
        for (rank, mut bytes) in self.gathered.iter().enumerate() {
            for u in 0..self.units.len() {
                if self.in_dense_allreduce(u) {
                    continue;
                }
                let unit = &self.units[u];
                let (first, rest) =
                    codec::split_first(bytes).map_err(|source| StrategyError::Codec { rank, source })?;
                let h = codec::accumulate(first, inv_n, &mut out[unit.offset..unit.offset + unit.len])
                    .map_err(|source| StrategyError::Codec { rank, source })?;
                if h.unit != unit.id {
                    return Err(StrategyError::Codec {
                        rank,
                        source: CodecError::Invalid("message for another unit"),
                    });
                }
                bytes = rest;
            }
            if !bytes.is_empty() {
                return Err(StrategyError::Codec { rank, source: CodecError::TrailingBytes(bytes.len()) });
            }
        }
        Ok(())
    }

    /// The parameter server: every unit's message is uploaded; the server
    /// (rank 0) sums TernGrad codes in the integers and averages everything
    /// else, and every worker decodes the download.
    fn via_server(
        &mut self,
        c: &mut dyn Collective,
        out: &mut [f32],
        st: &mut ExchangeStats,
    ) -> Result<(), StrategyError> {
        self.wire.clear();
        for (u, unit) in self.units.iter().enumerate() {
            codec::encode(&self.msgs[u], unit.id, &mut self.wire);
        }
        let units = &self.units;
        let server = &mut self.server;
        let mut sizes = Vec::new();
        let mut aggregate = |ups: &Gathered, down: &mut Vec<u8>| -> Result<(), String> {
            sizes = ups.iter().map(|m| m.len() as u64).collect();
            server_aggregate(units, ups, down, server).map_err(|e| e.to_string())
        };
        c.push_pull(self.placement, &self.wire, &mut aggregate, &mut self.down)?;
        st.gathered_sizes = sizes;
        st.download_bytes = self.down.len() as u64;
        let mut bytes = &self.down[..];
        for unit in &self.units {
            let (first, rest) =
                codec::split_first(bytes).map_err(|source| StrategyError::Codec { rank: 0, source })?;
            codec::accumulate(first, 1.0, &mut out[unit.offset..unit.offset + unit.len])
                .map_err(|source| StrategyError::Codec { rank: 0, source })?;
            bytes = rest;
        }
        Ok(())
    }
}

/// Σ‖acc − C(acc)‖² and Σ‖acc‖² over the compressed units of a measured step.
#[derive(Default)]
struct ContractionSums {
    err: f64,
    norm: f64,
}

impl ContractionSums {
    /// The step's contraction ratio: Σ‖acc − C(acc)‖² / Σ‖acc‖² (0 for a zero gradient).
    fn ratio(&self) -> f64 {
        if self.norm > 0.0 {
            self.err / self.norm
        } else {
            0.0
        }
    }
}

/// Counts a compressed unit's message into the step's statistics; `measured`
/// is the compressed vector on a measured step (contraction and TernGrad's
/// bound ratio).
fn account(
    msg: &Message,
    measured: Option<&[f32]>,
    scratch: &mut Vec<f32>,
    st: &mut ExchangeStats,
    sums: &mut ContractionSums,
) {
    st.selected += msg.selected() as u64;
    st.wire_bytes += codec::encoded_len(msg) as u64;
    if let Some(x) = measured {
        let norm = gradcomp_compress::reduce::sum_of_squares(x);
        sums.err += norm * stats::contraction_ratio(x, msg, scratch);
        sums.norm += norm;
        st.bound_ratios.push(stats::terngrad_bound_ratio(x));
    }
}

/// The buffer unit `u` compresses: its memory's compensated gradient, or its
/// slice of the gradient. (Fields rather than `&self`, so the compressors and
/// messages can be borrowed mutably beside it.)
fn unit_input<'a>(
    units: &[Unit],
    has_memory: &[bool],
    memories: &'a [Box<dyn Memory>],
    grad: &'a [f32],
    u: usize,
) -> &'a [f32] {
    if has_memory[u] {
        memories[u].residual()
    } else {
        &grad[units[u].offset..units[u].offset + units[u].len]
    }
}

/// The server's aggregation: per unit, the integer sum of ternary codes
/// (compact download), or the average of the decoded messages, downloaded as
/// a sparse message when that is smaller than dense f32.
fn server_aggregate(
    units: &[Unit],
    ups: &Gathered,
    down: &mut Vec<u8>,
    s: &mut ServerState,
) -> Result<(), CodecError> {
    let n = ups.len();
    let mut cursors: Vec<&[u8]> = ups.iter().collect();
    for unit in units {
        let firsts: Vec<&[u8]> = cursors
            .iter_mut()
            .map(|cur| {
                let (first, rest) = codec::split_first(cur)?;
                *cur = rest;
                Ok(first)
            })
            .collect::<Result<_, CodecError>>()?;
        // Integer sums need every upload ternary under one shared scaler.
        let scales = firsts.iter().map(|b| codec::ternary_scale(b)).collect::<Result<Vec<_>, _>>()?;
        let same_scale = scales.iter().all(|s| s.is_some())
            && scales.windows(2).all(|w| w[0].map(f32::to_bits) == w[1].map(f32::to_bits));
        if same_scale {
            s.sum.reset(unit.len);
            for b in &firsts {
                s.sum.add_encoded(b)?;
            }
            s.sum.take_into(&mut s.msg);
        } else {
            s.avg.clear();
            s.avg.resize(unit.len, 0.0);
            for b in &firsts {
                codec::accumulate(b, 1.0 / n as f32, &mut s.avg)?;
            }
            let nnz = s.avg.iter().filter(|&&v| v != 0.0).count();
            if nnz * 8 + 4 < unit.len * 4 {
                let m = s.msg.sparse_mut();
                m.len = unit.len;
                m.wire = Default::default();
                m.indices.clear();
                m.values.clear();
                for (i, &v) in s.avg.iter().enumerate() {
                    if v != 0.0 {
                        m.indices.push(i as u32);
                        m.values.push(v);
                    }
                }
            } else {
                let m: &mut DenseMessage = s.msg.dense_mut();
                m.values.clear();
                m.values.extend_from_slice(&s.avg);
            }
        }
        codec::encode(&s.msg, unit.id, down);
    }
    if let Some(rest) = cursors.iter().find(|c| !c.is_empty()) {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    Ok(())
}
