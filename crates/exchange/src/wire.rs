//! Where an exchange's collectives run: on the calling thread as they are
//! handed over ([`SameThread`]), or on a communication thread ([`CommThread`])
//! that runs them in the order they were handed over, the same on every
//! worker, so the collectives match across workers exactly as unpipelined.
//! The thread lives for one exchange (a scoped thread: it borrows the
//! collective), which costs tens of microseconds a step.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::time::Instant;

use gradcomp_comm::{Collective, CommError};

use super::bucket::Bucket;
use super::gradient_side::ReduceOp;
use super::plan::Plan;
use super::server::ServerBuffers;
use crate::error::ExchangeError;

/// What the wire does, in the order it is handed over.
pub(crate) enum WireTask {
    /// An exchange round's values of one operation.
    Round(ReduceOp, Vec<f32>),
    /// A packed bucket's collectives.
    Bucket(Bucket),
}

/// A task done, with its collectives' outcome.
pub(crate) enum WireDone {
    Round(ReduceOp, Vec<f32>, f64, Result<(), CommError>),
    Bucket(Bucket, Result<(), CommError>),
}

impl WireDone {
    fn failed(&self) -> bool {
        matches!(self, WireDone::Round(.., Err(_)) | WireDone::Bucket(.., Err(_)))
    }
}

fn run(plan: &Plan, task: WireTask, server: &mut ServerBuffers, c: &mut dyn Collective) -> WireDone {
    match task {
        WireTask::Round(op, mut values) => {
            let t = Instant::now();
            let done = match op {
                ReduceOp::Max => c.allreduce_max_f32(&mut values),
                ReduceOp::Sum => c.allreduce_sum_f32(&mut values),
            };
            WireDone::Round(op, values, t.elapsed().as_secs_f64(), done)
        }
        WireTask::Bucket(mut bucket) => {
            let done = bucket.run(plan, server, c);
            WireDone::Bucket(bucket, done)
        }
    }
}

/// Hands tasks to the collectives and gets them back done.
pub(crate) trait Wire {
    /// Hands a task over; false when the communication thread has stopped
    /// (on an error, which a following `recv` returns).
    fn send(&mut self, task: WireTask) -> bool;
    /// The next finished task, waiting for it.
    fn recv(&mut self) -> Result<WireDone, ExchangeError>;
    /// The next finished task, if one is.
    fn try_recv(&mut self) -> Option<WireDone>;
}

/// Runs each task on this thread as it is handed over.
struct SameThread<'a> {
    plan: &'a Plan,
    server: &'a mut ServerBuffers,
    c: &'a mut dyn Collective,
    done: VecDeque<WireDone>,
}

impl Wire for SameThread<'_> {
    fn send(&mut self, task: WireTask) -> bool {
        let done = run(self.plan, task, self.server, self.c);
        self.done.push_back(done);
        true
    }
    fn recv(&mut self) -> Result<WireDone, ExchangeError> {
        self.done.pop_front().ok_or_else(ended)
    }
    fn try_recv(&mut self) -> Option<WireDone> {
        self.done.pop_front()
    }
}

/// The communication thread's two channels.
struct CommThread {
    to_wire: mpsc::Sender<WireTask>,
    from_wire: mpsc::Receiver<WireDone>,
}

impl Wire for CommThread {
    fn send(&mut self, task: WireTask) -> bool {
        self.to_wire.send(task).is_ok()
    }
    fn recv(&mut self) -> Result<WireDone, ExchangeError> {
        self.from_wire.recv().map_err(|_| ended())
    }
    fn try_recv(&mut self) -> Option<WireDone> {
        self.from_wire.try_recv().ok()
    }
}

fn ended() -> ExchangeError {
    ExchangeError::Comm(CommError::Invalid("the communication thread ended without a result".into()))
}

/// Runs `pipeline` with a wire: this thread, or (`threaded`) a
/// communication thread. When the pipeline stops on an error of its own (a
/// misuse every worker meets at the same point, a corrupt message), the
/// communication thread still runs the collectives already handed over:
/// every worker handed over the same ones, so its peers are not left waiting
/// and each returns its own error rather than this worker's departure. It
/// stops at its first failed collective (a peer that left), so nothing
/// hangs.
pub(crate) fn with_wire<R>(
    threaded: bool,
    plan: &Plan,
    server: &mut ServerBuffers,
    c: &mut dyn Collective,
    pipeline: impl FnOnce(&mut dyn Wire) -> R,
) -> R {
    if !threaded {
        return pipeline(&mut SameThread { plan, server, c, done: VecDeque::new() });
    }
    std::thread::scope(|s| {
        let (to_wire, inbox) = mpsc::channel::<WireTask>();
        let (outbox, from_wire) = mpsc::channel::<WireDone>();
        s.spawn(move || {
            for task in inbox {
                let done = run(plan, task, server, c);
                let failed = done.failed();
                // The pipeline may have stopped listening (an error of its own).
                let _ = outbox.send(done);
                if failed {
                    break;
                }
            }
        });
        pipeline(&mut CommThread { to_wire, from_wire })
    })
}
