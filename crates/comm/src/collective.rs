//! The [`Collective`] trait: the contract every backend implements.

use half::f16;
use thiserror::Error;

use crate::Reduction;

/// Why a collective operation failed. Every rank taking part gets an error
/// (never a hang) when any of them fails.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CommError {
    #[error("worker {rank} failed or left the group; the run cannot continue without it")]
    PeerFailed { rank: usize },
    #[error("timed out after {seconds:.0} s in {op} waiting for worker(s) {waiting_for:?}; raise the collective timeout if they are just slow")]
    Timeout { op: &'static str, seconds: f64, waiting_for: Vec<usize> },
    #[error("workers disagree on the operation: {detail}")]
    Mismatch { detail: String },
    #[error("{op} message of {bytes} bytes exceeds the limit of {limit} bytes")]
    TooLarge { op: &'static str, bytes: usize, limit: usize },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("the parameter server's aggregation failed: {0}")]
    Aggregate(String),
    #[error("MPI: {0}")]
    Mpi(String),
    /// An error a collective of another framework raised (torch.distributed,
    /// torchft's group), as it said it: a transport's failure, not an
    /// argument of gradcomp's.
    #[error("{0}")]
    Backend(String),
}

/// Where the parameter server runs (`comm.server` in a configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerPlacement {
    /// Rank 0 is both a worker and the server (its upload never crosses a link).
    #[default]
    CoLocated,
    /// The last rank is a server only: it uploads nothing and trains nothing.
    Dedicated,
}

impl ServerPlacement {
    /// The server's rank in a world of `world_size` ranks.
    pub fn server_rank(self, world_size: usize) -> usize {
        match self {
            ServerPlacement::CoLocated => 0,
            ServerPlacement::Dedicated => world_size - 1,
        }
    }
}

/// The messages of all ranks after an allgatherv, in rank order, in one
/// reused buffer.
#[derive(Clone, Debug, Default)]
pub struct Gathered {
    bytes: Vec<u8>,
    /// `ends[r]` is where rank r's message ends in `bytes`.
    ends: Vec<usize>,
}

impl Gathered {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Appends the next rank's message.
    pub fn push(&mut self, msg: &[u8]) {
        self.bytes.extend_from_slice(msg);
        self.ends.push(self.bytes.len());
    }

    /// Rebuilds from a concatenation and per-rank lengths.
    pub fn set_from_parts(&mut self, lens: impl IntoIterator<Item = usize>) -> &mut Vec<u8> {
        self.ends.clear();
        let mut end = 0;
        for l in lens {
            end += l;
            self.ends.push(end);
        }
        self.bytes.clear();
        self.bytes.resize(end, 0);
        &mut self.bytes
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Rank `r`'s message.
    pub fn get(&self, r: usize) -> &[u8] {
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        &self.bytes[start..self.ends[r]]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        (0..self.len()).map(|r| self.get(r))
    }

    /// Total bytes of all messages.
    pub fn total_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Every message, concatenated in rank order.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The length of the longest message (0 when there is none).
    pub fn longest(&self) -> usize {
        self.iter().map(<[u8]>::len).max().unwrap_or(0)
    }

    /// Appends a byte to every message (a wrapper's trailer, which
    /// [`Gathered::split_trailers`] takes off again), in place.
    pub fn push_trailer(&mut self, byte: u8) {
        let n = self.len();
        self.bytes.resize(self.bytes.len() + n, 0);
        // From the last message back, each moves up by the trailers after it.
        let mut end = self.bytes.len();
        for r in (0..n).rev() {
            let start = if r == 0 { 0 } else { self.ends[r - 1] };
            let old_end = self.ends[r];
            end -= 1;
            self.bytes[end] = byte;
            let len = old_end - start;
            self.bytes.copy_within(start..old_end, end - len);
            end -= len;
            self.ends[r] = end + len + 1;
        }
    }

    /// Takes the last byte off every rank's message (a trailer a wrapper
    /// appended) and returns them in rank order; `None`, with nothing
    /// changed, when a message is empty.
    pub fn split_trailers(&mut self) -> Option<Vec<u8>> {
        if self.iter().any(<[u8]>::is_empty) {
            return None;
        }
        let mut trailers = Vec::with_capacity(self.len());
        let (mut start, mut write) = (0, 0);
        for end in &mut self.ends {
            trailers.push(self.bytes[*end - 1]);
            self.bytes.copy_within(start..*end - 1, write);
            write += *end - 1 - start;
            start = *end;
            *end = write;
        }
        self.bytes.truncate(write);
        Some(trailers)
    }
}

/// The aggregation a parameter server runs on the uploads (rank order; the
/// dedicated server's own empty upload is not included) to produce the
/// download. An `Err` reaches every rank as [`CommError::Aggregate`].
pub type Aggregate<'a> = dyn FnMut(&Gathered, &mut Vec<u8>) -> Result<(), String> + 'a;

/// A worker's view of the group: its rank, the world size, and collective
/// operations that every rank calls in the same order with matching
/// arguments.
///
/// # Contract
/// - Every operation blocks until all ranks have called it. A rank that
///   panics, returns early or leaves the group makes the others' calls return
///   [`CommError::PeerFailed`] naming it; a rank that does not arrive within
///   the backend's timeout makes them return [`CommError::Timeout`]. Nothing
///   hangs.
/// - Ranks that call different operations, or allreduce buffers of
///   different lengths, get [`CommError::Mismatch`] on every rank.
/// - Buffers are caller-owned; the in-process backend does not allocate per
///   call once `Gathered` and download buffers have grown to size.
/// - Results are bitwise identical on all ranks (every element of a reduction
///   is computed once and copied), so replicas stay identical.
/// - A backend counts nothing: wrapped in [`Metered`](crate::Metered), any
///   collective's operations are counted in logical message sizes (what the
///   codec produced, not backend-internal traffic, which the
///   [`NetworkModel`](crate::NetworkModel) derives per algorithm).
pub trait Collective: Send {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;

    /// The elementwise reduction `r` across ranks, in place: the one
    /// allreduce a backend implements, whatever the element type. Every rank
    /// passes the same variant and length.
    fn allreduce(&mut self, r: Reduction<'_>) -> Result<(), CommError>;

    /// Elementwise sum across ranks, in place.
    fn allreduce_sum_f32(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.allreduce(Reduction::SumF32(buf))
    }

    /// Elementwise mean across ranks, in place: the sum divided by the
    /// world (the model's buffers, an optimizer's state, a gradient
    /// averaged).
    fn allreduce_mean_f32(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.allreduce_sum_f32(buf)?;
        let n = self.world_size() as f32;
        buf.iter_mut().for_each(|v| *v /= n);
        Ok(())
    }

    /// The elementwise mean of `buf` over the ranks that contribute, in
    /// place on every rank, in one allreduce: a rank that does not
    /// contribute sends zeros and takes the others' mean (a replica healed
    /// into a round, or sitting it out). Returns how many contributed; none
    /// is an error, as there is no mean. The count rides as one more value,
    /// exact in f32 up to 2^24 ranks.
    fn allreduce_mean_among_f32(&mut self, buf: &mut [f32], contributes: bool) -> Result<usize, CommError> {
        let mut sum = Vec::with_capacity(buf.len() + 1);
        if contributes {
            sum.extend_from_slice(buf);
        } else {
            sum.resize(buf.len(), 0.0);
        }
        sum.push(if contributes { 1.0 } else { 0.0 });
        self.allreduce_sum_f32(&mut sum)?;
        let n = sum[buf.len()];
        if n < 1.0 {
            return Err(CommError::Invalid(
                "a mean over no contributing rank: every rank passed contributes = false".into(),
            ));
        }
        buf.iter_mut().zip(&sum).for_each(|(v, s)| *v = s / n);
        Ok(n as usize)
    }

    /// Elementwise sum of integers, in place (wrapping on overflow).
    fn allreduce_sum_i32(&mut self, buf: &mut [i32]) -> Result<(), CommError> {
        self.allreduce(Reduction::SumI32(buf))
    }

    /// Elementwise sum of 16-bit integers, in place (wrapping): TernGrad's
    /// code sums for 128 to 16383 workers.
    fn allreduce_sum_i16(&mut self, buf: &mut [i16]) -> Result<(), CommError> {
        self.allreduce(Reduction::SumI16(buf))
    }

    /// Elementwise sum of 8-bit integers, in place (wrapping): TernGrad's
    /// code sums for up to 127 workers, a quarter of an f32 allreduce's bytes.
    fn allreduce_sum_i8(&mut self, buf: &mut [i8]) -> Result<(), CommError> {
        self.allreduce(Reduction::SumI8(buf))
    }

    /// Elementwise sum of IEEE half-precision values, in place: each
    /// addition is done in f32 and rounded to half (to nearest, ties to
    /// even), as a half-precision reduction does on the wire (fp16
    /// compression, as PyTorch's `fp16_compress_hook`). The order of the
    /// additions is the backend's; every rank gets the same bits.
    fn allreduce_sum_f16(&mut self, buf: &mut [f16]) -> Result<(), CommError> {
        self.allreduce(Reduction::SumF16(buf))
    }

    /// Elementwise max across ranks, in place (TernGrad's shared scalers).
    fn allreduce_max_f32(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.allreduce(Reduction::MaxF32(buf))
    }

    /// Every rank contributes a message of any length; every rank receives
    /// all of them in rank order.
    fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError>;

    /// Every rank sends `send.get(j)` to rank j (`send` holds one message
    /// per rank, in rank order, its own included) and receives in `recv`
    /// the message every rank sent it, in rank order: an all-to-all with
    /// per-peer sizes (`MPI_Alltoallv`), what a reduce-scatter of
    /// compressed shards travels in. Errors if `send` does not hold one
    /// message per rank.
    fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError>;

    /// `buf` on every rank becomes the root's `buf`.
    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError>;

    fn barrier(&mut self) -> Result<(), CommError>;

    /// The parameter-server pattern: every worker pushes `upload` to the
    /// server rank; the server runs `aggregate` on the uploads and every rank
    /// receives its result in `download`. `aggregate` is called on the
    /// server only. With [`ServerPlacement::Dedicated`] the server rank's own
    /// `upload` must be empty and is not passed to `aggregate`.
    fn push_pull(
        &mut self,
        placement: ServerPlacement,
        upload: &[u8],
        aggregate: &mut Aggregate<'_>,
        download: &mut Vec<u8>,
    ) -> Result<(), CommError>;

    /// Gives up on the group after an error on this rank that its peers may
    /// not see (they may be waiting in a collective for it). The in-process
    /// backend needs nothing (dropping the handle wakes every peer with
    /// [`CommError::PeerFailed`]), so the default does nothing; the MPI
    /// backend ends the whole job with `code`, since MPI cannot cancel a
    /// collective a peer is blocked in.
    fn abandon(&mut self, _code: i32) {}

    /// A second channel among the same workers, whose operations may run on
    /// another thread while this one's run (`MPI_Comm_dup` under
    /// `MPI_THREAD_MULTIPLE`; a second in-process group): what lets a
    /// round's exchange overlap the steps that go on computing. It is not
    /// metered by a [`Metered`](crate::Metered) around this one. Every worker
    /// calls it at the same point, as any collective call. `Ok(None)`: this
    /// backend has no second channel (the default), and the caller runs its
    /// rounds on this one.
    fn duplicate(&mut self) -> Result<Option<Box<dyn Collective>>, CommError> {
        Ok(None)
    }
}

/// Forwards every operation: a boxed or borrowed collective is one.
macro_rules! forward_collective {
    ($($ty:ty),*) => {$(
        impl<C: Collective + ?Sized> Collective for $ty {
            fn rank(&self) -> usize { (**self).rank() }
            fn world_size(&self) -> usize { (**self).world_size() }
            fn allreduce(&mut self, r: Reduction<'_>) -> Result<(), CommError> { (**self).allreduce(r) }
            fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError> { (**self).allgatherv(send, recv) }
            fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError> { (**self).alltoallv(send, recv) }
            fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> { (**self).broadcast(buf, root) }
            fn barrier(&mut self) -> Result<(), CommError> { (**self).barrier() }
            fn push_pull(
                &mut self,
                placement: ServerPlacement,
                upload: &[u8],
                aggregate: &mut Aggregate<'_>,
                download: &mut Vec<u8>,
            ) -> Result<(), CommError> {
                (**self).push_pull(placement, upload, aggregate, download)
            }
            fn abandon(&mut self, code: i32) { (**self).abandon(code) }
            fn duplicate(&mut self) -> Result<Option<Box<dyn Collective>>, CommError> { (**self).duplicate() }
        }
    )*};
}

forward_collective!(Box<C>, &mut C);
