//! How a unit's message travels, decided in one place: the collective it
//! goes in ([`Route`]), which topologies can carry a compressor at all and
//! which one it gets by default, and what one worker puts on the wire for
//! it. The plan gives every unit its route from [`Route::of`], the bucket
//! packs and the parameter server aggregates by it, and the performance
//! model prices the same routes with the same byte counts
//! ([`Route::upload_bytes`], [`Route::download_bytes`], [`Route::decodes`]).
//!
//! A new way of combining workers' messages ([`Combine`]) adds one row to
//! [`carriers`] (and, if it travels per worker, its aggregation in
//! `gradcomp_compress::aggregate`): nothing else here branches on it.

use std::ops::Range;

use gradcomp_compress::codec;
use gradcomp_compress::message::TernarySumMessage;
use gradcomp_compress::{Combine, Message};
use serde::{Deserialize, Serialize};

/// What runs an exchange, for the topologies it can take
/// ([`Topology::refused_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// gradcomp's own loop and the burn handle: every topology.
    Own,
    /// A PyTorch DDP comm hook: per DDP bucket, over torch.distributed.
    DdpHook,
    /// The PyTorch front's outer rounds (`LocalUpdates`), over torch.distributed.
    TorchRounds,
}

/// Which collectives carry the messages (`comm.topology`): the column of
/// the route table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// Summable messages through allreduce.
    Allreduce,
    /// Every worker's messages to every worker (allgatherv), summed locally.
    Allgather,
    /// Upload to a server that aggregates and broadcasts (TernGrad's protocol).
    ParameterServer,
    /// Each worker's message cut into N shards, shard j sent to worker j,
    /// which averages them in f32 and compresses the average again; the
    /// averages allgathered (`scatter.rs`; ALGORITHMS.md §7). Each worker
    /// receives about twice its own message whatever N is.
    ReduceScatter,
}

impl Topology {
    /// Why `runner` cannot carry this topology, where it cannot: the
    /// parameter server needs a collective torch.distributed does not have,
    /// and the reduce-scatter's shards follow gradcomp's units, which a DDP
    /// hook's buckets (DDP's to cut and rebuild) are not.
    pub fn refused_by(self, runner: Runner) -> Option<&'static str> {
        match (self, runner) {
            (Topology::ParameterServer, Runner::DdpHook | Runner::TorchRounds) => {
                Some("torch.distributed has no parameter server; use \"allreduce\" or \"allgather\"")
            }
            (Topology::ReduceScatter, Runner::DdpHook) => Some(
                "the reduce-scatter runs in gradcomp.torch.LocalUpdates' rounds (and gradcomp's own loop), not in a \
                 DDP hook; use \"allgather\" here",
            ),
            _ => None,
        }
    }

    /// The name the configuration spells (`comm.topology`).
    pub fn name(self) -> &'static str {
        match self {
            Topology::Allreduce => "allreduce",
            Topology::Allgather => "allgather",
            Topology::ParameterServer => "parameter-server",
            Topology::ReduceScatter => "reduce-scatter",
        }
    }
}

/// The collective a unit's message travels in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Summed in one f32 allreduce: units that travel uncompressed, dense
    /// f32 messages, and Rand-k's `same_seed` values.
    SumF32,
    /// fp16 values summed in one half-precision allreduce.
    SumF16,
    /// TernGrad over allreduce: the integer codes summed in the narrowest
    /// integer that holds the sum of N workers' codes ([`CodeWidth`]).
    SumCodes,
    /// Per-worker encodings, allgathered and decoded by every worker.
    Gather,
    /// Uploaded to the parameter server, which aggregates and sends one download.
    Server,
    /// The exchange rounds were the exchange (PowerSGD): every worker's
    /// message is already the aggregate, and nothing more travels.
    InRounds,
    /// Compressed shards to their owners (alltoallv), the owners'
    /// recompressed averages to every worker (allgatherv).
    Scatter,
}

/// The route table: for messages that combine as `combine`, the route on
/// each topology (`[allreduce, allgather, parameter-server,
/// reduce-scatter]`), `None` where that topology cannot carry them. The
/// reduce-scatter carries the averaged messages (`Combine::Gather`: their
/// decoded values sum), and dense values; not a vote, a senders' mean,
/// TernGrad's codes under a scaler shared before the compression, or what
/// an allreduce already sums compressed (fp16, Rand-k's shared indices).
pub fn carriers(combine: Combine) -> [Option<Route>; 4] {
    use Route::*;
    match combine {
        // Values every worker sums as they are are allreduced already,
        // whatever N: the reduce-scatter takes the dense ones (uncompressed
        // units) only.
        Combine::DenseSum => [Some(SumF32), Some(SumF32), Some(Server), Some(SumF32)],
        Combine::SharedIndexSum => [Some(SumF32), Some(SumF32), Some(Server), None],
        Combine::HalfSum => [Some(SumF16), Some(SumF16), Some(Server), None],
        Combine::TernarySum => [Some(SumCodes), Some(Gather), Some(Server), None],
        Combine::Gather => [None, Some(Gather), Some(Server), Some(Scatter)],
        Combine::MajorityVote | Combine::SenderMean { .. } => [None, Some(Gather), Some(Server), None],
        // The exchange rounds carry it whatever the topology (which only
        // routes its uncompressed tensors); `accepts` takes allreduce only.
        Combine::InRounds => [Some(InRounds), Some(InRounds), Some(InRounds), Some(InRounds)],
    }
}

fn column(topology: Topology) -> usize {
    match topology {
        Topology::Allreduce => 0,
        Topology::Allgather => 1,
        Topology::ParameterServer => 2,
        Topology::ReduceScatter => 3,
    }
}

impl Route {
    /// The route of a unit whose compressor's messages combine as `combine`,
    /// on `topology`; a unit that travels `uncompressed` (its f32 values)
    /// combines as a dense sum. `None`: the topology cannot carry it
    /// ([`topology_for`] says which can).
    pub fn of(uncompressed: bool, topology: Topology, combine: Combine) -> Option<Route> {
        let combine = if uncompressed { Combine::DenseSum } else { combine };
        carriers(combine)[column(topology)]
    }

    /// Bytes one worker uploads for a unit on this route whose message has
    /// `size` (an uncompressed unit's values as a dense message), among
    /// `workers` workers: the summed values in their width, or the
    /// encoding that is gathered or uploaded.
    pub fn upload_bytes(self, size: &MessageSize, workers: usize) -> u64 {
        match self {
            Route::SumF32 => 4 * size.summed as u64,
            Route::SumF16 => 2 * size.len as u64,
            Route::SumCodes => CodeWidth::for_workers(workers).bytes() * size.len as u64,
            Route::Gather | Route::Server => size.encoded as u64,
            Route::InRounds => 0,
            // What crosses links: the N − 1 shards for others and the owned
            // average, each about 1/N of the message (`scatter_bytes`
            // counts the headers exactly).
            Route::Scatter => size.encoded as u64,
        }
    }

    /// Bytes the parameter server sends down for a unit of `len` values
    /// whose messages combine as `combine`, each upload `upload` bytes: the
    /// integer code sums of ternary messages under one scaler, or the
    /// aggregate (the vote, the average) priced as large as an upload.
    pub fn download_bytes(combine: Combine, len: usize, workers: usize, upload: u64) -> u64 {
        if combine == Combine::TernarySum {
            let sums = TernarySumMessage { scale: 1.0, workers: workers as u32, sums: vec![0; len] };
            return codec::encoded_len(&Message::TernarySum(sums)) as u64;
        }
        upload
    }

    /// How many messages one worker decodes for a unit on this route among
    /// `workers`: the sum once, every worker's gathered message, or (the
    /// co-located server) every upload and the download.
    pub fn decodes(self, workers: usize) -> usize {
        match self {
            Route::Gather => workers,
            Route::Server => workers + 1,
            // N shards of 1/N and N averages of 1/N: two messages' worth.
            Route::Scatter => 2,
            Route::SumF32 | Route::SumF16 | Route::SumCodes | Route::InRounds => 1,
        }
    }

    /// Bytes one worker receives on its link for a unit on this route
    /// among `workers` (an allreduce priced as a ring's: 2(N − 1)/N of the
    /// buffer; every other worker's gathered encoding; the server's
    /// download; the reduce-scatter's shards and averages, [`scatter_bytes`]
    /// at [`MessageSize::encoded_at`]). The exchange rounds' bytes are the
    /// caller's (they are not a unit's).
    pub fn received_bytes(self, size: &MessageSize, combine: Combine, workers: usize) -> u64 {
        let n = workers as u64;
        if n <= 1 {
            return 0;
        }
        let up = self.upload_bytes(size, workers);
        match self {
            Route::SumF32 | Route::SumF16 | Route::SumCodes => 2 * (n - 1) * up / n,
            Route::Gather => (n - 1) * up,
            Route::Server => Route::download_bytes(combine, size.len, workers, up),
            Route::Scatter => size.scattered(workers).1,
            Route::InRounds => 0,
        }
    }

    /// Whether the route's collective is an allreduce (the bucket's sums,
    /// and the exchange rounds that are the whole exchange).
    pub fn is_sum(self) -> bool {
        matches!(self, Route::SumF32 | Route::SumF16 | Route::SumCodes | Route::InRounds)
    }
}

/// A unit's message in the numbers a route prices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageSize {
    /// The values a dense sum carries: a sparse message's selected values
    /// (Rand-k's `same_seed`: every worker selects the same indices), every
    /// value otherwise.
    pub summed: usize,
    /// The unit's length.
    pub len: usize,
    /// The message's encoding, in bytes.
    pub encoded: usize,
}

impl MessageSize {
    pub fn of(msg: &Message) -> Self {
        let summed = match msg {
            Message::Sparse(m) => m.values.len(),
            m => m.len(),
        };
        MessageSize { summed, len: msg.len(), encoded: codec::encoded_len(msg) }
    }

    /// The encoding of a run of `l` of the message's values: a header of
    /// its own and the payload in proportion (exact for a fixed-rate codec
    /// such as fp4 or 8-bit on whole blocks, which shards are; a sparse
    /// message's k in proportion).
    pub fn encoded_at(&self, l: usize) -> u64 {
        let header = codec::HEADER_LEN as u64;
        let payload = (self.encoded as u64).saturating_sub(header);
        header + (payload * l as u64).div_ceil(self.len.max(1) as u64)
    }

    /// (sent, received) by worker 0 in one reduce-scatter of this message
    /// among `workers` ([`scatter_bytes`] at [`MessageSize::encoded_at`]).
    pub fn scattered(&self, workers: usize) -> (u64, u64) {
        scatter_bytes(&[self.len], workers, 0, |l| self.encoded_at(l))
    }
}

/// Shards are cut at multiples of this many values, so fp4's 32-value
/// scale blocks never straddle two shards (8-bit's 4096-value blocks
/// restart at each shard).
pub const SHARD_ALIGN: usize = 64;

/// Shard `j` of `n` of a unit of `len` values: the blocks of
/// [`SHARD_ALIGN`] values split as evenly as whole blocks allow, the last
/// block cut at `len`. Shards may be empty when the unit has fewer blocks
/// than workers.
pub fn shard(len: usize, n: usize, j: usize) -> Range<usize> {
    let blocks = len.div_ceil(SHARD_ALIGN);
    let at = |k: usize| (blocks * k / n * SHARD_ALIGN).min(len);
    at(j)..at(j + 1)
}

/// Bytes worker `rank` of `n` moves in one reduce-scatter of units of
/// `lens` values (ALGORITHMS.md §7), as the byte meter counts them, where
/// `encoded(l)` is the encoding of a compressed run of l values (header
/// included; exact for a fixed-rate quantizer such as fp4 or 8-bit, where
/// it depends on l alone): (sent, received), over the alltoallv and the
/// allgatherv. With s_j the size of shard j:
///
///   sent = Σ_u Σ_{j ≠ rank} encoded(s_j) + Σ_u encoded(s_rank)
///   received = Σ_u (N − 1)·encoded(s_rank) + Σ_u Σ_{j ≠ rank} encoded(s_j)
///
/// Empty shards send nothing.
pub fn scatter_bytes(
    lens: &[usize],
    n: usize,
    rank: usize,
    mut encoded: impl FnMut(usize) -> u64,
) -> (u64, u64) {
    let (mut sent, mut received) = (0, 0);
    for &len in lens {
        let mut enc = |j| {
            let s = shard(len, n, j).len();
            if s == 0 {
                0
            } else {
                encoded(s)
            }
        };
        let others: u64 = (0..n).filter(|&j| j != rank).map(&mut enc).sum();
        let own = enc(rank);
        sent += others + own;
        received += (n as u64 - 1) * own + others;
    }
    (sent, received)
}

/// Whether a configuration may pair messages that combine as `combine`
/// with `topology`: the topology carries them, and, for a compressor whose
/// exchange rounds are its exchange (PowerSGD), it is allreduce (on another
/// topology only its uncompressed tensors would take it, which is never
/// what was meant).
pub fn accepts(combine: Combine, topology: Topology) -> bool {
    Route::of(false, topology, combine).is_some()
        && (combine != Combine::InRounds || topology == Topology::Allreduce)
}

/// Why `topology` cannot carry messages that combine as `combine` (the
/// table's `None`, or PowerSGD's rounds off allreduce); `None` where it can.
pub fn refusal(combine: Combine, topology: Topology) -> Option<&'static str> {
    if accepts(combine, topology) {
        None
    } else if combine == Combine::InRounds {
        Some("it exchanges in allreduce rounds")
    } else if topology == Topology::ReduceScatter {
        Some(
            "the owners average the decoded shards, and its messages are not averaged (a vote, the senders' mean, or \
             codes under a shared scaler) or are summed by an allreduce already",
        )
    } else {
        Some("its per-worker messages do not add in compressed form, which an allreduce needs")
    }
}

/// Whether choosing among the topologies changes nothing for messages that
/// combine as `combine`: two or more topologies besides the parameter server
/// carry them, all on one route (a sum is allreduced whatever the
/// topology). The exchange rounds' compressors (PowerSGD) are not asked:
/// `accepts` takes allreduce alone for them.
pub fn topology_changes_nothing(combine: Combine) -> bool {
    let c = carriers(combine);
    let routes: Vec<Route> = [Topology::Allreduce, Topology::Allgather, Topology::ReduceScatter]
        .into_iter()
        .filter_map(|t| c[column(t)])
        .collect();
    combine != Combine::InRounds && routes.len() >= 2 && routes.iter().all(|&r| r == routes[0])
}

/// The topology a compressor's messages get when none is configured: the
/// first of allreduce and allgather that carries them.
pub fn default_topology(combine: Combine) -> Topology {
    if carriers(combine)[column(Topology::Allreduce)].is_some() {
        Topology::Allreduce
    } else {
        Topology::Allgather
    }
}

/// The topologies that carry messages combining as `combine`, as the
/// configuration spells them (for an error that says what to use).
pub fn topology_for(combine: Combine) -> Vec<&'static str> {
    [Topology::Allreduce, Topology::Allgather, Topology::ParameterServer, Topology::ReduceScatter]
        .into_iter()
        .filter(|&t| accepts(combine, t))
        .map(Topology::name)
        .collect()
}

/// The integer TernGrad's code sums travel in: the sum of N codes in
/// {−1, 0, +1} lies in −N..=N, which i8 holds while 2N + 1 ≤ 255.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeWidth {
    I8,
    I16,
    I32,
}

impl CodeWidth {
    pub fn for_workers(n: usize) -> CodeWidth {
        if n <= i8::MAX as usize {
            CodeWidth::I8
        } else if n <= i16::MAX as usize {
            CodeWidth::I16
        } else {
            CodeWidth::I32
        }
    }

    /// Bytes per code sum.
    pub fn bytes(self) -> u64 {
        match self {
            CodeWidth::I8 => 1,
            CodeWidth::I16 => 2,
            CodeWidth::I32 => 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use gradcomp_compress::{CompressorConfig, RngKey, UnitContext};

    use super::*;

    const EVERY: [Combine; 9] = [
        Combine::DenseSum,
        Combine::HalfSum,
        Combine::TernarySum,
        Combine::SharedIndexSum,
        Combine::Gather,
        Combine::MajorityVote,
        Combine::SenderMean { clip: false },
        Combine::SenderMean { clip: true },
        Combine::InRounds,
    ];

    #[test]
    fn every_combine_has_a_default_topology_that_carries_it_and_uncompressed_units_are_summed() {
        for combine in EVERY {
            let default = default_topology(combine);
            assert!(accepts(combine, default), "{combine:?} on {default:?}");
            assert!(!topology_for(combine).is_empty());
            for topology in [Topology::Allreduce, Topology::Allgather, Topology::ReduceScatter] {
                if combine != Combine::InRounds && accepts(combine, topology) {
                    assert_eq!(Route::of(true, topology, combine), Some(Route::SumF32), "{combine:?}");
                }
            }
        }
        assert_eq!(
            Route::of(false, Topology::Allreduce, Combine::Gather),
            None,
            "allreduce cannot sum these"
        );
        assert!(!accepts(Combine::InRounds, Topology::Allgather), "PowerSGD's rounds are allreduces");
    }

    /// The PyTorch front's runners refuse what torch.distributed or a DDP
    /// hook cannot carry; gradcomp's own loop refuses nothing.
    #[test]
    fn each_runner_refuses_only_what_it_cannot_carry() {
        let all =
            [Topology::Allreduce, Topology::Allgather, Topology::ParameterServer, Topology::ReduceScatter];
        let refused = |r: Runner| all.into_iter().filter(|t| t.refused_by(r).is_some()).collect::<Vec<_>>();
        assert_eq!(refused(Runner::Own), []);
        assert_eq!(refused(Runner::TorchRounds), [Topology::ParameterServer]);
        assert_eq!(refused(Runner::DdpHook), [Topology::ParameterServer, Topology::ReduceScatter]);
    }

    /// The topology is inert exactly where the table gives one route on
    /// every collective topology that carries the messages.
    #[test]
    fn the_topology_changes_nothing_only_where_every_collective_routes_alike() {
        let inert: Vec<Combine> = EVERY.into_iter().filter(|&c| topology_changes_nothing(c)).collect();
        assert_eq!(inert, [Combine::DenseSum, Combine::HalfSum, Combine::SharedIndexSum]);
    }

    /// The bytes a route prices are what the codec and the sums carry.
    #[test]
    fn upload_bytes_count_what_each_route_carries() {
        let mut msg = Message::default();
        let ctx = UnitContext { key: RngKey::new(1, 0, 0, 0), loss: None };
        let g: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        CompressorConfig::terngrad().build().compress(&g, &ctx, &mut msg);
        let size = MessageSize::of(&msg);
        assert_eq!(Route::SumCodes.upload_bytes(&size, 4), 1000);
        assert_eq!(Route::SumCodes.upload_bytes(&size, 200), 2000, "i16 sums past 127 workers");
        assert_eq!(Route::Gather.upload_bytes(&size, 4), codec::encoded_len(&msg) as u64);
        let mut c = CompressorConfig::randk(0.01);
        if let CompressorConfig::Randk(r) = &mut c {
            r.same_seed = true;
        }
        c.build().compress(&g, &ctx, &mut msg);
        assert_eq!(Route::SumF32.upload_bytes(&MessageSize::of(&msg), 4), 4 * 10, "the k values alone");
        CompressorConfig::dense().build().compress(&g, &ctx, &mut msg);
        assert_eq!(Route::SumF32.upload_bytes(&MessageSize::of(&msg), 4), 4000);
        assert_eq!(Route::InRounds.upload_bytes(&MessageSize::of(&msg), 4), 0);
    }
}
