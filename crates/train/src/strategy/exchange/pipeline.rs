//! Running an exchange's buckets: one after another on the calling thread,
//! or pipelined through a communication thread.
//!
//! Pipelined, this thread compresses and packs bucket i+1, hands it to the
//! communication thread, then decodes bucket i−1 while the communication
//! thread moves bucket i: the wire time of all but the last bucket hides
//! behind compression and decoding. The communication thread calls the
//! buckets' collectives in bucket order, the order every worker uses, so
//! the calls match across workers exactly as unpipelined. The thread lives
//! for one exchange (a scoped thread: it borrows the collective), which
//! costs tens of microseconds a step.
//!
//! burn's `backward` returns every gradient at once, with no per-parameter
//! hook, so the first bucket cannot leave before the backward pass ends as
//! it does in DDP; what overlaps is compression, the wire and decoding.

use std::sync::mpsc;
use std::time::Instant;

use gradcomp_comm::{Collective, CommError};

use super::wire::{self, Payload, ServerState};
use super::{ExchangeStats, Front, Plan, StepArgs};
use crate::strategy::StrategyError;

/// This thread's side of an exchange: the plan (shared with the
/// communication thread), the compressors and memories, and the buckets'
/// buffers while they are not on the wire.
pub(super) struct Lanes<'a> {
    pub(super) plan: &'a Plan,
    pub(super) front: &'a mut Front,
    pub(super) payloads: &'a mut [Payload],
}

impl Lanes<'_> {
    /// Compresses and packs bucket `b` into its payload, timing it.
    fn pack(&mut self, b: usize, args: &StepArgs, st: &mut ExchangeStats) -> Payload {
        let t = Instant::now();
        self.front.compress_bucket(self.plan, b, args, st);
        let mut p = std::mem::take(&mut self.payloads[b]);
        wire::stage(self.plan, &self.front.msgs, args.grad, b, &mut p);
        st.buckets[b].compress = t.elapsed().as_secs_f64();
        p
    }

    /// Decodes and aggregates bucket `b` from `p` (its collectives' outcome
    /// `moved`), updates its memories, and keeps the payload for the next step.
    fn unpack(
        &mut self,
        b: usize,
        p: Payload,
        moved: Result<(), CommError>,
        args: &StepArgs,
        out: &mut [f32],
        st: &mut ExchangeStats,
    ) -> Result<(), StrategyError> {
        let t = Instant::now();
        let landed = moved.map_err(StrategyError::from).and_then(|()| {
            p.record(b, st);
            wire::land(self.plan, &self.front.msgs, b, &p, out, args.inv_n)
        });
        self.payloads[b] = p;
        landed?;
        self.front.settle_bucket(self.plan, b, out, args.lr);
        st.buckets[b].decode = t.elapsed().as_secs_f64();
        Ok(())
    }
}

/// Every bucket in turn on this thread.
pub(super) fn run_sequential(
    mut lanes: Lanes,
    server: &mut ServerState,
    args: &StepArgs,
    out: &mut [f32],
    c: &mut dyn Collective,
    st: &mut ExchangeStats,
) -> Result<(), StrategyError> {
    for b in 0..lanes.plan.buckets.len() {
        let mut p = lanes.pack(b, args, st);
        let moved = wire::move_bucket(lanes.plan, b, &mut p, server, c);
        lanes.unpack(b, p, moved, args, out, st)?;
    }
    Ok(())
}

/// A bucket back from the communication thread, with its collectives' outcome.
type Moved = (usize, Payload, Result<(), CommError>);

/// The buckets through a communication thread (see the module doc). On an
/// error the remaining buckets are not sent; the communication thread
/// finishes the collective it is in (every worker reaches it, or the
/// collective fails by its timeout) and ends, so nothing hangs.
pub(super) fn run_pipelined(
    mut lanes: Lanes,
    server: &mut ServerState,
    args: &StepArgs,
    out: &mut [f32],
    c: &mut dyn Collective,
    st: &mut ExchangeStats,
) -> Result<(), StrategyError> {
    let plan = lanes.plan;
    std::thread::scope(|s| {
        let (to_wire, inbox) = mpsc::channel::<(usize, Payload)>();
        let (outbox, from_wire) = mpsc::channel::<Moved>();
        s.spawn(move || {
            for (b, mut p) in inbox {
                let moved = wire::move_bucket(plan, b, &mut p, server, c);
                let failed = moved.is_err();
                if outbox.send((b, p, moved)).is_err() || failed {
                    break;
                }
            }
        });
        let receive = |lanes: &mut Lanes, st: &mut ExchangeStats, out: &mut [f32]| {
            let (b, p, moved) = from_wire.recv().map_err(|_| {
                StrategyError::Comm(CommError::Invalid(
                    "the communication thread ended without a result".into(),
                ))
            })?;
            lanes.unpack(b, p, moved, args, out, st)
        };
        let mut in_flight = 0;
        for b in 0..plan.buckets.len() {
            let p = lanes.pack(b, args, st);
            if to_wire.send((b, p)).is_err() {
                break; // the thread stopped on an error, which `receive` returns
            }
            in_flight += 1;
            if b > 0 {
                receive(&mut lanes, st, out)?;
                in_flight -= 1;
            }
        }
        drop(to_wire);
        for _ in 0..in_flight {
            receive(&mut lanes, st, out)?;
        }
        Ok(())
    })
}
