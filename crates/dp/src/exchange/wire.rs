//! One bucket on the wire: how each unit travels ([`Route`]), the packing of
//! its messages into the collectives' buffers ([`stage`]), the collectives
//! themselves ([`move_bucket`], the only part the communication thread
//! runs), and the aggregation of what came back ([`land`]).

use std::time::Instant;

use gradcomp_comm::{Collective, CommError, Gathered};
use gradcomp_compress::aggregate::TernarySum;
use gradcomp_compress::codec::{self, CodecError};
use gradcomp_compress::message::{DenseMessage, SparseMessage};
use gradcomp_compress::{Combine, Message};

use super::{ExchangeStats, Plan, Unit, WireCall, WireKind};
use crate::config::Topology;
use crate::strategy::StrategyError;

/// The collective a unit's message travels in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Summed in one f32 allreduce: dense units, dense compressors (fp16
    /// values in f32) and Rand-k `same_seed` values.
    DenseSum,
    /// TernGrad over allreduce: the integer codes summed in one i32 allreduce.
    CodeSum,
    /// Per-worker encodings, allgathered and decoded by every worker.
    Gather,
    /// Uploaded to the parameter server, which aggregates and sends one download.
    Server,
}

impl Route {
    pub(super) fn of(unit: &Unit, topology: Topology, combine: Combine) -> Route {
        match topology {
            Topology::ParameterServer => Route::Server,
            _ if unit.dense || matches!(combine, Combine::DenseSum | Combine::SharedIndexSum) => {
                Route::DenseSum
            }
            Topology::Allreduce if combine == Combine::TernarySum => Route::CodeSum,
            _ => Route::Gather,
        }
    }
}

/// One bucket's buffers, reused every step; moved to the communication
/// thread and back when pipelining.
#[derive(Default)]
pub(super) struct Payload {
    dense: Vec<f32>,
    codes: Vec<i32>,
    wire: Vec<u8>,
    gathered: Gathered,
    down: Vec<u8>,
    /// What [`move_bucket`] called, and its seconds.
    pub(super) calls: Vec<WireCall>,
    pub(super) seconds: f64,
}

impl Payload {
    /// Enters bucket `b`'s collectives, as [`move_bucket`] left them, in
    /// the step's statistics: its wire seconds and its calls.
    pub(super) fn record(&self, b: usize, st: &mut ExchangeStats) {
        st.buckets[b].wire = self.seconds;
        st.calls.extend_from_slice(&self.calls);
    }
}

/// The co-located server's reused buffers.
#[derive(Default)]
pub(super) struct ServerState {
    sum: TernarySum,
    avg: Vec<f32>,
    msg: Message,
}

/// Packs bucket `b`'s messages into `p`: DenseSum values (raw units read
/// from `raw`, the flat gradient), CodeSum codes, and the encodings that are
/// gathered or uploaded.
pub(super) fn stage(plan: &Plan, msgs: &[Message], raw: &[f32], b: usize, p: &mut Payload) {
    p.dense.clear();
    p.codes.clear();
    p.wire.clear();
    for u in plan.buckets[b].clone() {
        let unit = &plan.units[u];
        match plan.route[u] {
            Route::DenseSum if plan.raw[u] => {
                p.dense.extend_from_slice(&raw[unit.offset..unit.offset + unit.len]);
            }
            Route::DenseSum => match &msgs[u] {
                Message::Dense(m) => p.dense.extend_from_slice(&m.values),
                Message::Sparse(m) => p.dense.extend_from_slice(&m.values),
                m => {
                    let start = p.dense.len();
                    p.dense.resize(start + m.len(), 0.0);
                    m.add_to(1.0, &mut p.dense[start..]);
                }
            },
            Route::CodeSum => {
                if let Message::Ternary(m) = &msgs[u] {
                    let start = p.codes.len();
                    p.codes.resize(start + unit.len, 0);
                    m.codes_into(&mut p.codes[start..]);
                }
            }
            Route::Gather | Route::Server => {
                codec::encode(&msgs[u], unit.id, &mut p.wire);
            }
        }
    }
}

/// Does bucket `b` have a unit on `route`? (Which collectives a bucket calls
/// depends on the configuration only, so every worker calls the same ones.)
fn has(plan: &Plan, b: usize, route: Route) -> bool {
    plan.route[plan.buckets[b].clone()].contains(&route)
}

/// Bucket `b`'s collectives, in a fixed order: the f32 allreduce, the i32
/// allreduce, then the allgatherv or the parameter server's round trip.
pub(super) fn move_bucket(
    plan: &Plan,
    b: usize,
    p: &mut Payload,
    server: &mut ServerState,
    c: &mut dyn Collective,
) -> Result<(), CommError> {
    let t = Instant::now();
    p.calls.clear();
    let call = |kind, sizes, download| WireCall { bucket: Some(b as u32), kind, sizes, download };
    // DenseSum and CodeSum lengths are the same on every worker.
    if !p.dense.is_empty() {
        c.allreduce_sum_f32(&mut p.dense)?;
        p.calls.push(call(WireKind::AllreduceSumF32, vec![4 * p.dense.len() as u64], 0));
    }
    if !p.codes.is_empty() {
        c.allreduce_sum_i32(&mut p.codes)?;
        p.calls.push(call(WireKind::AllreduceSumI32, vec![4 * p.codes.len() as u64], 0));
    }
    if has(plan, b, Route::Gather) {
        c.allgatherv(&p.wire, &mut p.gathered)?;
        p.calls.push(call(WireKind::Allgatherv, p.gathered.iter().map(|m| m.len() as u64).collect(), 0));
    }
    if has(plan, b, Route::Server) {
        let units = &plan.units[plan.buckets[b].clone()];
        let mut sizes = Vec::new();
        let mut aggregate = |ups: &Gathered, down: &mut Vec<u8>| -> Result<(), String> {
            sizes = ups.iter().map(|m| m.len() as u64).collect();
            server_aggregate(units, ups, down, server).map_err(|e| e.to_string())
        };
        c.push_pull(plan.placement, &p.wire, &mut aggregate, &mut p.down)?;
        p.calls.push(call(WireKind::PushPull, sizes, p.down.len() as u64));
    }
    p.seconds = t.elapsed().as_secs_f64();
    Ok(())
}

/// Aggregates bucket `b`'s results into `out` (zeroed by the caller): the
/// summed values and codes scaled by `inv_n`, every worker's gathered
/// messages decoded in rank order, or the server's download. Errors name the
/// worker whose message does not decode (the server's download: rank 0).
pub(super) fn land(
    plan: &Plan,
    msgs: &[Message],
    b: usize,
    p: &Payload,
    out: &mut [f32],
    inv_n: f32,
) -> Result<(), StrategyError> {
    let (mut at_dense, mut at_codes) = (0, 0);
    for u in plan.buckets[b].clone() {
        let unit = &plan.units[u];
        let dst = &mut out[unit.offset..unit.offset + unit.len];
        match (plan.route[u], &msgs[u]) {
            (Route::DenseSum, Message::Sparse(SparseMessage { indices, .. })) if !plan.raw[u] => {
                for (&i, &s) in indices.iter().zip(&p.dense[at_dense..at_dense + indices.len()]) {
                    dst[i as usize] = s * inv_n;
                }
                at_dense += indices.len();
            }
            (Route::DenseSum, _) => {
                for (o, &s) in dst.iter_mut().zip(&p.dense[at_dense..at_dense + unit.len]) {
                    *o = s * inv_n;
                }
                at_dense += unit.len;
            }
            (Route::CodeSum, Message::Ternary(m)) => {
                let w = m.scale * inv_n;
                for (o, &s) in dst.iter_mut().zip(&p.codes[at_codes..at_codes + unit.len]) {
                    *o = w * s as f32;
                }
                at_codes += unit.len;
            }
            _ => {}
        }
    }
    if has(plan, b, Route::Gather) {
        for (rank, mut bytes) in p.gathered.iter().enumerate() {
            let codec_error = |source| StrategyError::Codec { rank, source };
            for u in plan.buckets[b].clone() {
                if plan.route[u] != Route::Gather {
                    continue;
                }
                let unit = &plan.units[u];
                let (first, rest) = codec::split_first(bytes).map_err(codec_error)?;
                let h = codec::accumulate(first, inv_n, &mut out[unit.offset..unit.offset + unit.len])
                    .map_err(codec_error)?;
                if h.unit != unit.id {
                    return Err(codec_error(CodecError::Invalid("message for another unit")));
                }
                bytes = rest;
            }
            if !bytes.is_empty() {
                return Err(codec_error(CodecError::TrailingBytes(bytes.len())));
            }
        }
    }
    if has(plan, b, Route::Server) {
        let codec_error = |source| StrategyError::Codec { rank: 0, source };
        let mut bytes = &p.down[..];
        for unit in &plan.units[plan.buckets[b].clone()] {
            let (first, rest) = codec::split_first(bytes).map_err(codec_error)?;
            codec::accumulate(first, 1.0, &mut out[unit.offset..unit.offset + unit.len])
                .map_err(codec_error)?;
            bytes = rest;
        }
    }
    Ok(())
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
