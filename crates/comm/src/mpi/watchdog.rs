//! The MPI backend's watchdog: bounded waits for blocking MPI calls, and
//! a stopped or dead peer found by its heartbeat's silence (see the
//! backend's module docs). One deadline per channel, so that a duplicate of
//! the world running on another thread keeps its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::heartbeat::{self, Heartbeat};

/// Exit code of a rank whose collective timed out.
pub const TIMEOUT_EXIT_CODE: i32 = 75;

/// The deadlines the watchdog enforces: one per channel (the world and its
/// duplicates), set while that channel has a call in flight.
#[derive(Default)]
struct Armed {
    deadlines: Vec<Option<(Instant, &'static str)>>,
}

impl Armed {
    /// The earliest deadline of any channel.
    fn next(&self) -> Option<(Instant, &'static str)> {
        self.deadlines.iter().flatten().copied().min_by_key(|(at, _)| *at)
    }
}

pub(super) struct Watchdog {
    armed: Mutex<Armed>,
    cv: Condvar,
    /// Silence of the predecessor's heartbeat that ends the job, in ms (0: off).
    pub(super) heartbeat_bound_ms: AtomicU64,
}

/// The default heartbeat bound (`comm.heartbeat_seconds`).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

impl Watchdog {
    pub(super) fn start(rank: usize, heartbeat: Option<Heartbeat>) -> Arc<Self> {
        let w = Arc::new(Watchdog {
            armed: Mutex::new(Armed { deadlines: vec![None] }),
            cv: Condvar::new(),
            heartbeat_bound_ms: AtomicU64::new(DEFAULT_HEARTBEAT.as_millis() as u64),
        });
        let watch = Arc::clone(&w);
        std::thread::Builder::new()
            .name("gradcomp-mpi-watchdog".into())
            .spawn(move || {
                let mut a = watch.armed.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    match a.next() {
                        None => a = watch.cv.wait(a).unwrap_or_else(|e| e.into_inner()),
                        Some((deadline, op)) => {
                            let now = Instant::now();
                            if now >= deadline {
                                eprintln!(
                                    "error: MPI rank {rank} timed out in {op}: a peer failed or stalled; ending the job"
                                );
                                std::process::exit(TIMEOUT_EXIT_CODE);
                            }
                            let bound = Duration::from_millis(watch.heartbeat_bound_ms.load(Ordering::Relaxed));
                            if let Some(h) = heartbeat.as_ref().filter(|_| !bound.is_zero()) {
                                let (peer, quiet) = h.silence();
                                if quiet > bound {
                                    eprintln!(
                                        "error: MPI rank {peer} stopped responding: no heartbeat for {:.1} s \
                                         (bound {:.0} s, comm.heartbeat_seconds) while rank {rank} waited in {op}; \
                                         it is stopped, dead or cut off; ending the job",
                                        quiet.as_secs_f64(),
                                        bound.as_secs_f64()
                                    );
                                    std::process::exit(TIMEOUT_EXIT_CODE);
                                }
                            }
                            let wait = (deadline - now).min(heartbeat::INTERVAL);
                            a = watch.cv.wait_timeout(a, wait).unwrap_or_else(|e| e.into_inner()).0;
                        }
                    }
                }
            })
            .expect("spawning the MPI watchdog thread");
        w
    }

    /// A deadline slot for another channel.
    pub(super) fn add_channel(&self) -> usize {
        let mut a = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        a.deadlines.push(None);
        a.deadlines.len() - 1
    }

    pub(super) fn arm(&self, channel: usize, op: &'static str, timeout: Duration) {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).deadlines[channel] =
            Some((Instant::now() + timeout, op));
        self.cv.notify_all();
    }

    pub(super) fn disarm(&self, channel: usize) {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).deadlines[channel] = None;
    }
}
