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
    fn price(&self, rounds: &Rounds) -> f64 {
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
        self.price(&self.allreduce_rounds(n, bytes))
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
        self.price(&vec![lengths]) + self.price(&rounds)
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
        self.price(&vec![(log2_ceil(n), 8.0, Round::Send), (rounds, bytes as f64, Round::Send)])
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

    /// The timeline of an exchange whose buckets are pipelined as
    /// `gradcomp-train`'s exchange runs them: `stages[b]` = [compress, wire,
    /// decode] seconds of bucket b, in exchange order. One thread compresses
    /// bucket b, hands it to the wire, then decodes bucket b−1; the wire
    /// moves one bucket at a time, in order. Returns each stage's
    /// [start, end] per bucket, from 0.
    pub fn pipelined_timeline(stages: &[[f64; 3]]) -> Vec<[[f64; 2]; 3]> {
        Self::staged_timeline(&[], &vec![0; stages.len()], stages)
    }

    /// [`NetworkModel::pipelined_timeline`] for an exchange fed by a staged
    /// backward pass: the exchange's thread first computes `backward[0]`
    /// seconds of backward pass, hands over the buckets that stage
    /// completed (`ready_after[b]`: the stages computed before bucket b was
    /// complete), decodes those the wire has finished, computes the next
    /// stage while the wire works, and so on; then it decodes the rest as
    /// they arrive. With no stages every bucket is ready at 0 and the
    /// thread decodes bucket b−1 right after handing over bucket b.
    pub fn staged_timeline(backward: &[f64], ready_after: &[u32], stages: &[[f64; 3]]) -> Vec<[[f64; 2]; 3]> {
        let mut out = vec![[[0.0; 2]; 3]; stages.len()];
        let (mut main, mut wire_free) = (0.0f64, 0.0f64);
        let mut in_flight = std::collections::VecDeque::new();
        let decode = |b: usize, main: &mut f64, out: &mut Vec<[[f64; 2]; 3]>| {
            let start = main.max(out[b][1][1]);
            *main = start + stages[b][2];
            out[b][2] = [start, *main];
        };
        let staged = !backward.is_empty();
        for k in 0..=backward.len() {
            if k > 0 {
                main += backward[k - 1];
            }
            for (b, &[compress, wire, _]) in stages.iter().enumerate() {
                if ready_after.get(b).map_or(0, |&r| r as usize) != k {
                    continue;
                }
                out[b][0] = [main, main + compress];
                main += compress;
                let start = main.max(wire_free);
                wire_free = start + wire;
                out[b][1] = [start, wire_free];
                in_flight.push_back(b);
                if !staged && in_flight.len() > 1 {
                    let first = in_flight.pop_front().expect("two in flight");
                    decode(first, &mut main, &mut out);
                }
            }
            // Between stages, only what the wire has already finished.
            while staged && in_flight.front().is_some_and(|&b| out[b][1][1] <= main) {
                let first = in_flight.pop_front().expect("one in flight");
                decode(first, &mut main, &mut out);
            }
        }
        for b in in_flight {
            decode(b, &mut main, &mut out);
        }
        out
    }

    /// The span of [`NetworkModel::pipelined_timeline`]: what the serial
    /// sum of the stages less this is, the pipeline hid.
    pub fn pipelined_span(stages: &[[f64; 3]]) -> f64 {
        Self::pipelined_timeline(stages).last().map_or(0.0, |s| s[2][1])
    }

    /// Adds measured round curves over `n` ranks: exchange rounds from
    /// allreduce times (`allreduce` samples: bytes per rank, seconds; only
    /// when the allreduce runs recursive doubling on a power of two, whose
    /// rounds are all exchanges of the whole buffer) and one-way messages from
    /// parameter-server times (`push_pull` samples: upload = download bytes
    /// per worker, seconds; the server's link carries (n−1)·m in, then out).
    pub fn with_curves(mut self, n: usize, allreduce: &[(u64, f64)], push_pull: &[(u64, f64)]) -> Self {
        let rd = allreduce
            .iter()
            .all(|&(b, _)| self.allreduce_algorithm(n, b) == AllreduceAlgorithm::RecursiveDoubling);
        if n >= 2 && n.is_power_of_two() && rd {
            let rounds = (n as f64).log2();
            self.exchange = allreduce.iter().map(|&(b, t)| (b, t / rounds)).collect();
            self.exchange.sort_by_key(|&(b, _)| b);
        }
        if n >= 2 {
            self.send = push_pull.iter().map(|&(b, t)| (b * (n as u64 - 1), t / 2.0)).collect();
            self.send.sort_by_key(|&(b, _)| b);
        }
        self
    }

    /// Fits α, B and ρ to allreduce times measured over `n` ranks with this
    /// model's algorithm: `samples` are (bytes per rank, seconds). Least
    /// squares on the relative error (every size weighs alike), each
    /// coefficient kept non-negative; ρ is only fitted when some sample
    /// leaves the eager range and another stays in it.
    pub fn fit(&self, n: usize, samples: &[(u64, f64)]) -> Result<Self, String> {
        if n < 2 || samples.len() < 3 {
            return Err("calibration needs at least two ranks and three message sizes".into());
        }
        // Per sample, the coefficients of (α, ρ, 1/B).
        let rows: Vec<([f64; 3], f64)> = samples
            .iter()
            .map(|&(bytes, t)| {
                let mut x = [0.0; 3];
                for (k, s, _) in self.allreduce_rounds(n, bytes) {
                    x[0] += k;
                    x[1] += if s > self.eager_limit as f64 { k } else { 0.0 };
                    x[2] += k * s;
                }
                (x, t)
            })
            .collect();
        let has_rdv = rows.iter().any(|(x, _)| x[1] > 0.0) && rows.iter().any(|(x, _)| x[1] == 0.0);
        let mut active: Vec<usize> = if has_rdv { vec![0, 1, 2] } else { vec![0, 2] };
        loop {
            let coef = least_squares(&rows, &active)
                .ok_or("the calibration samples do not determine the model (use more distinct sizes)")?;
            match active.iter().position(|&j| coef[j] < 0.0 && j != 2) {
                Some(i) => {
                    active.remove(i);
                }
                None => {
                    if coef[2] <= 0.0 {
                        return Err("the calibration found no bandwidth (times do not grow with size)".into());
                    }
                    let mut fitted = self.clone();
                    (fitted.alpha, fitted.rendezvous, fitted.bandwidth) = (coef[0], coef[1], 1.0 / coef[2]);
                    return Ok(fitted);
                }
            }
        }
    }
}

/// A model fitted to one link by `gradcomp bench comm --calibrate-out`, as
/// stored in its JSON file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// The link's nominal rate in bit/s: the link speed it stands for in a
    /// run's predictions.
    pub link_bps: f64,
    /// The ranks it was measured with.
    pub workers: usize,
    pub model: NetworkModel,
    /// The allreduce samples it was fitted to: (bytes per rank, seconds).
    #[serde(default)]
    pub samples: Vec<(u64, f64)>,
}

impl Calibration {
    /// Reads a calibration file; errors say which file and what is wrong.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let c: Calibration = serde_json::from_str(&text).map_err(|e| {
            format!("{}: not a calibration from `gradcomp bench comm --calibrate-out`: {e}", path.display())
        })?;
        let m = &c.model;
        let finite = [c.link_bps, m.alpha, m.bandwidth, m.rendezvous].iter().all(|v| v.is_finite());
        if !finite || c.link_bps <= 0.0 || m.alpha < 0.0 || m.bandwidth <= 0.0 || m.rendezvous < 0.0 {
            return Err(format!(
                "{}: the link rate and bandwidth must be > 0, α and ρ ≥ 0, all finite",
                path.display()
            ));
        }
        Ok(c)
    }
}

/// Weighted least squares for y ≈ Σ_j c_j x_j over the `active` columns,
/// each row weighted by 1/y; inactive coefficients are 0.
fn least_squares(rows: &[([f64; 3], f64)], active: &[usize]) -> Option<[f64; 3]> {
    let k = active.len();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (x, y) in rows {
        let w = 1.0 / (y * y).max(1e-24);
        for (i, &ci) in active.iter().enumerate() {
            for (j, &cj) in active.iter().enumerate() {
                a[i][j] += w * x[ci] * x[cj];
            }
            a[i][k] += w * x[ci] * y;
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..k {
        let piv = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, piv);
        let pivot = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot[col];
                for (x, p) in row[col..].iter_mut().zip(&pivot[col..]) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut out = [0.0; 3];
    for (i, &ci) in active.iter().enumerate() {
        out[ci] = a[i][k] / a[i][i];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_values() {
        // 1 Gbit/s, no latency: 100 MB ring allreduce over 4 ranks moves 1.5 × 100 MB per link.
        let m = NetworkModel::from_bits_per_second(1e9, 0.0);
        assert!((m.allreduce(4, 100_000_000) - 1.2).abs() < 1e-9);
        let rd = m.clone().with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
        assert!((rd.allreduce(4, 100_000_000) - 1.6).abs() < 1e-9);
        assert!((rd.allreduce(2, 100_000_000) - m.allreduce(2, 100_000_000)).abs() < 1e-9);
        // Not a power of two: 3 ranks pay a pre- and a post-step of M.
        assert!((rd.allreduce(3, 100_000_000) - 2.4).abs() < 1e-9);
        // Rabenseifner moves 2(N−1)/N·M in 2·log2 N rounds.
        let rab = m.clone().with_allreduce(AllreduceAlgorithm::Rabenseifner);
        assert!((rab.allreduce(4, 100_000_000) - 1.2).abs() < 1e-9);
        assert_eq!(m.allreduce(1, 1 << 20), 0.0);
        // Ring allgatherv: N − 1 exchange rounds of the mean block, after the length exchange.
        let lengths = 2.0 * 8.0 / m.bandwidth;
        assert!((m.allgatherv(&[10_000_000, 20_000_000, 30_000_000]) - 0.32 - lengths).abs() < 1e-9);
        // 5 ranks, 125 MB: a chain of 4 messages, after 3 rounds of the 8-byte length.
        assert!((m.broadcast(5, 125_000_000) - 4.0 - 3.0 * 8.0 / m.bandwidth).abs() < 1e-9);
        assert!((m.broadcast(16, 125_000_000) - 4.0 - 4.0 * 8.0 / m.bandwidth).abs() < 1e-9);
        // Co-located server with 4 workers: 3 uploads in, 3 downloads out through one link.
        let ps = m.push_pull(4, ServerPlacement::CoLocated, 1_000_000, 2_000_000);
        assert!((ps - 3.0 * 3_000_000.0 * 8.0 / 1e9).abs() < 1e-9);
        let sizes = m.push_pull_sizes(ServerPlacement::CoLocated, &[1_000_000; 4], 2_000_000);
        assert!((sizes - ps).abs() < 1e-12);
        let latency = NetworkModel::from_bits_per_second(1e9, 1e-4);
        assert!((latency.allreduce(4, 0) - 6e-4).abs() < 1e-12);
    }

    #[test]
    fn open_mpi_rules_pick_by_size_and_ranks() {
        let m = NetworkModel::from_bits_per_second(1e9, 1e-4).with_allreduce(AllreduceAlgorithm::OpenMpi);
        use AllreduceAlgorithm::*;
        assert_eq!(m.allreduce_algorithm(2, 4), Ring);
        assert_eq!(m.allreduce_algorithm(2, 1024), RecursiveDoubling);
        assert_eq!(m.allreduce_algorithm(2, 100_000), Ring);
        assert_eq!(m.allreduce_algorithm(2, 1 << 20), Rabenseifner);
        assert_eq!(m.allreduce_algorithm(4, 4096), RecursiveDoubling);
        assert_eq!(m.allreduce_algorithm(4, 8192), Rabenseifner);
        assert_eq!(m.allreduce_algorithm(100, 100_000), RecursiveDoubling);
        assert_eq!(m.allreduce_algorithm(300, 1000), Nonoverlapping);
        assert_eq!(m.allreduce_algorithm(5000, 20_000), RecursiveDoubling);
        // A pinned algorithm is used whatever the size.
        let pinned = m.clone().with_allreduce(Ring);
        assert_eq!(pinned.allreduce_algorithm(4, 1 << 20), Ring);
    }

    #[test]
    fn messages_beyond_the_eager_limit_pay_the_handshake() {
        let mut m = NetworkModel::from_bits_per_second(1e9, 1e-4)
            .with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
        m.rendezvous = 1e-3;
        let below = m.allreduce(4, 64 << 10);
        let above = m.allreduce(4, (64 << 10) + 4);
        // Two rounds, each one handshake more.
        assert!((above - below - 2e-3 - 8.0 / m.bandwidth).abs() < 1e-9);
    }

    #[test]
    fn fit_recovers_the_model_that_made_the_times() {
        let mut truth = NetworkModel::from_bits_per_second(1e8, 2e-4)
            .with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
        truth.rendezvous = 3e-3;
        let sizes = [4u64 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20];
        let samples: Vec<(u64, f64)> = sizes.iter().map(|&s| (s, truth.allreduce(4, s))).collect();
        let start = NetworkModel::from_bits_per_second(1e9, 0.0)
            .with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
        let fitted = start.fit(4, &samples).unwrap();
        assert!((fitted.alpha / truth.alpha - 1.0).abs() < 1e-6, "{fitted:?}");
        assert!((fitted.bandwidth / truth.bandwidth - 1.0).abs() < 1e-6);
        assert!((fitted.rendezvous / truth.rendezvous - 1.0).abs() < 1e-6);
        // Too few samples, and times that do not grow, are errors.
        assert!(start.fit(4, &samples[..2]).is_err());
        assert!(start.fit(4, &[(4096, 1.0), (1 << 20, 0.5), (16 << 20, 0.1)]).is_err());
    }

    #[test]
    fn calibrated_curves_price_rounds_by_what_was_measured() {
        let m = NetworkModel::from_bits_per_second(1e9, 1e-4)
            .with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
        // 4 ranks: recursive doubling is two exchange rounds; the server's link
        // carries 3 uploads in and 3 downloads out.
        let allreduce = [(1000, 0.02), (3000, 0.04)];
        let push_pull = [(1000, 0.006), (2000, 0.010)];
        let c = m.clone().with_curves(4, &allreduce, &push_pull);
        assert_eq!(c.exchange, vec![(1000, 0.01), (3000, 0.02)]);
        assert_eq!(c.send, vec![(3000, 0.003), (6000, 0.005)]);
        assert!((c.allreduce(4, 1000) - 0.02).abs() < 1e-12);
        assert!((c.allreduce(4, 2000) - 0.03).abs() < 1e-12, "linear between samples");
        assert!((c.allreduce(4, 5000) - 0.06).abs() < 1e-12, "the last slope beyond them");
        assert!((c.push_pull(4, ServerPlacement::CoLocated, 1500, 1500) - 0.008).abs() < 1e-12);
        // Below the first sample, down to α at zero bytes.
        assert!((c.allreduce(4, 500) - 2.0 * (1e-4 + 0.5 * (0.01 - 1e-4))).abs() < 1e-12);
        // Ring allreduce samples say nothing of exchange rounds of whole buffers.
        let ring = m.with_allreduce(AllreduceAlgorithm::Ring).with_curves(4, &allreduce, &push_pull);
        assert!(ring.exchange.is_empty() && !ring.send.is_empty());
    }

    #[test]
    fn the_pipeline_hides_all_but_the_first_compress_and_last_wire_and_decode() {
        // Wire-bound: 3 buckets of 1 s wire, 0.1 s compress and decode each.
        let stages = [[0.1, 1.0, 0.1]; 3];
        let span = NetworkModel::pipelined_span(&stages);
        assert!((span - (0.1 + 3.0 + 0.1)).abs() < 1e-12, "{span}");
        // Compute-bound: wire hides behind compression.
        let stages = [[1.0, 0.1, 0.5]; 3];
        let t = NetworkModel::pipelined_timeline(&stages);
        // compress 0, 1 | decode 0 | compress 2 | decode 1 | decode 2
        assert_eq!(t[1][0], [1.0, 2.0]);
        assert_eq!(t[0][2], [2.0, 2.5]);
        assert_eq!(t[2][0], [2.5, 3.5]);
        assert!((NetworkModel::pipelined_span(&stages) - 4.5).abs() < 1e-12);
        assert_eq!(NetworkModel::pipelined_span(&[]), 0.0);
    }

    #[test]
    fn a_staged_backward_pass_lets_the_wire_start_before_it_ends() {
        // Two stages of 3 s of backward pass; bucket 0 is complete after the
        // first, bucket 1 after the second. Compress 1, wire 4, decode 1 each.
        let stages = [[1.0, 4.0, 1.0]; 2];
        let t = NetworkModel::staged_timeline(&[3.0, 3.0], &[1, 2], &stages);
        // Bucket 0: compress [3, 4], wire [4, 8]; the second stage runs
        // [4, 7]; bucket 1: compress [7, 8], wire [8, 12]; decodes [8, 9], [12, 13].
        assert_eq!(t[0], [[3.0, 4.0], [4.0, 8.0], [8.0, 9.0]]);
        assert_eq!(t[1], [[7.0, 8.0], [8.0, 12.0], [12.0, 13.0]]);
        // Whole, after the same 6 s of backward pass: 6 + 10 = 16 s against 13.
        let whole = NetworkModel::pipelined_span(&stages);
        assert!((6.0 + whole - 16.0).abs() < 1e-12, "{whole}");
        // With no stages the staged timeline is the pipelined one.
        let t = NetworkModel::staged_timeline(&[], &[0, 0], &stages);
        assert_eq!(t, NetworkModel::pipelined_timeline(&stages));
    }
}
