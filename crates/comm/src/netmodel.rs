//! The α–β network model: what a collective would cost on a cluster of N
//! workers, each attached to a switch by a full-duplex link of latency α
//! (seconds per message) and bandwidth B (bytes per second).
//!
//! Formulas (M = bytes per rank, ⌈·⌉ = ceiling; Thakur, Rabenseifner & Gropp,
//! "Optimization of collective communication operations in MPICH", 2005):
//!
//! | operation | time |
//! |---|---|
//! | ring allreduce | 2(N−1)·α + 2·(N−1)/N · M/B |
//! | recursive-doubling allreduce | ⌈log2 N⌉·(α + M/B) |
//! | allgatherv (ring) | (N−1)·α + (Σ m_i − min m_i)/B |
//! | broadcast (binomial tree) | ⌈log2 N⌉·(α + M/B) |
//! | parameter-server push | α + (bytes arriving at the server)/B |
//! | parameter-server pull | α + (download · recipients)/B |
//!
//! The parameter server's single link is the bottleneck of its pattern; a
//! co-located server (rank 0) neither uploads nor downloads over its link.
//! [`NetworkModel::calibrate`] measures α and B through a real collective.

use std::time::Instant;

use crate::collective::{Collective, CommError, ServerPlacement};

/// Which allreduce algorithm the priced backend uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllreduceAlgorithm {
    /// Bandwidth-optimal for large messages (NCCL, Horovod, Open MPI's large-message default).
    #[default]
    Ring,
    RecursiveDoubling,
}

/// Latency and bandwidth of every worker's link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetworkModel {
    /// Seconds per message (α).
    pub alpha: f64,
    /// Bytes per second (B = 1/β).
    pub bandwidth: f64,
    pub allreduce: AllreduceAlgorithm,
}

fn log2_ceil(n: usize) -> f64 {
    (n.max(1) as f64).log2().ceil()
}

impl NetworkModel {
    /// A link of `bits_per_second` with latency `alpha` seconds.
    pub fn from_bits_per_second(bits_per_second: f64, alpha: f64) -> Self {
        Self { alpha, bandwidth: bits_per_second / 8.0, allreduce: AllreduceAlgorithm::Ring }
    }

    pub fn with_allreduce(mut self, a: AllreduceAlgorithm) -> Self {
        self.allreduce = a;
        self
    }

    /// Allreduce of `bytes` per rank over `n` ranks.
    pub fn allreduce(&self, n: usize, bytes: u64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let (a, m, b, nf) = (self.alpha, bytes as f64, self.bandwidth, n as f64);
        match self.allreduce {
            AllreduceAlgorithm::Ring => 2.0 * (nf - 1.0) * a + 2.0 * (nf - 1.0) / nf * m / b,
            AllreduceAlgorithm::RecursiveDoubling => log2_ceil(n) * (a + m / b),
        }
    }

    /// Allgatherv of messages of the given sizes (one per rank).
    pub fn allgatherv(&self, sizes: &[u64]) -> f64 {
        let n = sizes.len();
        if n <= 1 {
            return 0.0;
        }
        let total: u64 = sizes.iter().sum();
        let min = sizes.iter().copied().min().unwrap_or(0);
        (n as f64 - 1.0) * self.alpha + (total - min) as f64 / self.bandwidth
    }

    /// Allgatherv where every rank sends `bytes`.
    pub fn allgatherv_uniform(&self, n: usize, bytes: u64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        (n as f64 - 1.0) * (self.alpha + bytes as f64 / self.bandwidth)
    }

    /// Broadcast of `bytes` to `n` ranks.
    pub fn broadcast(&self, n: usize, bytes: u64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        log2_ceil(n) * (self.alpha + bytes as f64 / self.bandwidth)
    }

    /// Parameter server with `workers` workers, each uploading `upload` bytes
    /// and receiving `download` bytes.
    pub fn push_pull(&self, workers: usize, placement: ServerPlacement, upload: u64, download: u64) -> f64 {
        let remote = match placement {
            ServerPlacement::CoLocated => workers.saturating_sub(1),
            ServerPlacement::Dedicated => workers,
        } as f64;
        if remote == 0.0 {
            return 0.0;
        }
        2.0 * self.alpha + remote * (upload + download) as f64 / self.bandwidth
    }

    /// Parameter server with the actual upload sizes (rank order) and the
    /// download size: the server's link carries every remote upload in and
    /// the download out to every remote worker.
    pub fn push_pull_sizes(&self, placement: ServerPlacement, uploads: &[u64], download: u64) -> f64 {
        let n = uploads.len();
        let server = placement.server_rank(n.max(1));
        let remote_up: u64 = match placement {
            ServerPlacement::CoLocated => {
                uploads.iter().enumerate().filter(|(r, _)| *r != server).map(|(_, &b)| b).sum()
            }
            ServerPlacement::Dedicated => uploads.iter().sum(),
        };
        let recipients = n.saturating_sub(1) as u64;
        if recipients == 0 {
            return 0.0;
        }
        2.0 * self.alpha + (remote_up + download * recipients) as f64 / self.bandwidth
    }

    /// The span of an exchange whose buckets are pipelined as
    /// `gradcomp-train`'s exchange runs them: `stages[b]` = [compress, wire,
    /// decode] seconds of bucket b, in exchange order. One thread compresses
    /// bucket b, hands it to the wire, then decodes bucket b−1; the wire
    /// moves one bucket at a time, in order. What the span leaves of the
    /// serial sum is what the pipeline hid.
    pub fn pipelined_span(stages: &[[f64; 3]]) -> f64 {
        let (mut main, mut wire_free, mut landed) = (0.0f64, 0.0f64, 0.0f64);
        for (b, &[compress, wire, _]) in stages.iter().enumerate() {
            main += compress;
            let start = main.max(wire_free);
            let previous_landed = wire_free;
            wire_free = start + wire;
            if b > 0 {
                main = main.max(previous_landed) + stages[b - 1][2];
            }
            landed = wire_free;
        }
        match stages.last() {
            Some(&[_, _, decode]) => main.max(landed) + decode,
            None => 0.0,
        }
    }

    /// Measures α and B through `c`: the median time of a 1-byte broadcast
    /// gives α, that of a `large` broadcast gives B, both divided by the
    /// binomial tree's ⌈log2 N⌉ rounds. Every rank must call it; all get the
    /// same model (rank 0's measurement, broadcast).
    pub fn calibrate(c: &mut dyn Collective, large: usize, reps: usize) -> Result<Self, CommError> {
        let n = c.world_size();
        if n < 2 {
            return Err(CommError::Invalid("calibration needs at least two ranks".into()));
        }
        let rounds = log2_ceil(n);
        let mut time = |bytes: usize| -> Result<f64, CommError> {
            let mut buf = vec![0u8; bytes];
            c.barrier()?;
            let mut t = Vec::with_capacity(reps);
            for _ in 0..reps.max(1) {
                let s = Instant::now();
                c.broadcast(&mut buf, 0)?;
                c.barrier()?;
                t.push(s.elapsed().as_secs_f64());
            }
            t.sort_by(f64::total_cmp);
            Ok(t[t.len() / 2])
        };
        let t_small = time(1)?;
        let t_large = time(large)?;
        let alpha = t_small / rounds;
        let bandwidth = large as f64 / (t_large / rounds - alpha).max(1e-9);
        let mut bytes = [alpha.to_le_bytes(), bandwidth.to_le_bytes()].concat();
        c.broadcast(&mut bytes, 0)?;
        let word = |i: usize| f64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("16 bytes"));
        Ok(Self { alpha: word(0), bandwidth: word(1), allreduce: AllreduceAlgorithm::Ring })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_values() {
        // 1 Gbit/s, no latency: 100 MB ring allreduce over 4 ranks moves 1.5 × 100 MB per link.
        let m = NetworkModel::from_bits_per_second(1e9, 0.0);
        assert!((m.allreduce(4, 100_000_000) - 1.2).abs() < 1e-9);
        let rd = m.with_allreduce(AllreduceAlgorithm::RecursiveDoubling);
        assert!((rd.allreduce(4, 100_000_000) - 1.6).abs() < 1e-9);
        assert!((rd.allreduce(2, 100_000_000) - m.allreduce(2, 100_000_000)).abs() < 1e-9);
        assert_eq!(m.allreduce(1, 1 << 20), 0.0);
        assert!((m.allgatherv(&[10_000_000, 20_000_000, 30_000_000]) - 0.4).abs() < 1e-9);
        assert!((m.broadcast(5, 125_000_000) - 3.0).abs() < 1e-9);
        // Co-located server with 4 workers: 3 uploads in, 3 downloads out through one link.
        let ps = m.push_pull(4, ServerPlacement::CoLocated, 1_000_000, 2_000_000);
        assert!((ps - 3.0 * 3_000_000.0 * 8.0 / 1e9).abs() < 1e-9);
        let sizes = m.push_pull_sizes(ServerPlacement::CoLocated, &[1_000_000; 4], 2_000_000);
        assert!((sizes - ps).abs() < 1e-12);
        let latency = NetworkModel::from_bits_per_second(1e9, 1e-4);
        assert!((latency.allreduce(4, 0) - 6e-4).abs() < 1e-12);
    }
}
