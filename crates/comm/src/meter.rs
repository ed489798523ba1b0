//! Exact byte accounting per rank, per operation kind, per step.
//!
//! Bytes are logical message sizes: for an allreduce of M bytes a rank
//! "sends" and "receives" M; for an allgatherv it sends its message and
//! receives everyone else's; for a broadcast the root sends M and every
//! other rank receives M; for the parameter server a worker sends its upload
//! and receives the download, and the server receives every upload and sends
//! the download to every worker. These are the encoded lengths the codec
//! produced; what a backend moves internally (a ring's 2(N−1)/N·M per rank)
//! is the network model's business.

use std::time::{Duration, Instant};

use crate::collective::{Aggregate, Collective, CommError, Gathered, ServerPlacement};
use crate::op::{OpKind, Reduction};

/// Counts for one operation kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpBytes {
    pub calls: u64,
    pub sent: u64,
    pub received: u64,
    /// Wall-clock seconds spent inside the operation (including waiting for peers).
    pub seconds: f64,
}

impl OpBytes {
    fn add(&mut self, o: &OpBytes) {
        self.calls += o.calls;
        self.sent += o.sent;
        self.received += o.received;
        self.seconds += o.seconds;
    }
}

/// Counts for every operation kind over some span (a step, or the run).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepBytes {
    ops: [OpBytes; OpKind::ALL.len()],
}

impl StepBytes {
    pub fn get(&self, op: OpKind) -> &OpBytes {
        &self.ops[op as usize]
    }

    pub fn sent(&self) -> u64 {
        self.ops.iter().map(|o| o.sent).sum()
    }

    pub fn received(&self) -> u64 {
        self.ops.iter().map(|o| o.received).sum()
    }

    pub fn seconds(&self) -> f64 {
        self.ops.iter().map(|o| o.seconds).sum()
    }

    /// The kinds with at least one call, and their counts.
    pub fn iter(&self) -> impl Iterator<Item = (OpKind, &OpBytes)> {
        OpKind::ALL.iter().map(|&k| (k, &self.ops[k as usize])).filter(|(_, o)| o.calls > 0)
    }

    pub fn add(&mut self, other: &StepBytes) {
        for (a, b) in self.ops.iter_mut().zip(&other.ops) {
            a.add(b);
        }
    }
}

/// One rank's meter: the current step and the run's total.
#[derive(Clone, Debug, Default)]
pub struct ByteMeter {
    step: StepBytes,
    total: StepBytes,
}

impl ByteMeter {
    pub fn record(&mut self, op: OpKind, sent: usize, received: usize, elapsed: Duration) {
        let o = OpBytes {
            calls: 1,
            sent: sent as u64,
            received: received as u64,
            seconds: elapsed.as_secs_f64(),
        };
        self.step.ops[op as usize].add(&o);
        self.total.ops[op as usize].add(&o);
    }

    /// Counts since the last [`ByteMeter::take_step`].
    pub fn step(&self) -> &StepBytes {
        &self.step
    }

    /// Returns the current step's counts and starts a new step.
    pub fn take_step(&mut self) -> StepBytes {
        std::mem::take(&mut self.step)
    }

    /// Puts back counts taken with [`ByteMeter::take_step`] (to exclude an
    /// operation in the middle of a step from the step's counts).
    pub fn restore_step(&mut self, counts: StepBytes) {
        self.step.add(&counts);
    }

    pub fn total(&self) -> &StepBytes {
        &self.total
    }
}

/// Any [`Collective`] with a [`ByteMeter`] around it: every operation that
/// returns `Ok` is counted (calls, logical bytes sent and received, seconds
/// inside the call), whatever the backend. Backends move bytes and never
/// count them; this is the one place that does.
///
/// A parameter server's round trip counts as two kinds, as the network
/// model prices it: [`OpKind::PsPush`] (the uploads, and the whole round
/// trip's seconds) and [`OpKind::PsPull`] (the download, no seconds of its own).
pub struct Metered<C> {
    inner: C,
    meter: ByteMeter,
}

impl<C: Collective> Metered<C> {
    pub fn new(inner: C) -> Self {
        Metered { inner, meter: ByteMeter::default() }
    }

    pub fn meter(&self) -> &ByteMeter {
        &self.meter
    }

    pub fn meter_mut(&mut self) -> &mut ByteMeter {
        &mut self.meter
    }

    /// The collective itself, for operations that are not to be counted
    /// (a handle's own control traffic, which is not the method's).
    pub fn unmetered(&mut self) -> &mut C {
        &mut self.inner
    }

    pub fn into_inner(self) -> C {
        self.inner
    }
}

impl<C: Collective> Collective for Metered<C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn allreduce(&mut self, r: Reduction<'_>) -> Result<(), CommError> {
        let (kind, bytes) = (r.kind(), r.bytes());
        let start = Instant::now();
        self.inner.allreduce(r)?;
        self.meter.record(kind, bytes, bytes, start.elapsed());
        Ok(())
    }

    fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError> {
        let start = Instant::now();
        self.inner.allgatherv(send, recv)?;
        let others = recv.total_bytes() - send.len();
        self.meter.record(OpKind::Allgatherv, send.len(), others, start.elapsed());
        Ok(())
    }

    /// Counts what crossed a link: every message but the one to itself.
    fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError> {
        let start = Instant::now();
        self.inner.alltoallv(send, recv)?;
        let me = self.rank();
        let sent = send.total_bytes() - send.get(me).len();
        let received = recv.total_bytes() - recv.get(me).len();
        self.meter.record(OpKind::Alltoallv, sent, received, start.elapsed());
        Ok(())
    }

    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let start = Instant::now();
        self.inner.broadcast(buf, root)?;
        let (sent, received) = if self.rank() == root { (buf.len(), 0) } else { (0, buf.len()) };
        self.meter.record(OpKind::Broadcast, sent, received, start.elapsed());
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        let start = Instant::now();
        self.inner.barrier()?;
        self.meter.record(OpKind::Barrier, 0, 0, start.elapsed());
        Ok(())
    }

    /// The inner collective's second channel, not metered here: its owner
    /// meters it (a round thread's bytes are the step's that merges it).
    fn duplicate(&mut self) -> Result<Option<Box<dyn Collective>>, CommError> {
        self.inner.duplicate()
    }

    fn push_pull(
        &mut self,
        placement: ServerPlacement,
        upload: &[u8],
        aggregate: &mut Aggregate<'_>,
        download: &mut Vec<u8>,
    ) -> Result<(), CommError> {
        let start = Instant::now();
        // The uploads reach the server's aggregation only: count them there.
        let mut uploads = 0;
        let mut counted = |ups: &Gathered, down: &mut Vec<u8>| {
            uploads = ups.total_bytes();
            aggregate(ups, down)
        };
        self.inner.push_pull(placement, upload, &mut counted, download)?;
        let (n, server) = (self.world_size(), placement.server_rank(self.world_size()));
        let seconds = start.elapsed();
        if self.rank() == server {
            let own = if placement == ServerPlacement::Dedicated { 0 } else { upload.len() };
            self.meter.record(OpKind::PsPush, 0, uploads - own, seconds);
            self.meter.record(OpKind::PsPull, download.len() * (n - 1), 0, Duration::ZERO);
        } else {
            self.meter.record(OpKind::PsPush, upload.len(), 0, seconds);
            self.meter.record(OpKind::PsPull, 0, download.len(), Duration::ZERO);
        }
        Ok(())
    }

    fn abandon(&mut self, code: i32) {
        self.inner.abandon(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_totals() {
        let mut m = ByteMeter::default();
        m.record(OpKind::Allgatherv, 10, 30, Duration::from_millis(2));
        m.record(OpKind::Allgatherv, 5, 15, Duration::ZERO);
        m.record(OpKind::AllreduceMaxF32, 4, 4, Duration::ZERO);
        let s = m.take_step();
        assert_eq!(s.get(OpKind::Allgatherv).calls, 2);
        assert_eq!((s.sent(), s.received()), (19, 49));
        assert_eq!(s.iter().count(), 2);
        m.record(OpKind::Barrier, 0, 0, Duration::ZERO);
        assert_eq!(m.step().sent(), 0);
        assert_eq!(m.total().sent(), 19);
        assert_eq!(m.total().get(OpKind::Barrier).calls, 1);
    }
}
