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

use crate::error::ExchangeError;
use crate::local::LocalCompression;
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::route::Route;
use crate::state::{StateKey, StateKind};
use crate::stats::ExchangeStats;
use crate::{GradientExchange, StateBuffers, StepInput};
use gradcomp_compress::StateError;

/// Shards are cut at multiples of this many values, so a blockwise
/// quantizer's blocks (32 or 64 values) never straddle two shards.
pub const SHARD_ALIGN: usize = 64;

/// Shard `j` of `n` of a unit of `len` values: the blocks of
/// [`SHARD_ALIGN`] values split as evenly as whole blocks allow, the last
/// block cut at `len`. Shards may be empty when the unit has fewer blocks
/// than workers.
pub fn shard(len: usize, n: usize, j: usize) -> Range<usize> {
    let blocks = len.div_ceil(SHARD_ALIGN);
    let at = |k: usize| (blocks * k / n * SHARD_ALIGN).min(len);
    at(j)..at(j + 1)
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

    /// State keys under `scope`, per scatter unit u, as memories (a
    /// worker's own, zeroed for a worker that joins):
    /// `scatter.memory.<u>.0`, e₂ over the owned shard, and
    /// `scatter.memory.<u>.1`, the cut [N, rank] (zeros: none).
    pub(crate) fn state(&self, scope: &str, out: &mut StateBuffers) {
        let Some((n, rank)) = self.cut else { return };
        for (o, &u) in self.owned.iter().zip(&self.units) {
            let key = |i| StateKey::new(&format!("{scope}scatter."), StateKind::Memory, u, i).to_string();
            out.insert(key(0), o.memory.residual().to_vec());
            out.insert(key(1), vec![n as f32, rank as f32]);
        }
    }

    /// Restores [`Scatter::state`]: each unit's e₂ with the cut it was made
    /// for, re-cut at the next round if that differs. Without the keys (a
    /// checkpoint of another topology, or from before the first round), or
    /// with a zero cut, e₂ starts at zero; a buffer of the wrong length for
    /// its cut is an error.
    pub(crate) fn restore(
        &mut self,
        plan: &Plan,
        recipe: &Recipe,
        scope: &str,
        s: &StateBuffers,
    ) -> Result<(), StateError> {
        self.cut = None;
        self.owned.clear();
        let key = |u, i| StateKey::new(&format!("{scope}scatter."), StateKind::Memory, u, i).to_string();
        let Some(cut) = self.units.first().and_then(|&u| s.get(&key(u, 1))) else { return Ok(()) };
        let (n, rank) = match cut[..] {
            [n, rank] if n >= 1.0 && rank < n => (n as usize, rank as usize),
            _ => return Ok(()),
        };
        self.recut(plan, recipe, n, rank);
        for (o, &u) in self.owned.iter_mut().zip(&self.units) {
            let e2 = s.get(&key(u, 0)).ok_or_else(|| StateError::Missing { buffer: key(u, 0) })?;
            if e2.len() != o.range.len() {
                return Err(StateError::Length { buffer: key(u, 0), expected: o.range.len(), got: e2.len() });
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

impl GradientExchange {
    /// The exchange on the reduce-scatter route (see the module docs):
    /// `grad` the whole host gradient, the average into `out`.
    pub(crate) fn exchange_scattered(
        &mut self,
        grad: &[f32],
        input: &StepInput,
        out: &mut [f32],
        c: &mut dyn Collective,
        st: &mut ExchangeStats,
    ) -> Result<(), ExchangeError> {
        let (n, me) = (c.world_size(), c.rank());
        let inv_n = 1.0 / n as f32;
        let key = RngKey::new(self.seed, me as u32, input.step, 0);
        let ctx =
            |unit, shard, owner| UnitContext { key: shard_key(key, unit, shard, owner), loss: input.loss };
        let (plan, host, sc) = (&self.plan, &mut self.host, &mut self.scatter);
        if sc.cut != Some((n, me)) {
            sc.recut(plan, &self.recipe, n, me);
        }
        // Units that travel uncompressed: one f32 allreduce.
        let t = Instant::now();
        sc.dense.clear();
        for unit in plan.units.iter().filter(|u| u.route == Route::SumF32) {
            sc.dense.extend_from_slice(&grad[unit.offset..unit.offset + unit.len]);
        }
        if !sc.dense.is_empty() {
            c.allreduce_sum_f32(&mut sc.dense)?;
            st.calls.push(CollectiveCall::allreduce(
                OpKind::AllreduceSumF32,
                4 * sc.dense.len() as u64,
                None,
            ));
            let mut at = 0;
            for unit in plan.units.iter().filter(|u| u.route == Route::SumF32) {
                let dst = &mut out[unit.offset..unit.offset + unit.len];
                dst.iter_mut().zip(&sc.dense[at..]).for_each(|(o, &s)| *o = s * inv_n);
                at += unit.len;
            }
        }
        st.communicate_seconds += t.elapsed().as_secs_f64();
        // 1. Every unit's shards, shard j for worker j.
        let t = Instant::now();
        for &u in &sc.units {
            host.compensate(plan, u, grad, input.lr as f32)?;
        }
        sc.send.clear();
        for j in 0..n {
            sc.mine.clear();
            for (i, &u) in sc.units.iter().enumerate() {
                let unit = &plan.units[u];
                let r = shard(unit.len, n, j);
                if r.is_empty() {
                    continue;
                }
                let g = &grad[unit.offset..unit.offset + unit.len];
                host.units[u].compress_part(g, r.clone(), &ctx(unit.id, j, false), &mut sc.shard_msg);
                st.count(&sc.shard_msg, true);
                codec::encode(&sc.shard_msg, unit.id, &mut sc.mine);
                // The first shard that is not empty starts at 0.
                put_together(&mut sc.sent[i], &sc.shard_msg, r.start, unit.len, r.start == 0);
            }
            sc.send.push(&sc.mine);
        }
        st.compress_seconds += t.elapsed().as_secs_f64();
        let t = Instant::now();
        c.alltoallv(&sc.send, &mut sc.recv)?;
        let mut sizes: Vec<u64> = sc.send.iter().map(|m| m.len() as u64).collect();
        sizes[me] = 0;
        st.calls.push(CollectiveCall { op: OpKind::Alltoallv, sizes, download: 0, bucket: None });
        st.communicate_seconds += t.elapsed().as_secs_f64();
        // 2–3. This worker's shards: the average, recompressed through e₂.
        let t = Instant::now();
        let codec_error = |(rank, source)| ExchangeError::Codec { rank, source };
        let mut cursors: Vec<&[u8]> = sc.recv.iter().collect();
        let mut firsts: Vec<&[u8]> = Vec::with_capacity(n);
        sc.mine.clear();
        for (o, &u) in sc.owned.iter_mut().zip(&sc.units) {
            if o.range.is_empty() {
                continue;
            }
            let unit = &plan.units[u];
            firsts.clear();
            for (rank, cursor) in cursors.iter_mut().enumerate() {
                let (first, rest) = codec::split_first(cursor).map_err(|e| codec_error((rank, e)))?;
                firsts.push(first);
                *cursor = rest;
            }
            sc.average.resize(o.range.len(), 0.0);
            combine_unit(&firsts, Combine::Gather, Some(unit.id), &mut sc.average, &mut sc.scratch)
                .map_err(codec_error)?;
            let m = o.memory.compensate(&sc.average, 1.0);
            o.compressor.compress(m, &ctx(unit.id, me, true), &mut sc.shard_msg);
            o.memory.update(&sc.shard_msg);
            codec::encode(&sc.shard_msg, unit.id, &mut sc.mine);
        }
        if let Some((rank, rest)) = cursors.iter().enumerate().find(|(_, c)| !c.is_empty()) {
            return Err(codec_error((rank, CodecError::TrailingBytes(rest.len()))));
        }
        st.decode_seconds += t.elapsed().as_secs_f64();
        // 4. Every owner's average, decoded by every worker.
        let t = Instant::now();
        c.allgatherv(&sc.mine, &mut sc.gathered)?;
        let sizes = sc.gathered.iter().map(|m| m.len() as u64).collect();
        st.calls.push(CollectiveCall { op: OpKind::Allgatherv, sizes, download: 0, bucket: None });
        st.communicate_seconds += t.elapsed().as_secs_f64();
        let t = Instant::now();
        for (owner, mut bytes) in sc.gathered.iter().enumerate() {
            for &u in &sc.units {
                let unit = &plan.units[u];
                let r = shard(unit.len, n, owner);
                if r.is_empty() {
                    continue;
                }
                let (first, rest) = codec::split_first(bytes).map_err(|e| codec_error((owner, e)))?;
                let dst = &mut out[unit.offset + r.start..unit.offset + r.end];
                dst.fill(0.0);
                let h = codec::accumulate(first, 1.0, dst).map_err(|e| codec_error((owner, e)))?;
                if h.unit != unit.id {
                    return Err(codec_error((owner, CodecError::Invalid("message for another unit"))));
                }
                bytes = rest;
            }
            if !bytes.is_empty() {
                return Err(codec_error((owner, CodecError::TrailingBytes(bytes.len()))));
            }
        }
        // e₁ keeps what this worker's shards did not carry.
        for (i, &u) in sc.units.iter().enumerate() {
            if plan.units[u].has_memory {
                host.update(u, &sc.sent[i])?;
            }
        }
        for u in 0..plan.units.len() {
            plan.to_gradient_units(u, out, input.lr as f32);
        }
        st.decode_seconds += t.elapsed().as_secs_f64();
        Ok(())
    }
}

/// Bytes worker `rank` of `n` moves in one reduce-scatter of units of
/// `lens` values (ALGORITHMS.md §7), as the byte meter counts them, where
/// `encoded(l)` is the encoding of a compressed run of l values (header
/// included; exact for a fixed-rate quantizer such as fp4 or 8-bit, where
/// it depends on l alone): (sent, received), over the alltoallv and the
/// allgatherv. With s_j the size of shard j:
///
///   sent = Σ_u Σ_{j ≠ rank} encoded(s_j) + Σ_u encoded(s_rank)
///   received = Σ_u (N − 1)·encoded(s_rank) + Σ_u Σ_{j ≠ rank} encoded(s_j)
///
/// Empty shards send nothing.
pub fn bytes(lens: &[usize], n: usize, rank: usize, encoded: impl Fn(usize) -> u64) -> (u64, u64) {
    let (mut sent, mut received) = (0, 0);
    for &len in lens {
        let enc = |j| {
            let s = shard(len, n, j).len();
            if s == 0 {
                0
            } else {
                encoded(s)
            }
        };
        let others: u64 = (0..n).filter(|&j| j != rank).map(enc).sum();
        let own = enc(rank);
        sent += others + own;
        received += (n as u64 - 1) * own + others;
    }
    (sent, received)
}

#[cfg(test)]
mod tests {
    use gradcomp_comm::{InProcessGroup, Metered};
    use gradcomp_compress::CompressorConfig;

    use super::*;
    use crate::config::{DataParallelConfig, Granularity, Topology};
    use crate::grad_stages::CompleteGrad;
    use crate::layout::GradientLayout;
    use crate::Gradient;

    /// Tensors of 1200, 300, 70 and 5 values: some cut into as many shards
    /// as workers, the small ones into fewer (empty shards).
    fn layout() -> GradientLayout {
        GradientLayout::new([
            ("a".to_string(), vec![40, 30]),
            ("b".to_string(), vec![300]),
            ("c".to_string(), vec![70]),
            ("d".to_string(), vec![5]),
        ])
    }

    fn exchange(name: &str, workers: usize) -> GradientExchange {
        let cfg = DataParallelConfig::new(CompressorConfig::named(name).unwrap())
            .with_granularity(Granularity::Layer)
            .with_topology(Topology::ReduceScatter);
        cfg.validate().unwrap();
        GradientExchange::new(&layout(), &cfg, workers, 11)
    }

    /// Worker r's gradient, the same every step.
    fn grad(r: usize) -> Vec<f32> {
        (0..1575).map(|i| ((i * 7 + r * 13) % 29) as f32 * 0.01 - 0.14 + (i as f32 * 0.001).sin()).collect()
    }

    fn mean(workers: usize) -> Vec<f32> {
        let mut m = vec![0.0f32; 1575];
        for r in 0..workers {
            m.iter_mut().zip(grad(r)).for_each(|(m, g)| *m += g / workers as f32);
        }
        m
    }

    fn step(x: &mut GradientExchange, t: u64, c: &mut dyn Collective) -> Vec<f32> {
        let g = grad(c.rank());
        let mut out = vec![0.0; g.len()];
        let input = StepInput { step: t, lr: 0.1, loss: None, measure: false };
        x.exchange(Gradient::Host(&mut CompleteGrad(&g)), &input, &mut out, c).unwrap();
        out
    }

    fn dist(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt()
    }

    #[test]
    fn shards_cover_the_unit_in_aligned_runs_of_about_equal_size() {
        for (len, n) in [(1200, 4), (300, 8), (5, 3), (64 * 10 + 1, 3), (0, 2), (4096, 1024)] {
            let shards: Vec<Range<usize>> = (0..n).map(|j| shard(len, n, j)).collect();
            assert_eq!(shards[0].start, 0);
            assert_eq!(shards[n - 1].end, len);
            let blocks = len.div_ceil(SHARD_ALIGN);
            for (j, s) in shards.iter().enumerate() {
                if j > 0 {
                    assert_eq!(s.start, shards[j - 1].end, "{len}/{n}: contiguous");
                }
                assert!(s.start % SHARD_ALIGN == 0 || s.start == len, "{len}/{n}: aligned");
                let whole = s.len().div_ceil(SHARD_ALIGN);
                assert!(whole <= blocks.div_ceil(n), "{len}/{n}: shard {j} of {whole} blocks");
            }
        }
    }

    /// Four workers: every worker ends with the same bits; for the
    /// quantizers one exchange is off the true mean by the rounding, and the
    /// two error feedbacks carry what each rounding dropped, so the mean of
    /// 16 exchanges of the same gradients comes within a fraction of that.
    #[test]
    fn every_worker_decodes_the_same_average_and_the_memories_carry_what_rounding_dropped() {
        for name in ["fp4", "eightbit", "topk"] {
            let outs = InProcessGroup::new(4)
                .run(|mut c| {
                    let mut x = exchange(name, 4);
                    (0..16).map(|t| step(&mut x, t, &mut c)).collect::<Vec<_>>()
                })
                .unwrap();
            let outs: Vec<Vec<Vec<f32>>> = outs.into_iter().map(Result::unwrap).collect();
            for w in 1..4 {
                let same = outs[w]
                    .iter()
                    .zip(&outs[0])
                    .all(|(a, b)| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits()));
                assert!(same, "{name}: worker {w} differs from worker 0");
            }
            if name == "topk" {
                continue; // 1% a round: 16 rounds carry too little to compare
            }
            let want = mean(4);
            let first = dist(&outs[0][0], &want);
            let mut avg = vec![0.0f32; want.len()];
            for o in &outs[0] {
                avg.iter_mut().zip(o).for_each(|(a, v)| *a += v / 16.0);
            }
            let carried = dist(&avg, &want);
            assert!(
                first > 0.0 && carried < 0.25 * first,
                "{name}: one exchange off by {first}, 16 by {carried}"
            );
        }
    }

    /// What the meter counts for one exchange is [`bytes`] with fp4's
    /// encoding of each shard; and at N = 8 a worker receives less than 0.3×
    /// what the allgather of the same messages brings it.
    #[test]
    fn the_bytes_counted_are_the_formulas() {
        let lens = [1200, 300, 70, 5];
        let encoded = |l: usize| {
            let mut m = Message::default();
            let ctx = UnitContext::default();
            CompressorConfig::named("fp4").unwrap().build().compress(&vec![0.5; l], &ctx, &mut m);
            codec::encoded_len(&m) as u64
        };
        for n in [2, 3, 4] {
            let counted = InProcessGroup::new(n)
                .run(|c| {
                    let mut c = Metered::new(c);
                    let mut x = exchange("fp4", n);
                    step(&mut x, 0, &mut c);
                    let s = c.meter_mut().take_step();
                    let (a, g) = (s.get(OpKind::Alltoallv), s.get(OpKind::Allgatherv));
                    (c.rank(), a.sent + g.sent, a.received + g.received)
                })
                .unwrap();
            for r in counted {
                let (rank, sent, received) = r.unwrap();
                assert_eq!((sent, received), bytes(&lens, n, rank, encoded), "N {n}, worker {rank}");
            }
        }
        let whole: u64 = lens.iter().map(|&l| encoded(l)).sum();
        let (_, received) = bytes(&lens, 8, 0, encoded);
        let ratio = received as f64 / (7 * whole) as f64;
        assert!(ratio < 0.3, "reduce-scatter / allgather at N = 8: {ratio}");
    }

    /// A checkpoint taken between exchanges restores to the same next
    /// exchanges, bit for bit; restored at another cut (N 4 → 2), e₂ keeps
    /// the positions the worker still owns and drops the others.
    #[test]
    fn a_resume_continues_bit_for_bit_and_a_new_cut_keeps_what_is_still_owned() {
        let runs = InProcessGroup::new(4)
            .run(|mut c| {
                let mut x = exchange("fp4", 4);
                let whole: Vec<Vec<f32>> = (0..5).map(|t| step(&mut x, t, &mut c)).collect();
                let mut y = exchange("fp4", 4);
                (0..3).for_each(|t| drop(step(&mut y, t, &mut c)));
                let mut s = StateBuffers::new();
                y.state("", &mut s).unwrap();
                let mut z = exchange("fp4", 4);
                z.restore("", &s).unwrap();
                let mut resumed: Vec<Vec<f32>> = whole[..3].to_vec();
                resumed.extend((3..5).map(|t| step(&mut z, t, &mut c)));
                (whole == resumed, s)
            })
            .unwrap();
        let states: Vec<StateBuffers> = runs
            .into_iter()
            .map(|r| {
                let (same, s) = r.unwrap();
                assert!(same, "resumed exchanges differ");
                s
            })
            .collect();
        // Worker 1 of 4 owned values 256..576 of unit 0 (1200 values, 19
        // blocks of 64: blocks 4..9); as worker 0 of 2 it owns 0..576.
        let key = |i| StateKey::new("scatter.", StateKind::Memory, 0, i).to_string();
        assert_eq!(states[1][&key(1)], vec![4.0, 1.0]);
        let old = states[1][&key(0)].clone();
        assert_eq!(old.len(), 320);
        assert!(old.iter().any(|&v| v != 0.0), "fp4 leaves a rounding error");
        let mut x = exchange("fp4", 4);
        x.restore("", &states[1]).unwrap();
        x.scatter.recut(&x.plan, &x.recipe, 2, 0);
        let mut s = StateBuffers::new();
        x.state("", &mut s).unwrap();
        let now = &s[&key(0)];
        assert_eq!((now.len(), s[&key(1)].clone()), (576, vec![2.0, 0.0]));
        assert!(now[..256].iter().all(|&v| v == 0.0), "worker 0's old positions start from zero");
        assert_eq!(&now[256..576], &old[..], "the positions still owned keep their memory");
        // A buffer of the wrong length for its cut is refused, naming it.
        let mut bad = states[1].clone();
        bad.get_mut(&key(0)).unwrap().pop();
        let e = exchange("fp4", 4).restore("", &bad).unwrap_err().to_string();
        assert!(e.contains("scatter.memory.0.0"), "{e}");
    }
}
