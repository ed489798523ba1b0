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

use std::time::Duration;

use crate::op::OpKind;

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
