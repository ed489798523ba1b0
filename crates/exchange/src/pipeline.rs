//! The exchange's one pipeline, for every exchange: a whole gradient or one
//! arriving in stages ([`GradStages`]), compressed on the host or on a GPU
//! ([`GradientSide`]), its collectives on this thread or a
//! communication thread ([`Wire`]).
//!
//! A bucket is ready when every one of its units is; buckets leave strictly
//! in bucket order. When a group of buckets becomes ready, their units'
//! memories fold in the gradient, the exchange rounds run (each a small
//! allreduce of what the units contribute; TernGrad's shared scaler is
//! one), and each bucket is compressed, packed and handed to the wire. While
//! the wire moves bucket i, this thread compresses bucket i+1, decodes
//! bucket i−1, or, while stages remain, computes the next stage of the
//! backward pass: that is what hides the wire behind the backward pass.
//!
//! The order of the collectives depends on which buckets become ready
//! together, so every worker must stage its backward pass the same way (the
//! same model code with the same cuts does).

use std::ops::Range;
use std::time::Instant;

use gradcomp_comm::{CollectiveCall, CommError, OpKind};
use gradcomp_compress::{Message, RngKey, UnitContext};

use super::bucket::Bucket;
use super::exchange_rounds::RoundValues;
use super::gradient_side::{GradientSide, ReduceOp, REDUCE_OPS};
use super::plan::Plan;
use super::route::Route;
use super::stats::ExchangeStats;
use super::wire::{Wire, WireDone, WireTask};
use crate::config::Topology;
use crate::error::ExchangeError;
use crate::grad_stages::GradStages;

/// What every bucket of one step needs to know.
pub(crate) struct BucketArgs {
    pub loss: Option<f64>,
    /// Seeds the units' randomness, with each unit's id.
    pub key: RngKey,
    pub lr: f32,
    pub measure: bool,
    /// 1/N, the weight of each worker's message in the average.
    pub inv_n: f32,
    /// N.
    pub workers: usize,
}

impl BucketArgs {
    /// The context of the unit with id `unit`: its random stream (`key`
    /// with the unit's id), and the loss.
    fn unit_context(key: RngKey, loss: Option<f64>, unit: u32) -> UnitContext {
        UnitContext { key: RngKey { unit, ..key }, loss }
    }
}

/// One exchange's working state while the pipeline runs.
pub(crate) struct Pipeline<'a> {
    pub plan: &'a Plan,
    pub local: &'a mut dyn GradientSide,
    pub msgs: &'a mut [Message],
    /// The buckets, each away while it is on the wire.
    pub buckets: &'a mut [Option<Bucket>],
    pub rounds: &'a mut RoundValues,
    /// Per unit, on a measured step: ‖x − C(x)‖², ‖x‖², TernGrad's bound ratio.
    pub measured: &'a mut [Option<[f64; 3]>],
    pub args: BucketArgs,
    /// Buckets handed to the wire and not back yet.
    pub in_flight: usize,
}

/// Runs the exchange: pull a stage, start the buckets it completed, decode
/// what came back, and pull the next stage while the wire works; once the
/// gradient is complete, keep one bucket on the wire while packing the next.
/// The averaged gradient lands in `out` (zeroed by the caller).
pub(crate) fn drive(
    pipe: &mut Pipeline<'_>,
    stages: &mut dyn GradStages,
    wire: &mut dyn Wire,
    out: &mut [f32],
    st: &mut ExchangeStats,
) -> Result<(), ExchangeError> {
    let plan = pipe.plan;
    let buckets = plan.buckets.len();
    let mut filled = vec![0usize; plan.units.len()];
    let mut ranges: Vec<Range<usize>> = Vec::new();
    let (mut next, mut more) = (0, true);
    while next < buckets {
        if more {
            ranges.clear();
            let t = Instant::now();
            more = stages.next_stage(&mut ranges)?;
            if more {
                st.backward_seconds.push(t.elapsed().as_secs_f64());
            }
            plan.count_filled(&ranges, &mut filled);
        }
        let ready = |b: usize| !more || plan.buckets[b].clone().all(|u| filled[u] >= plan.units[u].len);
        let mut end = next;
        while end < buckets && ready(end) {
            end += 1;
        }
        if end > next {
            pipe.prepare(next..end, stages.grad(), wire, out, st)?;
            for b in next..end {
                st.buckets[b].ready_after = st.backward_seconds.len() as u32;
                let bucket = pipe.pack(b, stages.grad(), st)?;
                if !wire.send(WireTask::Bucket(bucket)) {
                    break; // the thread stopped on an error, which `recv` returns
                }
                pipe.in_flight += 1;
                if !more && pipe.in_flight > 1 {
                    pipe.finish_bucket(wire.recv()?, out, st)?;
                }
            }
            next = end;
        }
        // Decode what the wire finished, then pull on.
        while let Some(done) = wire.try_recv() {
            pipe.finish_bucket(done, out, st)?;
        }
    }
    // Stages left once every unit is complete fill nothing new, but they
    // run, so misuse (a parameter in two stages) is still an error.
    while more {
        ranges.clear();
        more = stages.next_stage(&mut ranges)?;
    }
    while pipe.in_flight > 0 {
        pipe.finish_bucket(wire.recv()?, out, st)?;
    }
    Ok(())
}

impl Pipeline<'_> {
    /// Folds the gradient into the memories of buckets `group`'s units and
    /// runs their exchange rounds (decoding buckets that come back meanwhile).
    fn prepare(
        &mut self,
        group: Range<usize>,
        grad: &[f32],
        wire: &mut dyn Wire,
        out: &mut [f32],
        st: &mut ExchangeStats,
    ) -> Result<(), ExchangeError> {
        let plan = self.plan;
        let units = plan.units_of(group);
        let t = Instant::now();
        for u in units.clone() {
            self.local.compensate(plan, u, grad, self.args.lr)?;
        }
        st.compress_seconds += t.elapsed().as_secs_f64();
        let (key, loss) = (self.args.key, self.args.loss);
        let ctx = |u: usize| BucketArgs::unit_context(key, loss, plan.units[u].id);
        for round in 0..self.local.rounds() {
            let t = Instant::now();
            let agreed = self.rounds.gather(self.local, plan, units.clone(), round, grad, &ctx)?;
            // For PowerSGD the rounds are what travels.
            st.wire_bytes += 4 * agreed as u64;
            st.compress_seconds += t.elapsed().as_secs_f64();
            for op in REDUCE_OPS {
                if let Some(values) = self.rounds.take(op) {
                    self.run_exchange_round(round, op, values, wire, out, st)?;
                }
            }
        }
        Ok(())
    }

    /// One collective of exchange round `round`; buckets that come back
    /// before it are decoded.
    fn run_exchange_round(
        &mut self,
        round: usize,
        op: ReduceOp,
        values: Vec<f32>,
        wire: &mut dyn Wire,
        out: &mut [f32],
        st: &mut ExchangeStats,
    ) -> Result<(), ExchangeError> {
        let kind = match op {
            ReduceOp::Max => OpKind::AllreduceMaxF32,
            ReduceOp::Sum => OpKind::AllreduceSumF32,
        };
        st.calls.push(CollectiveCall::allreduce(kind, 4 * values.len() as u64, None));
        // A stopped thread (on an error) leaves the failed bucket to come
        // back below, where finishing it returns the error.
        wire.send(WireTask::Round(op, values));
        loop {
            match wire.recv()? {
                WireDone::Round(op, values, seconds, done) => {
                    done?;
                    st.communicate_seconds += seconds;
                    self.rounds.hand_back(op, values, self.local, round, self.args.workers);
                    return Ok(());
                }
                bucket => self.finish_bucket(bucket, out, st)?,
            }
        }
    }

    /// Compresses bucket `b`'s units (`args.key` with the unit's id seeds
    /// its randomness) and packs their messages, timing it.
    fn pack(&mut self, b: usize, grad: &[f32], st: &mut ExchangeStats) -> Result<Bucket, ExchangeError> {
        let (plan, args) = (self.plan, &self.args);
        let t = Instant::now();
        for u in plan.buckets[b].clone() {
            if plan.units[u].uncompressed {
                // The server decodes what it is sent: uncompressed units go as dense messages.
                if plan.topology == Topology::ParameterServer {
                    let m = self.msgs[u].dense_mut();
                    m.values.clear();
                    m.values.extend_from_slice(self.local.uncompressed(plan, u, grad));
                }
                continue;
            }
            let ctx = BucketArgs::unit_context(args.key, args.loss, plan.units[u].id);
            self.measured[u] = self.local.compress(plan, u, grad, &ctx, &mut self.msgs[u], args.measure)?;
            st.count(&self.msgs[u], plan.units[u].route != Route::InRounds);
        }
        let mut bucket =
            self.buckets[b].take().ok_or_else(|| usage("a bucket was packed twice in one step"))?;
        bucket.pack(plan, self.msgs, &*self.local, grad, args.inv_n);
        st.buckets[b].compress_seconds = t.elapsed().as_secs_f64();
        Ok(bucket)
    }

    /// Decodes and aggregates a bucket back from the wire, updates its
    /// memories, and keeps its buffers for the next step.
    fn finish_bucket(
        &mut self,
        done: WireDone,
        out: &mut [f32],
        st: &mut ExchangeStats,
    ) -> Result<(), ExchangeError> {
        let WireDone::Bucket(mut bucket, moved) = done else {
            return Err(ExchangeError::Comm(CommError::Invalid(
                "an exchange round came back while none was pending".into(),
            )));
        };
        let (plan, b) = (self.plan, bucket.index);
        let t = Instant::now();
        let aggregated = moved.map_err(ExchangeError::from).and_then(|()| {
            bucket.record(st);
            bucket.aggregate(plan, self.msgs, out, self.args.inv_n)
        });
        self.buckets[b] = Some(bucket);
        self.in_flight -= 1;
        aggregated?;
        for u in plan.buckets[b].clone() {
            if plan.units[u].has_memory {
                self.local.update(u, &self.msgs[u])?;
            }
            plan.to_gradient_units(u, out, self.args.lr);
        }
        st.buckets[b].decode_seconds = t.elapsed().as_secs_f64();
        Ok(())
    }
}

fn usage(what: &str) -> ExchangeError {
    ExchangeError::Usage(what.to_string())
}
