//! [`Bucket`]: one bucket of units on the wire, in three moves: packing its
//! units' messages into the collectives' buffers ([`Bucket::pack`]), the
//! collectives themselves ([`Bucket::run`], the only part the communication
//! thread runs), and aggregating what came back ([`Bucket::aggregate`]).

use std::time::Instant;

use gradcomp_comm::{f16, Collective, CollectiveCall, CommError, Gathered, OpKind};
use gradcomp_compress::aggregate::{combine_unit, Scratch};
use gradcomp_compress::codec::{self, CodecError};
use gradcomp_compress::message::SparseMessage;
use gradcomp_compress::Message;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use super::gradient_side::GradientSide;
use super::plan::Plan;
use super::route::{CodeWidth, Route};
use super::server::{self, ServerBuffers};
use super::stats::ExchangeStats;
use crate::error::ExchangeError;

/// TernGrad's code sums in the width the plan picked.
pub(crate) enum CodeSums {
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
}

impl CodeSums {
    fn new(width: CodeWidth) -> Self {
        match width {
            CodeWidth::I8 => CodeSums::I8(Vec::new()),
            CodeWidth::I16 => CodeSums::I16(Vec::new()),
            CodeWidth::I32 => CodeSums::I32(Vec::new()),
        }
    }

    fn len(&self) -> usize {
        match self {
            CodeSums::I8(v) => v.len(),
            CodeSums::I16(v) => v.len(),
            CodeSums::I32(v) => v.len(),
        }
    }

    fn clear(&mut self) {
        match self {
            CodeSums::I8(v) => v.clear(),
            CodeSums::I16(v) => v.clear(),
            CodeSums::I32(v) => v.clear(),
        }
    }

    /// Appends a ternary message's codes.
    fn push(&mut self, m: &gradcomp_compress::message::TernaryMessage) {
        fn grow<T: From<i8> + Copy + Default>(
            v: &mut Vec<T>,
            m: &gradcomp_compress::message::TernaryMessage,
        ) {
            let start = v.len();
            v.resize(start + m.len, T::default());
            m.codes_into(&mut v[start..]);
        }
        match self {
            CodeSums::I8(v) => grow(v, m),
            CodeSums::I16(v) => grow(v, m),
            CodeSums::I32(v) => grow(v, m),
        }
    }

    /// Sums the codes across workers; returns the call's kind and bytes.
    fn allreduce(&mut self, c: &mut dyn Collective) -> Result<(OpKind, usize), CommError> {
        Ok(match self {
            CodeSums::I8(v) => (c.allreduce_sum_i8(v).map(|()| OpKind::AllreduceSumI8)?, v.len()),
            CodeSums::I16(v) => (c.allreduce_sum_i16(v).map(|()| OpKind::AllreduceSumI16)?, 2 * v.len()),
            CodeSums::I32(v) => (c.allreduce_sum_i32(v).map(|()| OpKind::AllreduceSumI32)?, 4 * v.len()),
        })
    }

    /// `dst[j] = w · sum[at + j]`.
    fn scale_into(&self, at: usize, w: f32, dst: &mut [f32]) {
        fn scale<T: Copy + Into<f32>>(src: &[T], w: f32, dst: &mut [f32]) {
            for (o, &s) in dst.iter_mut().zip(src) {
                *o = w * s.into();
            }
        }
        let n = dst.len();
        match self {
            CodeSums::I8(v) => scale(&v[at..at + n], w, dst),
            CodeSums::I16(v) => scale(&v[at..at + n], w, dst),
            CodeSums::I32(v) => {
                for (o, &s) in dst.iter_mut().zip(&v[at..at + n]) {
                    *o = w * s as f32;
                }
            }
        }
    }
}

/// `out = f16(f32(h) · s)`, a block at a time on the stack.
fn scale_halves(h: &[f16], s: f32, out: &mut [f16]) {
    let mut wide = [0.0f32; 1024];
    for (h, o) in h.chunks(wide.len()).zip(out.chunks_mut(wide.len())) {
        let w = &mut wide[..h.len()];
        h.convert_to_f32_slice(w);
        w.iter_mut().for_each(|v| *v *= s);
        o.convert_from_f32_slice(w);
    }
}

/// One bucket (a run of units the plan cut) and its buffers, reused every
/// step; moved to the communication thread and back when pipelining.
pub(crate) struct Bucket {
    /// Its index in the plan's buckets.
    pub index: usize,
    dense: Vec<f32>,
    halves: Vec<f16>,
    codes: CodeSums,
    wire: Vec<u8>,
    gathered: Gathered,
    down: Vec<u8>,
    /// The per-worker aggregation's buffers.
    scratch: Box<Scratch>,
    /// What [`Bucket::run`] called, and its seconds.
    calls: Vec<CollectiveCall>,
    seconds: f64,
}

impl Bucket {
    pub(crate) fn new(index: usize, width: CodeWidth) -> Self {
        Bucket {
            index,
            dense: Vec::new(),
            halves: Vec::new(),
            codes: CodeSums::new(width),
            wire: Vec::new(),
            gathered: Gathered::default(),
            down: Vec::new(),
            scratch: Box::default(),
            calls: Vec::new(),
            seconds: 0.0,
        }
    }

    /// Enters the bucket's collectives, as [`Bucket::run`] left them, in
    /// the step's statistics: its wire seconds and its calls.
    pub(crate) fn record(&self, st: &mut ExchangeStats) {
        st.buckets[self.index].wire_seconds = self.seconds;
        st.calls.extend_from_slice(&self.calls);
    }

    /// Packs the units' messages: the values that are summed (uncompressed units as
    /// `local` holds them), the codes, and the encodings that are gathered
    /// or uploaded. `inv_n` pre-scales half-precision values, which are
    /// summed already averaged so their sum cannot overflow f16.
    pub(crate) fn pack(
        &mut self,
        plan: &Plan,
        msgs: &[Message],
        local: &dyn GradientSide,
        grad: &[f32],
        inv_n: f32,
    ) {
        let (b, p) = (self.index, self);
        p.dense.clear();
        p.halves.clear();
        p.codes.clear();
        p.wire.clear();
        for u in plan.buckets[b].clone() {
            match (plan.units[u].route, &msgs[u]) {
                (Route::SumF32, _) if plan.units[u].uncompressed => {
                    p.dense.extend_from_slice(local.uncompressed(plan, u, grad))
                }
                (Route::SumF32, Message::Dense(m)) => p.dense.extend_from_slice(&m.values),
                (Route::SumF32, Message::Sparse(m)) => p.dense.extend_from_slice(&m.values),
                (Route::SumF32, m) => {
                    let start = p.dense.len();
                    p.dense.resize(start + m.len(), 0.0);
                    m.add_to(1.0, &mut p.dense[start..]);
                }
                // f16(f16(g) · 1/N), as torch's fp16_compress_hook divides the
                // halves; whole slices, so the conversions run as F16C where the
                // CPU has it (element by element they are software).
                (Route::SumF16, Message::Half(m)) => {
                    let start = p.halves.len();
                    p.halves.resize(start + m.values.len(), f16::ZERO);
                    scale_halves(m.values.reinterpret_cast(), inv_n, &mut p.halves[start..]);
                }
                (Route::SumCodes, Message::Ternary(m)) => p.codes.push(m),
                (Route::Gather | Route::Server, m) => {
                    codec::encode(m, plan.units[u].id, &mut p.wire);
                }
                // The rounds were the exchange: nothing to pack. (A message of
                // another kind on a summing route cannot be built from a valid
                // configuration; the plan's routes follow `combine`.)
                // The reduce-scatter runs apart from the buckets (scatter.rs).
                (Route::InRounds | Route::SumF16 | Route::SumCodes | Route::Scatter, _) => {}
            }
        }
    }

    /// The bucket's collectives, in a fixed order: the f32 allreduce, the
    /// half allreduce, the code allreduce, then the allgatherv or the
    /// parameter server's round trip.
    pub(crate) fn run(
        &mut self,
        plan: &Plan,
        server: &mut ServerBuffers,
        c: &mut dyn Collective,
    ) -> Result<(), CommError> {
        let (b, p) = (self.index, self);
        let t = Instant::now();
        p.calls.clear();
        let bucket = Some(b as u32);
        // The summed lengths are the same on every worker.
        if !p.dense.is_empty() {
            c.allreduce_sum_f32(&mut p.dense)?;
            p.calls.push(CollectiveCall::allreduce(
                OpKind::AllreduceSumF32,
                4 * p.dense.len() as u64,
                bucket,
            ));
        }
        if !p.halves.is_empty() {
            c.allreduce_sum_f16(&mut p.halves)?;
            p.calls.push(CollectiveCall::allreduce(
                OpKind::AllreduceSumF16,
                2 * p.halves.len() as u64,
                bucket,
            ));
        }
        if p.codes.len() > 0 {
            let (op, bytes) = p.codes.allreduce(c)?;
            p.calls.push(CollectiveCall::allreduce(op, bytes as u64, bucket));
        }
        if plan.has(b, Route::Gather) {
            c.allgatherv(&p.wire, &mut p.gathered)?;
            let sizes = p.gathered.iter().map(|m| m.len() as u64).collect();
            p.calls.push(CollectiveCall { op: OpKind::Allgatherv, sizes, download: 0, bucket });
        }
        if plan.has(b, Route::Server) {
            let mut sizes = Vec::new();
            let mut aggregate = |ups: &Gathered, down: &mut Vec<u8>| -> Result<(), String> {
                sizes = ups.iter().map(|m| m.len() as u64).collect();
                server::aggregate(plan, b, ups, down, server).map_err(|e| e.to_string())
            };
            c.push_pull(plan.placement, &p.wire, &mut aggregate, &mut p.down)?;
            p.calls.push(CollectiveCall { op: OpKind::PsPush, sizes, download: p.down.len() as u64, bucket });
        }
        p.seconds = t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Aggregates the bucket's results into `out` (zeroed by the caller):
    /// the summed values and codes scaled by `inv_n`, every worker's
    /// gathered messages decoded in rank order, or the server's download.
    /// Errors name the worker whose message does not decode (the server's
    /// download: rank 0).
    pub(crate) fn aggregate(
        &mut self,
        plan: &Plan,
        msgs: &[Message],
        out: &mut [f32],
        inv_n: f32,
    ) -> Result<(), ExchangeError> {
        let (b, p) = (self.index, self);
        let (mut at_dense, mut at_halves, mut at_codes) = (0, 0, 0);
        for u in plan.buckets[b].clone() {
            let unit = &plan.units[u];
            let dst = &mut out[unit.offset..unit.offset + unit.len];
            match (plan.units[u].route, &msgs[u]) {
                (Route::SumF32, Message::Sparse(SparseMessage { indices, .. }))
                    if !plan.units[u].uncompressed =>
                {
                    for (&i, &s) in indices.iter().zip(&p.dense[at_dense..at_dense + indices.len()]) {
                        dst[i as usize] = s * inv_n;
                    }
                    at_dense += indices.len();
                }
                (Route::SumF32, _) => {
                    for (o, &s) in dst.iter_mut().zip(&p.dense[at_dense..at_dense + unit.len]) {
                        *o = s * inv_n;
                    }
                    at_dense += unit.len;
                }
                (Route::SumF16, _) => {
                    p.halves[at_halves..at_halves + unit.len].convert_to_f32_slice(dst);
                    at_halves += unit.len;
                }
                (Route::SumCodes, Message::Ternary(m)) => {
                    p.codes.scale_into(at_codes, m.scale * inv_n, dst);
                    at_codes += unit.len;
                }
                // Every worker's message is already the aggregate.
                (Route::InRounds, m) => m.add_to(1.0, dst),
                _ => {}
            }
        }
        if plan.has(b, Route::Gather) {
            aggregate_gathered(plan, b, &p.gathered, out, &mut p.scratch)?;
        }
        if plan.has(b, Route::Server) {
            let codec_error = |source| ExchangeError::Codec { rank: 0, source };
            let mut bytes = &p.down[..];
            for unit in plan.on_route(b, Route::Server) {
                let (first, rest) = codec::split_first(bytes).map_err(codec_error)?;
                codec::accumulate(first, 1.0, &mut out[unit.offset..unit.offset + unit.len])
                    .map_err(codec_error)?;
                bytes = rest;
            }
        }
        Ok(())
    }
}

/// Combines every worker's gathered messages of bucket `b` into `out`, unit
/// by unit in rank order, as the unit's messages combine (averaged with
/// weight 1/N, voted on, or the senders' mean: `aggregate::combine_unit`).
fn aggregate_gathered(
    plan: &Plan,
    b: usize,
    gathered: &Gathered,
    out: &mut [f32],
    scratch: &mut Scratch,
) -> Result<(), ExchangeError> {
    let codec_error = |(rank, source)| ExchangeError::Codec { rank, source };
    let mut cursors: Vec<&[u8]> = gathered.iter().collect();
    let mut firsts = Vec::with_capacity(cursors.len());
    for u in plan.buckets[b].clone().filter(|&u| plan.units[u].route == Route::Gather) {
        let unit = &plan.units[u];
        next_of_each(&mut cursors, &mut firsts)?;
        let dst = &mut out[unit.offset..unit.offset + unit.len];
        combine_unit(&firsts, unit.combine, Some(unit.id), dst, scratch).map_err(codec_error)?;
    }
    all_read(&cursors)
}

/// Takes the next encoded message off every rank's bytes (`cursors`, in
/// rank order) into `firsts`. The error names the rank whose bytes hold none.
pub(crate) fn next_of_each<'a>(
    cursors: &mut [&'a [u8]],
    firsts: &mut Vec<&'a [u8]>,
) -> Result<(), ExchangeError> {
    firsts.clear();
    for (rank, cursor) in cursors.iter_mut().enumerate() {
        let (first, rest) =
            codec::split_first(cursor).map_err(|source| ExchangeError::Codec { rank, source })?;
        firsts.push(first);
        *cursor = rest;
    }
    Ok(())
}

/// `Ok` when every rank's bytes were read to the end; the error names the
/// first rank that sent more.
pub(crate) fn all_read(cursors: &[&[u8]]) -> Result<(), ExchangeError> {
    match cursors.iter().enumerate().find(|(_, c)| !c.is_empty()) {
        Some((rank, rest)) => {
            Err(ExchangeError::Codec { rank, source: CodecError::TrailingBytes(rest.len()) })
        }
        None => Ok(()),
    }
}
