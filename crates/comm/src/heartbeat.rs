//! Out-of-band liveness of MPI ranks: each rank sends a small UDP datagram
//! to its successor in a ring every [`INTERVAL`] and watches for its
//! predecessor's. A rank that is stopped (SIGSTOP, a frozen node), dead or
//! cut off goes silent; its successor, waiting in a collective, names it
//! once the silence passes the bound (`comm.heartbeat_seconds`, 10 s by
//! default) and ends the job.
//!
//! Why a side channel: MPI cannot be called while a collective is in flight
//! on another thread (the backend runs at `Serialized`), and a blocking
//! collective cannot be cancelled, so liveness has to travel outside MPI.
//! The datagrams are tiny and independent of the collectives' traffic, so a
//! slow link delays them by at most its queueing, far below the bound: no
//! false alarm from a long transfer. A rank that is alive but stuck (a
//! deadlock in user code) keeps beating; the per-operation timeout
//! (`comm.timeout_seconds`) covers that case.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a rank beats.
pub const INTERVAL: Duration = Duration::from_millis(500);

/// A datagram: the job's nonce (so two jobs on one host never mix) and the
/// sender's rank.
const DATAGRAM: usize = 12;

/// This rank's side of the ring.
pub struct Heartbeat {
    start: Instant,
    /// Milliseconds since `start` of the predecessor's last datagram, plus
    /// one (0: never heard).
    last_seen: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    predecessor: usize,
}

impl Heartbeat {
    /// Starts beating to the successor, at every address it may be reached
    /// at (`successor`: whichever routes), and listening on `socket` for
    /// `predecessor` (ranks of a job with `nonce`).
    pub fn start(
        socket: UdpSocket,
        rank: usize,
        predecessor: usize,
        successor: Vec<SocketAddr>,
        nonce: u64,
    ) -> std::io::Result<Self> {
        let start = Instant::now();
        let last_seen = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        socket.set_read_timeout(Some(INTERVAL))?;
        let sender = socket.try_clone()?;
        let mut msg = [0u8; DATAGRAM];
        msg[..8].copy_from_slice(&nonce.to_le_bytes());
        msg[8..].copy_from_slice(&(rank as u32).to_le_bytes());
        let halt = Arc::clone(&stop);
        std::thread::Builder::new().name("gradcomp-heartbeat-send".into()).spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                // A lost datagram is one missed beat of many within the bound.
                for to in &successor {
                    let _ = sender.send_to(&msg, to);
                }
                std::thread::sleep(INTERVAL);
            }
        })?;
        let (seen, halt) = (Arc::clone(&last_seen), Arc::clone(&stop));
        std::thread::Builder::new().name("gradcomp-heartbeat-recv".into()).spawn(move || {
            let mut buf = [0u8; 64];
            while !halt.load(Ordering::Relaxed) {
                if let Ok((n, _)) = socket.recv_from(&mut buf) {
                    let from = buf.get(8..12).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
                    if n == DATAGRAM && buf[..8] == nonce.to_le_bytes() && from == Some(predecessor) {
                        seen.store(start.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
                    }
                }
            }
        })?;
        Ok(Self { start, last_seen, stop, predecessor })
    }

    /// The predecessor's rank and how long it has been silent (since the
    /// start, if it never beat).
    pub fn silence(&self) -> (usize, Duration) {
        let now = self.start.elapsed().as_millis() as u64;
        let seen = self.last_seen.load(Ordering::Relaxed).saturating_sub(1);
        (self.predecessor, Duration::from_millis(now.saturating_sub(seen)))
    }

    /// Waits up to `limit` for the predecessor's first beat; whether it came.
    pub fn first_beat(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.last_seen.load(Ordering::Relaxed) == 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// This host's IPv4 addresses (of its network namespace), loopback last:
/// the kernel's LOCAL routes in `/proc/net/fib_trie` (Linux). A rank on a
/// shaped virtual host has its own namespace, so a peer cannot assume
/// loopback reaches it; beating to every address finds the one that routes.
pub fn local_ipv4() -> Vec<std::net::Ipv4Addr> {
    let text = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let mut out: Vec<std::net::Ipv4Addr> = Vec::new();
    let mut last: Option<std::net::Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = last.filter(|a| !out.contains(a)) {
                out.push(a);
            }
        }
    }
    out.sort_by_key(|a| a.is_loopback());
    if out.is_empty() {
        out.push(std::net::Ipv4Addr::LOCALHOST);
    }
    out
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_predecessor_is_noticed_and_a_beating_one_is_not() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (addr_a, addr_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        // A two-rank ring: 0 → 1 → 0.
        let h0 = Heartbeat::start(a, 0, 1, vec![addr_b], 42).unwrap();
        let h1 = Heartbeat::start(b, 1, 0, vec![addr_a], 42).unwrap();
        assert!(h0.first_beat(INTERVAL * 4) && h1.first_beat(INTERVAL * 4));
        std::thread::sleep(INTERVAL * 3);
        assert!(h0.silence().1 < INTERVAL * 2, "{:?}", h0.silence());
        assert!(h1.silence().1 < INTERVAL * 2, "{:?}", h1.silence());
        // Rank 1 stops beating: rank 0 sees the silence grow and names it.
        drop(h1);
        std::thread::sleep(INTERVAL * 4);
        let (who, quiet) = h0.silence();
        assert_eq!(who, 1);
        assert!(quiet >= INTERVAL * 2, "{quiet:?}");
    }

    #[test]
    fn datagrams_of_another_job_are_ignored() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (addr_a, addr_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let h0 = Heartbeat::start(a, 0, 1, vec![addr_b], 1).unwrap();
        let _h1 = Heartbeat::start(b, 1, 0, vec![addr_a], 2).unwrap();
        assert!(!h0.first_beat(INTERVAL * 4), "another job's beat counted");
        assert!(h0.silence().1 >= INTERVAL * 3, "another job's beats counted: {:?}", h0.silence());
    }

    #[test]
    fn this_host_has_an_address() {
        let a = local_ipv4();
        assert!(!a.is_empty());
        assert!(a.last().unwrap().is_loopback() || a.iter().all(|a| !a.is_loopback()));
    }
}
