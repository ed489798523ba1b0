//! Running an exchange's buckets as the gradient becomes ready: one after
//! another on the calling thread, or pipelined through a communication
//! thread.
//!
//! The gradient arrives in stages ([`GradStages`]): all at once after
//! `loss.backward()`, or part by part from a staged backward pass (the
//! output layers first). A bucket is ready when every one of its units is;
//! buckets leave strictly in bucket order. When a group of buckets becomes
//! ready, their units' memories fold in the gradient, their two-phase
//! compressors' scalars are max-reduced in one round (TernGrad's shared
//! scaler), and each bucket is compressed, packed and handed to the wire.
//!
//! Pipelined, a communication thread runs the wire's jobs in the order they
//! were handed over, the same on every worker, so the collectives match
//! across workers exactly as unpipelined. While it moves bucket i, this
//! thread compresses bucket i+1, decodes bucket i−1, or, while stages
//! remain, computes the next stage of the backward pass: that is what hides
//! the wire behind the backward pass. The thread lives for one exchange (a
//! scoped thread: it borrows the collective), which costs tens of
//! microseconds a step.
//!
//! The order of the jobs depends on which buckets become ready together, so
//! every worker must stage its backward pass the same way (the same model
//! code with the same cuts does).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::mpsc;
use std::time::Instant;

use gradcomp_comm::{Collective, CommError};

use super::wire::{self, Payload, ServerState};
use super::{ExchangeStats, Front, Plan, StepArgs, WireCall};
use crate::strategy::{GradStages, StrategyError};

/// This thread's side of an exchange: the plan (shared with the
/// communication thread), the compressors and memories, and the buckets'
/// buffers while they are not on the wire.
pub(super) struct Lanes<'a> {
    pub(super) plan: &'a Plan,
    pub(super) front: &'a mut Front,
    pub(super) payloads: &'a mut [Payload],
    /// Buckets handed to the wire and not landed yet.
    pub(super) in_flight: usize,
}

/// What the wire does, in the order it is handed over.
enum Job {
    /// Max-reduce these scalars (the units of a group of buckets).
    Scalars(Vec<f32>),
    Bucket(usize, Payload),
}

/// A job done, with its collectives' outcome.
enum Done {
    Scalars(Vec<f32>, f64, Result<(), CommError>),
    Bucket(usize, Payload, Result<(), CommError>),
}

fn work(plan: &Plan, job: Job, server: &mut ServerState, c: &mut dyn Collective) -> Done {
    match job {
        Job::Scalars(mut s) => {
            let t = Instant::now();
            let moved = c.allreduce_max_f32(&mut s);
            Done::Scalars(s, t.elapsed().as_secs_f64(), moved)
        }
        Job::Bucket(b, mut p) => {
            let moved = wire::move_bucket(plan, b, &mut p, server, c);
            Done::Bucket(b, p, moved)
        }
    }
}

/// Where the jobs run: here, at once, or on the communication thread.
trait Courier {
    /// Hands a job over; false when the communication thread has stopped
    /// (on an error, which a following `recv` returns).
    fn send(&mut self, job: Job) -> bool;
    /// The next finished job, waiting for it.
    fn recv(&mut self) -> Result<Done, StrategyError>;
    /// The next finished job, if one is.
    fn try_recv(&mut self) -> Option<Done>;
}

/// Runs each job on this thread as it is handed over.
struct Inline<'a> {
    plan: &'a Plan,
    server: &'a mut ServerState,
    c: &'a mut dyn Collective,
    done: VecDeque<Done>,
}

impl Courier for Inline<'_> {
    fn send(&mut self, job: Job) -> bool {
        let done = work(self.plan, job, self.server, self.c);
        self.done.push_back(done);
        true
    }
    fn recv(&mut self) -> Result<Done, StrategyError> {
        self.done.pop_front().ok_or_else(ended)
    }
    fn try_recv(&mut self) -> Option<Done> {
        self.done.pop_front()
    }
}

/// The communication thread's two channels.
struct Threaded {
    to_wire: mpsc::Sender<Job>,
    from_wire: mpsc::Receiver<Done>,
}

impl Courier for Threaded {
    fn send(&mut self, job: Job) -> bool {
        self.to_wire.send(job).is_ok()
    }
    fn recv(&mut self) -> Result<Done, StrategyError> {
        self.from_wire.recv().map_err(|_| ended())
    }
    fn try_recv(&mut self) -> Option<Done> {
        self.from_wire.try_recv().ok()
    }
}

fn ended() -> StrategyError {
    StrategyError::Comm(CommError::Invalid("the communication thread ended without a result".into()))
}

/// Runs the exchange's buckets on this thread.
pub(super) fn run_sequential(
    lanes: Lanes,
    stages: &mut dyn GradStages,
    server: &mut ServerState,
    args: &StepArgs,
    out: &mut [f32],
    c: &mut dyn Collective,
    st: &mut ExchangeStats,
) -> Result<(), StrategyError> {
    let mut courier = Inline { plan: lanes.plan, server, c, done: VecDeque::new() };
    drive(lanes, stages, &mut courier, args, out, st)
}

/// Runs the exchange's buckets through a communication thread (see the
/// module doc). On an error the remaining buckets are not sent; the
/// communication thread finishes the collective it is in (every worker
/// reaches it, or the collective fails by its timeout) and ends, so nothing
/// hangs.
pub(super) fn run_pipelined(
    lanes: Lanes,
    stages: &mut dyn GradStages,
    server: &mut ServerState,
    args: &StepArgs,
    out: &mut [f32],
    c: &mut dyn Collective,
    st: &mut ExchangeStats,
) -> Result<(), StrategyError> {
    let plan = lanes.plan;
    std::thread::scope(|s| {
        let (to_wire, inbox) = mpsc::channel::<Job>();
        let (outbox, from_wire) = mpsc::channel::<Done>();
        s.spawn(move || {
            for job in inbox {
                let done = work(plan, job, server, c);
                let failed = matches!(done, Done::Scalars(_, _, Err(_)) | Done::Bucket(_, _, Err(_)));
                if outbox.send(done).is_err() || failed {
                    break;
                }
            }
        });
        drive(lanes, stages, &mut Threaded { to_wire, from_wire }, args, out, st)
    })
}

/// The exchange's schedule, the same for both couriers: pull a stage, start
/// the buckets it completed, decode what came back, and pull the next stage
/// while the wire works; once the gradient is complete, keep one bucket on
/// the wire while packing the next.
fn drive(
    mut lanes: Lanes,
    stages: &mut dyn GradStages,
    courier: &mut dyn Courier,
    args: &StepArgs,
    out: &mut [f32],
    st: &mut ExchangeStats,
) -> Result<(), StrategyError> {
    let plan = lanes.plan;
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
                st.backward.push(t.elapsed().as_secs_f64());
            }
            plan.count_filled(&ranges, &mut filled);
        }
        let ready = |b: usize| !more || plan.buckets[b].clone().all(|u| filled[u] >= plan.units[u].len);
        let mut end = next;
        while end < buckets && ready(end) {
            end += 1;
        }
        if end == next {
            // Nothing new is complete: decode what the wire finished, then pull on.
            while let Some(done) = courier.try_recv() {
                lanes.land(done, args, out, st)?;
            }
            continue;
        }
        lanes.share_scalars(next..end, stages.grad(), args, courier, out, st)?;
        for b in next..end {
            st.buckets[b].ready_after = st.backward.len() as u32;
            let p = lanes.pack(b, stages.grad(), args, st);
            if !courier.send(Job::Bucket(b, p)) {
                break; // the thread stopped on an error, which `recv` returns
            }
            lanes.in_flight += 1;
            if !more && lanes.in_flight > 1 {
                lanes.land(courier.recv()?, args, out, st)?;
            }
        }
        next = end;
        while let Some(done) = courier.try_recv() {
            lanes.land(done, args, out, st)?;
        }
    }
    // Stages left once every unit is complete fill nothing new, but they
    // run, so misuse (a parameter in two stages) is still an error.
    while more {
        ranges.clear();
        more = stages.next_stage(&mut ranges)?;
    }
    while lanes.in_flight > 0 {
        lanes.land(courier.recv()?, args, out, st)?;
    }
    Ok(())
}

impl Lanes<'_> {
    /// Folds the gradient into the memories of buckets `group`'s units, and
    /// max-reduces their two-phase compressors' scalars in one round
    /// (decoding buckets that come back meanwhile).
    fn share_scalars(
        &mut self,
        group: Range<usize>,
        grad: &[f32],
        args: &StepArgs,
        courier: &mut dyn Courier,
        out: &mut [f32],
        st: &mut ExchangeStats,
    ) -> Result<(), StrategyError> {
        let t = Instant::now();
        let units = self.plan.buckets[group.start].start.min(self.plan.buckets[group.end - 1].start)
            ..self.plan.buckets[group.start].end.max(self.plan.buckets[group.end - 1].end);
        let first = self.front.scalars.len();
        self.front.prepare(self.plan, units, grad, args.lr);
        st.compress_seconds += t.elapsed().as_secs_f64();
        if self.front.scalars.len() == first {
            return Ok(());
        }
        let sent = self.front.scalars[first..].to_vec();
        st.calls.push(WireCall::scalar_round(sent.len()));
        // A stopped thread (on an error) leaves the failed bucket to come
        // back below, where landing it returns the error.
        courier.send(Job::Scalars(sent));
        loop {
            match courier.recv()? {
                Done::Scalars(s, seconds, moved) => {
                    moved?;
                    st.communicate_seconds += seconds;
                    self.front.scalars[first..].copy_from_slice(&s);
                    return Ok(());
                }
                bucket => self.land(bucket, args, out, st)?,
            }
        }
    }

    /// Compresses and packs bucket `b` into its payload, timing it.
    fn pack(&mut self, b: usize, grad: &[f32], args: &StepArgs, st: &mut ExchangeStats) -> Payload {
        let t = Instant::now();
        self.front.compress_bucket(self.plan, b, grad, args, st);
        let mut p = std::mem::take(&mut self.payloads[b]);
        wire::stage(self.plan, &self.front.msgs, grad, b, &mut p);
        st.buckets[b].compress = t.elapsed().as_secs_f64();
        p
    }

    /// Decodes and aggregates a bucket back from the wire, updates its
    /// memories, and keeps the payload for the next step.
    fn land(
        &mut self,
        done: Done,
        args: &StepArgs,
        out: &mut [f32],
        st: &mut ExchangeStats,
    ) -> Result<(), StrategyError> {
        let Done::Bucket(b, p, moved) = done else {
            return Err(StrategyError::Comm(CommError::Invalid(
                "a scalar round came back while none was pending".into(),
            )));
        };
        let t = Instant::now();
        let landed = moved.map_err(StrategyError::from).and_then(|()| {
            p.record(b, st);
            wire::land(self.plan, &self.front.msgs, b, &p, out, args.inv_n)
        });
        self.payloads[b] = p;
        self.in_flight -= 1;
        landed?;
        self.front.settle_bucket(self.plan, b, out, args.lr);
        st.buckets[b].decode = t.elapsed().as_secs_f64();
        Ok(())
    }
}
