//! The network model: what a collective would cost on a cluster of N
//! workers, each attached to a switch by a full-duplex link, priced with the
//! algorithm the MPI library runs for that size and rank count.
//!
//! Every algorithm is a sequence of point-to-point rounds on the critical
//! path; a round moving a message of s bytes costs
//!
//!   α + s/B + (s > eager limit ? ρ : 0)
//!
//! where α is the per-message latency, B the link bandwidth and ρ the extra
//! cost of a message that leaves the eager range (Open MPI's rendezvous
//! handshake: 64 KiB over TCP, `btl_tcp_eager_limit`). Rounds per algorithm
//! (M = bytes per rank, p = the largest power of two ≤ N; Thakur,
//! Rabenseifner & Gropp, "Optimization of collective communication
//! operations in MPICH", 2005):
//!
//! | algorithm | rounds |
//! |---|---|
//! | ring allreduce | 2(N−1) of M/N |
//! | recursive-doubling allreduce | log2 p of M, +2 of M when N ≠ p |
//! | Rabenseifner allreduce | 2 of M/2, 2 of M/4 … 2 of M/p, +2 of M when N ≠ p |
//! | reduce + broadcast ("nonoverlapping") | 2⌈log2 N⌉ of M |
//! | allgatherv (ring, neighbor, Bruck, two-proc) | N−1, N/2, ⌈log2 N⌉, 1 rounds carrying Σm − min m bytes |
//! | alltoallv (pairwise exchange) | N−1 of the mean message to a peer, after a length exchange |
//! | broadcast (linear or chain; trees) | N−1 of M; ⌈log2 N⌉ of M |
//! | parameter server | 2 rounds; the server's link carries every remote upload and download |
//!
//! [`AllreduceAlgorithm::OpenMpi`] and [`AllgathervAlgorithm::OpenMpi`] choose
//! the algorithm as Open MPI 4.1's `coll/tuned` fixed decision rules do
//! (commutative operations; `ompi/mca/coll/tuned/coll_tuned_decision_fixed.c`
//! in v4.1.4); the others pin it, as `--mca coll_tuned_allreduce_algorithm`
//! does. gradcomp's MPI allgatherv first exchanges the message lengths (one
//! small allgather, ⌈log2 N⌉ rounds of latency), which the model includes.
//!
//! [`NetworkModel::fit`] calibrates α, B and ρ from measured allreduce
//! times (`gradcomp bench comm --calibrate-out`).

use serde::{Deserialize, Serialize};

use crate::collective::ServerPlacement;
use crate::op::{CollectiveCall, OpKind};

/// Which allreduce algorithm the priced backend runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllreduceAlgorithm {
    /// Bandwidth-optimal for large messages (NCCL, Horovod).
    #[default]
    Ring,
    RecursiveDoubling,
    /// Reduce-scatter by recursive halving, then allgather by recursive doubling.
    Rabenseifner,
    /// A reduce to rank 0, then a broadcast (binomial trees).
    Nonoverlapping,
    /// Whatever Open MPI 4.1's tuned component picks for the size and N.
    OpenMpi,
}

/// Which allgatherv algorithm the priced backend runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllgathervAlgorithm {
    #[default]
    Ring,
    /// Neighbor exchange: N/2 rounds (even N; ring otherwise).
    Neighbor,
    Bruck,
    /// A gather to rank 0, then a broadcast of the concatenation.
    GatherBroadcast,
    /// Whatever Open MPI 4.1's tuned component picks.
    OpenMpi,
}

/// Latency, bandwidth and eager-range cost of every worker's link, and the
/// algorithms the backend runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkModel {
    /// Seconds per message (α).
    pub alpha: f64,
    /// Bytes per second (B = 1/β).
    pub bandwidth: f64,
    /// Extra seconds per message larger than `eager_limit` (ρ).
    #[serde(default)]
    pub rendezvous: f64,
    /// Largest message sent eagerly, in bytes.
    #[serde(default = "default_eager_limit")]
    pub eager_limit: u64,
    #[serde(default)]
    pub allreduce: AllreduceAlgorithm,
    #[serde(default)]
    pub allgatherv: AllgathervAlgorithm,
    /// Measured seconds of one exchange round (every rank sends and
    /// receives s bytes at once) at sizes s, from a calibration; empty:
    /// the α–β–ρ formula. Between samples the time is interpolated linearly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exchange: Vec<(u64, f64)>,
    /// Measured seconds of one one-way message of s bytes through one link.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub send: Vec<(u64, f64)>,
}

/// What a round of an algorithm loads: both directions of every link at
/// once (a send-receive exchange), or one direction (a message into or out
/// of one rank). Over TCP on shared cores the two differ (see NETWORK.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    Exchange,
    Send,
}

/// Open MPI's TCP transport: `btl_tcp_eager_limit` = 64 KiB.
fn default_eager_limit() -> u64 {
    64 << 10
}

fn log2_ceil(n: usize) -> f64 {
    (n.max(1) as f64).log2().ceil()
}

/// The largest power of two ≤ n (n ≥ 1).
fn pof2(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

/// A band of Open MPI's allreduce rules: below this many ranks, the
/// algorithm below each size, and the one above the last.
type Band = (usize, &'static [(u64, AllreduceAlgorithm)], AllreduceAlgorithm);

/// Rounds on an algorithm's critical path: (how many, bytes each, kind).
type Rounds = Vec<(f64, f64, Round)>;

/// Seconds at `s` bytes on a measured curve (sorted by size): linear
/// between samples; below the first, down to `floor` at 0 bytes; above the
/// last, at the slope of the last two samples.
fn interpolate(curve: &[(u64, f64)], s: f64, floor: f64) -> f64 {
    let at = |i: usize| (curve[i].0 as f64, curve[i].1);
    let line = |(x0, y0): (f64, f64), (x1, y1): (f64, f64)| {
        if x1 > x0 {
            y0 + (y1 - y0) * (s - x0) / (x1 - x0)
        } else {
            y1
        }
    };
    let i = curve.partition_point(|&(x, _)| (x as f64) < s);
    let t = match i {
        0 => line((0.0, floor.min(at(0).1)), at(0)),
        i if i == curve.len() && i >= 2 => line(at(i - 2), at(i - 1)),
        i if i == curve.len() => at(i - 1).1 * s / at(i - 1).0.max(1.0),
        i => line(at(i - 1), at(i)),
    };
    t.max(0.0)
}

impl NetworkModel {
    /// A link of `bits_per_second` with latency `alpha` seconds, no
    /// rendezvous cost, ring allreduce and ring allgatherv.
    pub fn from_bits_per_second(bits_per_second: f64, alpha: f64) -> Self {
        Self {
            alpha,
            bandwidth: bits_per_second / 8.0,
            rendezvous: 0.0,
            eager_limit: default_eager_limit(),
            allreduce: AllreduceAlgorithm::Ring,
            allgatherv: AllgathervAlgorithm::Ring,
            exchange: Vec::new(),
            send: Vec::new(),
        }
    }

    pub fn with_allreduce(mut self, a: AllreduceAlgorithm) -> Self {
        self.allreduce = a;
        self
    }

    pub fn with_allgatherv(mut self, a: AllgathervAlgorithm) -> Self {
        self.allgatherv = a;
        self
    }

    /// Seconds of one round moving `s` bytes: the calibrated curve of its
    /// kind, or α + s/B (+ ρ beyond the eager limit).
    fn round(&self, kind: Round, s: f64) -> f64 {
        let curve = match kind {
            Round::Exchange => &self.exchange,
            Round::Send => &self.send,
        };
        if curve.is_empty() {
            let rdv = if s > self.eager_limit as f64 { self.rendezvous } else { 0.0 };
            self.alpha + s / self.bandwidth + rdv
        } else {
            interpolate(curve, s, self.alpha)
        }
    }

    /// Seconds of the given rounds.
    fn price_rounds(&self, rounds: &Rounds) -> f64 {
        rounds.iter().map(|&(k, s, kind)| k * self.round(kind, s)).sum()
    }

    /// The allreduce algorithm run for `bytes` per rank over `n` ranks:
    /// the pinned one, or Open MPI 4.1's choice for a commutative operation.
    pub fn allreduce_algorithm(&self, n: usize, bytes: u64) -> AllreduceAlgorithm {
        use AllreduceAlgorithm::*;
        if self.allreduce != OpenMpi {
            return self.allreduce;
        }
        // (ranks below, [(bytes below, algorithm)], algorithm above) from
        // coll_tuned_decision_fixed.c; segmented ring (5) runs unsegmented
        // under the fixed rules, so it is priced as the ring (4).
        const RING: AllreduceAlgorithm = Ring;
        let table: &[Band] = &[
            (
                4,
                &[
                    (8, RING),
                    (4096, RecursiveDoubling),
                    (8192, RING),
                    (16384, RecursiveDoubling),
                    (262144, RING),
                ],
                Rabenseifner,
            ),
            (8, &[(16, RING), (8192, RecursiveDoubling)], Rabenseifner),
            (16, &[(8192, RecursiveDoubling)], Rabenseifner),
            (32, &[(64, RING), (4096, RecursiveDoubling)], Rabenseifner),
            (64, &[(128, RING)], Rabenseifner),
            (128, &[(262144, RecursiveDoubling)], Rabenseifner),
            (256, &[(131072, Nonoverlapping), (262144, RecursiveDoubling)], Rabenseifner),
            (512, &[(4096, Nonoverlapping)], Rabenseifner),
            (2048, &[(2048, Nonoverlapping), (16384, RecursiveDoubling)], Rabenseifner),
            (4096, &[(2048, Nonoverlapping), (4096, RING), (16384, RecursiveDoubling)], Rabenseifner),
            (usize::MAX, &[(2048, Nonoverlapping), (16384, RING), (32768, RecursiveDoubling)], Rabenseifner),
        ];
        let (_, bands, above) = table.iter().find(|(below, _, _)| n < *below).expect("the last band is open");
        bands.iter().find(|(below, _)| bytes < *below).map_or(*above, |&(_, a)| a)
    }

    /// The allreduce's rounds for `bytes` per rank over `n` ranks. The
    /// steps that fold the ranks beyond a power of two in and out are one-way.
    fn allreduce_rounds(&self, n: usize, bytes: u64) -> Rounds {
        use Round::{Exchange, Send};
        let m = bytes as f64;
        let (p, nf) = (pof2(n), n as f64);
        let extra = if n == p { vec![] } else { vec![(2.0, m, Send)] };
        match self.allreduce_algorithm(n, bytes) {
            AllreduceAlgorithm::Ring => vec![(2.0 * (nf - 1.0), m / nf, Exchange)],
            AllreduceAlgorithm::RecursiveDoubling | AllreduceAlgorithm::OpenMpi => {
                let mut r = vec![((p as f64).log2(), m, Exchange)];
                r.extend(extra);
                r
            }
            AllreduceAlgorithm::Rabenseifner => {
                let mut r: Rounds =
                    (1..=p.trailing_zeros()).map(|k| (2.0, m / f64::from(1u32 << k), Exchange)).collect();
                r.extend(extra);
                r
            }
            AllreduceAlgorithm::Nonoverlapping => vec![(2.0 * log2_ceil(n), m, Send)],
        }
    }

    /// Allreduce of `bytes` per rank over `n` ranks.
    pub fn allreduce(&self, n: usize, bytes: u64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        self.price_rounds(&self.allreduce_rounds(n, bytes))
    }

    /// The allgatherv algorithm for messages of `total` bytes over `n` ranks.
    pub fn allgatherv_algorithm(&self, n: usize, total: u64) -> AllgathervAlgorithm {
        use AllgathervAlgorithm::*;
        if self.allgatherv != OpenMpi {
            return self.allgatherv;
        }
        // Per-rank size bands of Open MPI 4.1 for N < 16 (two-proc at N = 2
        // is one exchange: priced as Bruck's single round).
        let per = total / n.max(1) as u64;
        match n {
            2 => Bruck,
            3..=7 => match per {
                0..=255 => GatherBroadcast,
                256..=4095 | 8192..=16383 => Neighbor,
                4096..=8191 => Ring,
                16384..=262143 => Bruck,
                _ => Neighbor,
            },
            8..=15 if per < 1024 => GatherBroadcast,
            8..=15 => Bruck,
            _ if per < 128 => GatherBroadcast,
            _ if per < 262144 => Bruck,
            _ => Ring,
        }
    }

    /// Allgatherv of messages of the given sizes (one per rank), with the
    /// length exchange that precedes it. Rounds carry blocks of the mean
    /// message size.
    pub fn allgatherv(&self, sizes: &[u64]) -> f64 {
        use Round::{Exchange, Send};
        let n = sizes.len();
        if n <= 1 {
            return 0.0;
        }
        let total: u64 = sizes.iter().sum();
        let block = total as f64 / n as f64;
        let lengths = (log2_ceil(n), 8.0, Exchange);
        let rounds: Rounds = match self.allgatherv_algorithm(n, total) {
            AllgathervAlgorithm::Ring | AllgathervAlgorithm::OpenMpi => {
                vec![(n as f64 - 1.0, block, Exchange)]
            }
            AllgathervAlgorithm::Neighbor if n.is_multiple_of(2) => {
                vec![(1.0, block, Exchange), (n as f64 / 2.0 - 1.0, 2.0 * block, Exchange)]
            }
            AllgathervAlgorithm::Neighbor => vec![(n as f64 - 1.0, block, Exchange)],
            AllgathervAlgorithm::Bruck => {
                let mut have = 1;
                let mut r = Vec::new();
                while have < n {
                    let k = have.min(n - have);
                    r.push((1.0, k as f64 * block, Exchange));
                    have += k;
                }
                r
            }
            AllgathervAlgorithm::GatherBroadcast => {
                vec![(1.0, (total - sizes[0]) as f64, Send), (log2_ceil(n), total as f64, Send)]
            }
        };
        self.price_rounds(&vec![lengths]) + self.price_rounds(&rounds)
    }

    /// Alltoallv in which this rank sends `sizes[j]` bytes to rank j (its
    /// own entry 0, or ignored: it crosses no link), priced as Open MPI's
    /// pairwise exchange: N − 1 rounds, in round k rank r sends to r + k and
    /// receives from r − k, each round carrying the mean message (the
    /// shards are cut equal, so every rank's rounds are alike), after
    /// gradcomp's exchange of the lengths (a small alltoall: ⌈log2 N⌉
    /// rounds of latency, as Bruck's).
    pub fn alltoallv(&self, sizes: &[u64]) -> f64 {
        let n = sizes.len();
        if n <= 1 {
            return 0.0;
        }
        let total: u64 = sizes.iter().sum();
        let block = total as f64 / (n - 1) as f64;
        self.price_rounds(&vec![
            (log2_ceil(n), 8.0, Round::Exchange),
            (n as f64 - 1.0, block, Round::Exchange),
        ])
    }

    /// Alltoallv where this rank sends `bytes` to each of the other N − 1.
    pub fn alltoallv_uniform(&self, n: usize, bytes: u64) -> f64 {
        let mut sizes = vec![bytes; n];
        sizes[0] = 0;
        self.alltoallv(&sizes)
    }

    /// Allgatherv where every rank sends `bytes`.
    pub fn allgatherv_uniform(&self, n: usize, bytes: u64) -> f64 {
        self.allgatherv(&vec![bytes; n])
    }

    /// Broadcast of `bytes` to `n` ranks, after gradcomp's length
    /// broadcast, with the shape Open MPI 4.1's rules give it: below 8 ranks
    /// a linear or chain broadcast (the root's link or the chain carries
    /// N − 1 messages) for the sizes where the rules pick one (≥ 8 KiB at 4–7
    /// ranks, 32 KiB – 512 KiB at 2–3, ≥ 32 KiB at 8–15), else a tree of
    /// ⌈log2 N⌉ rounds (binomial, binary, k-nomial, pipelines: priced alike).
    pub fn broadcast(&self, n: usize, bytes: u64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let linear = match n {
            2..=3 => (32768..524288).contains(&bytes),
            4..=7 => bytes >= 8192,
            8..=15 => bytes >= 32768,
            _ => false,
        };
        let rounds = if linear { n as f64 - 1.0 } else { log2_ceil(n) };
        self.price_rounds(&vec![(log2_ceil(n), 8.0, Round::Send), (rounds, bytes as f64, Round::Send)])
    }

    /// Parameter server with `workers` workers, each uploading `upload` bytes
    /// and receiving `download` bytes.
    pub fn push_pull(&self, workers: usize, placement: ServerPlacement, upload: u64, download: u64) -> f64 {
        let remote = match placement {
            ServerPlacement::CoLocated => workers.saturating_sub(1),
            ServerPlacement::Dedicated => workers,
        };
        if remote == 0 {
            return 0.0;
        }
        let mut uploads = vec![upload; workers];
        if placement == ServerPlacement::Dedicated {
            uploads.push(0);
        }
        self.push_pull_sizes(placement, &uploads, download)
    }

    /// Parameter server with the actual upload sizes (rank order) and the
    /// download size: the server's link carries every remote upload in and
    /// the download out to every remote worker.
    pub fn push_pull_sizes(&self, placement: ServerPlacement, uploads: &[u64], download: u64) -> f64 {
        let n = uploads.len();
        let server = placement.server_rank(n.max(1));
        let remote: Vec<u64> = match placement {
            ServerPlacement::CoLocated => {
                uploads.iter().enumerate().filter(|(r, _)| *r != server).map(|(_, &b)| b).collect()
            }
            ServerPlacement::Dedicated => uploads.to_vec(),
        };
        let recipients = n.saturating_sub(1) as u64;
        if recipients == 0 {
            return 0.0;
        }
        // The server's link carries the uploads in, then the download out.
        let up: u64 = remote.iter().sum();
        self.round(Round::Send, up as f64) + self.round(Round::Send, (download * recipients) as f64)
    }

    /// The predicted seconds of one recorded call among `n` ranks
    /// (`placement`: where a parameter server runs).
    pub fn price(&self, call: &CollectiveCall, n: usize, placement: ServerPlacement) -> f64 {
        let bytes = call.sizes.first().copied().unwrap_or(0);
        match call.op {
            op if op.is_allreduce() => self.allreduce(n, bytes),
            OpKind::Allgatherv => self.allgatherv(&call.sizes),
            OpKind::Alltoallv => self.alltoallv(&call.sizes),
            OpKind::PsPush | OpKind::PsPull => self.push_pull_sizes(placement, &call.sizes, call.download),
            OpKind::Broadcast => self.broadcast(n, bytes),
            _ => self.allreduce(n, 0),
        }
    }
}

mod calibration;
#[cfg(test)]
mod tests;
mod timeline;

pub use calibration::{Calibration, CalibrationError};
