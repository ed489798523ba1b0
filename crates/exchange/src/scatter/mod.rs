//! The reduce-scatter route (`comm.topology = "reduce-scatter"`;
//! ALGORITHMS.md §7): a compressed exchange whose bytes per worker do not
//! grow with the number of workers.
//!
//! Every compressed unit of length L is cut into N shards, contiguous runs
//! of whole 64-value blocks ([`shard`]); worker j owns shard j. One
//! exchange:
//! 1. each worker compresses every shard of its compensated unit (its
//!    error feedback e₁ over the whole unit, as on any route) and sends
//!    shard j to worker j (one alltoallv for all units);
//! 2. worker j decodes the N messages of its shards and averages them in
//!    f32 (rank order, as an allgather's aggregation does);
//! 3. it compresses the average again, through a second error feedback e₂
//!    of its own over the shard it owns (m = avg + e₂, send C(m),
//!    e₂ ← m − D(C(m))): that second rounding is carried to its next round,
//!    not lost;
//! 4. the owners' messages are allgathered and every worker decodes all of
//!    them into the result: every worker decodes the same bytes, so the
//!    replicas agree bit for bit.
//!
//! Each worker receives N − 1 shards of 1/N of a message and N − 1 averages
//! of the same size: about 2(N − 1)/N messages, against N − 1 for the
//! allgather (at N = 8: 0.25×, plus a 12-byte header per shard).
//!
//! The owner's memory e₂ is tied to the cut (N, rank). When a round comes
//! with another N or rank (a membership change), it is re-cut: the values
//! at positions this worker still owns are kept, the others dropped (their
//! new owner starts from zero there), so no round applies a memory to
//! positions it was not accumulated for. A checkpoint keeps e₂ with its cut
//! and restores it the same way.
//!
//! Host gradients only, in one exchange per call (no bucket pipeline); the
//! compressor must be stateless across steps apart from its memory (it
//! compresses shards of the unit in turn), which the configuration check
//! enforces (eSGD is refused).

use std::ops::Range;
use std::time::Instant;

use gradcomp_comm::{Collective, CollectiveCall, Gathered, OpKind};
use gradcomp_compress::aggregate::{combine_unit, Scratch};
use gradcomp_compress::codec::{self, CodecError};
use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::{Combine, Compressor, Message, RngKey, UnitContext};

use gradcomp_compress::StateError;

use crate::bucket::{all_read, next_of_each};
use crate::error::ExchangeError;
use crate::gradient_side::GradientSide;
use crate::host::HostCompression;
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::route::{shard, Route};
use crate::stats::ExchangeStats;

/// The most workers a saved cut may name: f32 holds every whole number up
/// to 2^24 exactly.
const MAX_CUT: f32 = (1 << 24) as f32;

/// Whether `x` is a whole number.
fn whole(x: f32) -> bool {
    x.fract() == 0.0
}

/// The owner's part of one unit: its shard, its own compressor and its
/// second error feedback e₂ over the shard.
struct Owned {
    range: Range<usize>,
    compressor: Box<dyn Compressor>,
    memory: ErrorFeedback,
}

/// The reduce-scatter's state and buffers, reused every exchange.
pub(crate) struct Scatter {
    /// (N, rank) of the cut the owned shards and e₂ follow; `None` before
    /// the first exchange.
    cut: Option<(usize, usize)>,
    /// Per unit on [`Route::Scatter`] (plan order): what this worker owns.
    owned: Vec<Owned>,
    /// The units on [`Route::Scatter`], as plan indices.
    units: Vec<usize>,
    /// Per scatter unit: what this worker sent of it (its shards'
    /// messages, put together), for e₁'s update.
    sent: Vec<Message>,
    shard_msg: Message,
    send: Gathered,
    recv: Gathered,
    mine: Vec<u8>,
    gathered: Gathered,
    average: Vec<f32>,
    dense: Vec<f32>,
    scratch: Box<Scratch>,
}

/// The random stream of a shard's compression: the unit's, told apart per
/// shard (bits 20–29) and for the owner's second compression (bit 31).
fn shard_key(key: RngKey, unit: u32, shard: usize, owner: bool) -> RngKey {
    let tag = ((shard as u32 + 1) & 0x3ff) << 20 | u32::from(owner) << 31;
    RngKey { unit: unit ^ tag, ..key }
}

impl Scatter {
    pub(crate) fn new(plan: &Plan) -> Self {
        let units: Vec<usize> =
            (0..plan.units.len()).filter(|&u| plan.units[u].route == Route::Scatter).collect();
        Scatter {
            cut: None,
            owned: Vec::new(),
            sent: units.iter().map(|_| Message::default()).collect(),
            units,
            shard_msg: Message::default(),
            send: Gathered::default(),
            recv: Gathered::default(),
            mine: Vec::new(),
            gathered: Gathered::default(),
            average: Vec::new(),
            dense: Vec::new(),
            scratch: Box::default(),
        }
    }

    /// Cuts the shards for `n` workers with this worker at `rank`, keeping
    /// e₂ at the positions it still owns (from the last round's cut, or a
    /// checkpoint's).
    fn recut(&mut self, plan: &Plan, recipe: &Recipe, n: usize, rank: usize) {
        let old: Vec<(Range<usize>, Vec<f32>)> =
            self.owned.iter().map(|o| (o.range.clone(), o.memory.residual().to_vec())).collect();
        self.owned = self
            .units
            .iter()
            .enumerate()
            .map(|(i, &u)| {
                let unit = &plan.units[u];
                let range = shard(unit.len, n, rank);
                let mut e2 = vec![0.0; range.len()];
                if let Some((was, values)) = old.get(i).filter(|(_, v)| !v.is_empty()) {
                    let keep = range.start.max(was.start)..range.end.min(was.end);
                    for p in keep {
                        e2[p - range.start] = values[p - was.start];
                    }
                }
                let mut memory = ErrorFeedback::new(ResidualForm::Raw);
                memory.restore(&[e2]).expect("one buffer");
                Owned { range: range.clone(), compressor: recipe.compressor(&[range.len()]), memory }
            })
            .collect();
        self.cut = Some((n, rank));
    }

    /// Every scatter unit's state, as (plan unit, buffer, values): buffer
    /// 0 is e₂ over the owned shard, buffer 1 the cut [N, rank]; nothing
    /// before the first exchange. (`state.rs` names them, as memories.)
    pub(crate) fn state(&self) -> Vec<(usize, usize, Vec<f32>)> {
        let Some((n, rank)) = self.cut else { return Vec::new() };
        let mut out = Vec::new();
        for (o, &u) in self.owned.iter().zip(&self.units) {
            out.push((u, 0, o.memory.residual().to_vec()));
            out.push((u, 1, vec![n as f32, rank as f32]));
        }
        out
    }

    /// Restores [`Scatter::state`] (`get(unit, buffer)`, `name(unit,
    /// buffer)` its key for errors): each unit's e₂ with the cut it was made
    /// for, re-cut at the next round if that differs. Without a cut (a
    /// checkpoint of another topology, from before the first round, or a
    /// zeroed one) e₂ starts at zero; a buffer of the wrong length for its
    /// cut is an error.
    pub(crate) fn restore<'a>(
        &mut self,
        plan: &Plan,
        recipe: &Recipe,
        get: impl Fn(usize, usize) -> Option<&'a Vec<f32>>,
        name: impl Fn(usize, usize) -> String,
    ) -> Result<(), StateError> {
        self.cut = None;
        self.owned.clear();
        let Some(cut) = self.units.first().and_then(|&u| get(u, 1)) else { return Ok(()) };
        let (n, rank) = match cut[..] {
            // A zeroed cut (a worker that joins): none.
            [n, rank] if n == 0.0 && rank == 0.0 => return Ok(()),
            [n, rank] if whole(n) && whole(rank) && (1.0..=MAX_CUT).contains(&n) && rank < n => {
                (n as usize, rank as usize)
            }
            _ => {
                let problem =
                    format!("{cut:?} is not a cut [N, rank] with 1 ≤ N ≤ {MAX_CUT} and 0 ≤ rank < N");
                return Err(StateError::Invalid { buffer: name(self.units[0], 1), problem });
            }
        };
        self.recut(plan, recipe, n, rank);
        for (o, &u) in self.owned.iter_mut().zip(&self.units) {
            let e2 = get(u, 0).ok_or_else(|| StateError::Missing { buffer: name(u, 0) })?;
            if e2.len() != o.range.len() {
                return Err(StateError::Length {
                    buffer: name(u, 0),
                    expected: o.range.len(),
                    got: e2.len(),
                });
            }
            o.memory.restore(std::slice::from_ref(e2))?;
        }
        Ok(())
    }
}

/// Appends `part` (a shard's message, of the values at `offset` of a unit
/// of `len`) to `sent`, the unit's whole message: sparse messages as their
/// indices moved by `offset`, anything else decoded into dense values (the
/// memories' update reads either the same way: `memory::remove_sent`).
fn put_together(sent: &mut Message, part: &Message, offset: usize, len: usize, first: bool) {
    if first {
        match part {
            Message::Sparse(p) => {
                let s = sent.sparse_mut();
                s.len = len;
                s.wire = p.wire;
                s.indices.clear();
                s.values.clear();
            }
            _ => {
                let d = sent.dense_mut();
                d.values.clear();
                d.values.resize(len, 0.0);
            }
        }
    }
    match (sent, part) {
        (Message::Sparse(s), Message::Sparse(p)) => {
            s.indices.extend(p.indices.iter().map(|&i| i + offset as u32));
            s.values.extend_from_slice(&p.values);
        }
        (Message::Dense(d), p) => p.add_to(1.0, &mut d.values[offset..offset + p.len()]),
        (sent, p) => {
            // A sparse start and a dense part: carry on densely.
            let mut values = vec![0.0; len];
            sent.add_to(1.0, &mut values);
            p.add_to(1.0, &mut values[offset..offset + p.len()]);
            sent.dense_mut().values = values;
        }
    }
}

/// What one exchange on the reduce-scatter needs of its owner, the
/// [`GradientExchange`](crate::GradientExchange).
pub(crate) struct Units<'a> {
    pub plan: &'a Plan,
    pub recipe: &'a Recipe,
    pub host: &'a mut HostCompression,
    /// The step's random stream (this worker's, unit 0).
    pub key: RngKey,
    pub lr: f32,
    pub loss: Option<f64>,
}

impl Scatter {
    /// The exchange on the reduce-scatter route (see the module docs):
    /// `grad` the whole host gradient, the average into `out`.
    pub(crate) fn exchange(
        &mut self,
        mut x: Units<'_>,
        grad: &[f32],
        out: &mut [f32],
        c: &mut dyn Collective,
        st: &mut ExchangeStats,
    ) -> Result<(), ExchangeError> {
        let (n, me) = (c.world_size(), c.rank());
        if self.cut != Some((n, me)) {
            self.recut(x.plan, x.recipe, n, me);
        }
        self.sum_uncompressed(x.plan, grad, out, c, st)?;
        // 1. Every unit's shards, shard j for worker j.
        let t = Instant::now();
        for &u in &self.units {
            x.host.compensate(x.plan, u, grad, x.lr)?;
        }
        self.compress_shards(&mut x, grad, n, st);
        st.compress_seconds += t.elapsed().as_secs_f64();
        let t = Instant::now();
        c.alltoallv(&self.send, &mut self.recv)?;
        let mut sizes: Vec<u64> = self.send.iter().map(|m| m.len() as u64).collect();
        sizes[me] = 0;
        st.calls.push(CollectiveCall { op: OpKind::Alltoallv, sizes, download: 0, bucket: None });
        st.communicate_seconds += t.elapsed().as_secs_f64();
        // 2–3. This worker's shards: the average, recompressed through e₂.
        let t = Instant::now();
        self.reduce_owned(&x, me)?;
        st.decode_seconds += t.elapsed().as_secs_f64();
        // 4. Every owner's average, decoded by every worker.
        let t = Instant::now();
        c.allgatherv(&self.mine, &mut self.gathered)?;
        let sizes = self.gathered.iter().map(|m| m.len() as u64).collect();
        st.calls.push(CollectiveCall { op: OpKind::Allgatherv, sizes, download: 0, bucket: None });
        st.communicate_seconds += t.elapsed().as_secs_f64();
        let t = Instant::now();
        self.decode_averages(x.plan, n, out)?;
        // e₁ keeps what this worker's shards did not carry.
        for (i, &u) in self.units.iter().enumerate() {
            if x.plan.units[u].has_memory {
                x.host.update(u, &self.sent[i])?;
            }
        }
        for u in 0..x.plan.units.len() {
            x.plan.to_gradient_units(u, out, x.lr);
        }
        st.decode_seconds += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// The units that travel uncompressed: one f32 allreduce, averaged into `out`.
    fn sum_uncompressed(
        &mut self,
        plan: &Plan,
        grad: &[f32],
        out: &mut [f32],
        c: &mut dyn Collective,
        st: &mut ExchangeStats,
    ) -> Result<(), ExchangeError> {
        let t = Instant::now();
        let dense = plan.units.iter().filter(|u| u.route == Route::SumF32);
        self.dense.clear();
        dense.clone().for_each(|u| self.dense.extend_from_slice(&grad[u.offset..u.offset + u.len]));
        if !self.dense.is_empty() {
            c.allreduce_sum_f32(&mut self.dense)?;
            st.calls.push(CollectiveCall::allreduce(
                OpKind::AllreduceSumF32,
                4 * self.dense.len() as u64,
                None,
            ));
            let (mut at, inv_n) = (0, 1.0 / c.world_size() as f32);
            for u in dense {
                let dst = &mut out[u.offset..u.offset + u.len];
                dst.iter_mut().zip(&self.dense[at..]).for_each(|(o, &s)| *o = s * inv_n);
                at += u.len;
            }
        }
        st.communicate_seconds += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Compresses every unit's shards into `send` (message j for worker j)
    /// and puts each unit's shards together in `sent` for e₁.
    fn compress_shards(&mut self, x: &mut Units<'_>, grad: &[f32], n: usize, st: &mut ExchangeStats) {
        self.send.clear();
        for j in 0..n {
            self.mine.clear();
            for (i, &u) in self.units.iter().enumerate() {
                let unit = &x.plan.units[u];
                let r = shard(unit.len, n, j);
                if r.is_empty() {
                    continue;
                }
                let g = &grad[unit.offset..unit.offset + unit.len];
                let ctx = UnitContext { key: shard_key(x.key, unit.id, j, false), loss: x.loss };
                x.host.units[u].compress_part(g, r.clone(), &ctx, &mut self.shard_msg);
                st.count(&self.shard_msg, true);
                codec::encode(&self.shard_msg, unit.id, &mut self.mine);
                // The first shard that is not empty starts at 0.
                put_together(&mut self.sent[i], &self.shard_msg, r.start, unit.len, r.start == 0);
            }
            self.send.push(&self.mine);
        }
    }

    /// Decodes the shards this worker owns from every worker, averages them
    /// and compresses the average through e₂ into `mine`. Errors name the
    /// worker whose message does not decode.
    fn reduce_owned(&mut self, x: &Units<'_>, me: usize) -> Result<(), ExchangeError> {
        let codec_error = |(rank, source)| ExchangeError::Codec { rank, source };
        let mut cursors: Vec<&[u8]> = self.recv.iter().collect();
        let mut firsts: Vec<&[u8]> = Vec::with_capacity(cursors.len());
        self.mine.clear();
        for (o, &u) in self.owned.iter_mut().zip(&self.units) {
            if o.range.is_empty() {
                continue;
            }
            let unit = &x.plan.units[u];
            next_of_each(&mut cursors, &mut firsts)?;
            self.average.resize(o.range.len(), 0.0);
            combine_unit(&firsts, Combine::Gather, Some(unit.id), &mut self.average, &mut self.scratch)
                .map_err(codec_error)?;
            let m = o.memory.compensate(&self.average, 1.0);
            let ctx = UnitContext { key: shard_key(x.key, unit.id, me, true), loss: x.loss };
            o.compressor.compress(m, &ctx, &mut self.shard_msg);
            o.memory.update(&self.shard_msg);
            codec::encode(&self.shard_msg, unit.id, &mut self.mine);
        }
        all_read(&cursors)
    }

    /// Decodes every owner's averages into `out` at their shards.
    fn decode_averages(&self, plan: &Plan, n: usize, out: &mut [f32]) -> Result<(), ExchangeError> {
        let codec_error = |owner, source| ExchangeError::Codec { rank: owner, source };
        for (owner, mut bytes) in self.gathered.iter().enumerate() {
            for &u in &self.units {
                let unit = &plan.units[u];
                let r = shard(unit.len, n, owner);
                if r.is_empty() {
                    continue;
                }
                let (first, rest) = codec::split_first(bytes).map_err(|e| codec_error(owner, e))?;
                let dst = &mut out[unit.offset + r.start..unit.offset + r.end];
                dst.fill(0.0);
                let h = codec::accumulate(first, 1.0, dst).map_err(|e| codec_error(owner, e))?;
                if h.unit != unit.id {
                    return Err(codec_error(owner, CodecError::Invalid("message for another unit")));
                }
                bytes = rest;
            }
            if !bytes.is_empty() {
                return Err(codec_error(owner, CodecError::TrailingBytes(bytes.len())));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
