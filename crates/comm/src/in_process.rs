//! N workers as threads of one process (the embedded default).
//!
//! Every operation is one or two rounds of the same three-phase exchange:
//! 1. **arrive**: each rank posts a description of its contribution (the
//!    operation, a pointer to its buffer, a length) and waits, with a
//!    timeout, until all ranks have posted. The last to arrive checks that
//!    the posts agree; every rank sees the same verdict.
//! 2. **work**: each rank reads what it needs straight from its peers'
//!    buffers (no intermediate copies): an allreduce splits the elements into
//!    N chunks, rank r sums chunk r over all ranks in rank order and writes
//!    the result into every rank's buffer, so each element is computed once
//!    and every replica gets the same bits.
//! 3. **release**: each rank waits until all have finished reading, so no
//!    buffer is returned to its owner while a peer may still touch it. This
//!    wait has no timeout because phase 2 never blocks.
//!
//! A handle dropped while its thread unwinds from a panic (or dropped at all
//! while others still expect it) marks its rank as failed; every waiting or
//! later call then returns [`CommError::PeerFailed`] naming it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use half::f16;
use thiserror::Error;

use crate::collective::{Aggregate, Collective, CommError, Gathered, ServerPlacement};
use crate::op::{OpKind, Reduction};

/// Options of an in-process group; `build` makes the per-rank handles.
#[derive(Clone, Debug)]
pub struct InProcessGroup {
    pub workers: usize,
    /// How long an operation waits for peers to arrive.
    pub timeout: Duration,
    /// Largest message (bytes) an allgatherv, broadcast or push may carry.
    pub max_message_bytes: usize,
}

impl InProcessGroup {
    pub fn new(workers: usize) -> Self {
        Self { workers, timeout: Duration::from_secs(300), max_message_bytes: 1 << 31 }
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn max_message_bytes(mut self, b: usize) -> Self {
        self.max_message_bytes = b;
        self
    }

    /// One handle per rank, in rank order; move each to its worker thread.
    pub fn build(self) -> Result<Vec<InProcessCollective>, CommError> {
        let n = self.workers;
        if n == 0 {
            return Err(CommError::Invalid("a group needs at least one worker".into()));
        }
        let shared = Shared::new(n, self.timeout, self.max_message_bytes);
        Ok((0..n).map(|rank| InProcessCollective::join(rank, Arc::clone(&shared))).collect())
    }
}

/// A worker thread of [`InProcessGroup::run`] that panicked.
#[derive(Clone, Debug, Error, PartialEq)]
#[error("worker {rank} panicked: {message}")]
pub struct WorkerPanic {
    pub rank: usize,
    pub message: String,
}

impl InProcessGroup {
    /// Runs `f` on every worker, each on a thread of its own (`worker-R`)
    /// with its rank's handle, and returns what each returned, in rank
    /// order. A worker that panics is a [`WorkerPanic`] in its place (its
    /// dropped handle has already made its peers' collectives fail with
    /// [`CommError::PeerFailed`], so they return rather than hang).
    pub fn run<T: Send>(
        self,
        f: impl Fn(InProcessCollective) -> T + Sync,
    ) -> Result<Vec<Result<T, WorkerPanic>>, CommError> {
        let handles = self.build()?;
        let f = &f;
        Ok(std::thread::scope(|s| {
            let threads: Vec<_> = handles
                .into_iter()
                .enumerate()
                .map(|(rank, c)| {
                    std::thread::Builder::new()
                        .name(format!("worker-{rank}"))
                        .spawn_scoped(s, move || f(c))
                        .expect("spawning a worker thread")
                })
                .collect();
            threads
                .into_iter()
                .enumerate()
                .map(|(rank, t)| t.join().map_err(|p| WorkerPanic { rank, message: panic_message(&*p) }))
                .collect()
        }))
    }
}

/// The text of a panic's payload (`panic!` with a literal or a format).
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// One rank's contribution to a round.
#[derive(Clone, Copy, Debug, Default)]
struct Post {
    op: Option<OpKind>,
    /// Address of the rank's buffer (a pointer kept as an integer so posts are `Send`).
    addr: usize,
    /// Elements (reductions) or bytes (byte messages).
    len: usize,
    /// Broadcast root, or parameter-server rank.
    root: usize,
    /// Parameter-server placement code, to check that all ranks agree.
    placement: u8,
}

struct State {
    generation: u64,
    arrived: Vec<bool>,
    n_arrived: usize,
    posts: Vec<Post>,
    verdict: Result<(), CommError>,
    readers: usize,
    failed: Option<usize>,
    aggregate_error: Option<String>,
}

struct Shared {
    n: usize,
    timeout: Duration,
    max_message: usize,
    state: Mutex<State>,
    cv: Condvar,
    /// The groups [`Collective::duplicate`] made, in the order the ranks
    /// asked: a rank's k-th call joins the k-th, made by whichever rank
    /// asked first.
    duplicates: Mutex<Vec<Arc<Shared>>>,
}

impl Shared {
    fn new(n: usize, timeout: Duration, max_message: usize) -> Arc<Self> {
        Arc::new(Shared {
            n,
            timeout,
            max_message,
            state: Mutex::new(State {
                generation: 0,
                arrived: vec![false; n],
                n_arrived: 0,
                posts: vec![Post::default(); n],
                verdict: Ok(()),
                readers: 0,
                failed: None,
                aggregate_error: None,
            }),
            cv: Condvar::new(),
            duplicates: Mutex::new(Vec::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a thread panicked while holding it; the state
        // itself is still consistent (every critical section is panic-free),
        // and the panicking rank is recorded as failed by its handle's drop.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A rank's handle to an in-process group. See the module docs.
pub struct InProcessCollective {
    rank: usize,
    shared: Arc<Shared>,
    /// This round's posts, copied out of the shared state (no allocation per call).
    posts: Vec<Post>,
    /// The server's view of the uploads.
    uploads: Gathered,
    /// How many second channels this rank has asked for.
    duplicates: usize,
}

/// Decrements the reader count even if the work phase unwinds.
struct ReleaseGuard<'a> {
    shared: &'a Shared,
}

impl Drop for ReleaseGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.readers -= 1;
        if st.readers == 0 {
            self.shared.cv.notify_all();
        } else {
            while st.readers > 0 {
                st = self.shared.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

fn check_posts(posts: &[Post], max_message: usize) -> Result<(), CommError> {
    let first = posts[0];
    for (r, p) in posts.iter().enumerate() {
        if p.op != first.op {
            return Err(CommError::Mismatch {
                detail: format!("rank 0 called {}, rank {r} called {}", name(first.op), name(p.op)),
            });
        }
        let op = p.op.expect("arrived posts carry an op");
        match op {
            _ if op.is_allreduce() && p.len != first.len => {
                return Err(CommError::Mismatch {
                    detail: format!(
                        "{}: rank 0 has {} elements, rank {r} has {}",
                        op.name(),
                        first.len,
                        p.len
                    ),
                });
            }
            OpKind::Broadcast | OpKind::PsPush | OpKind::PsPull
                if p.root != first.root || p.placement != first.placement =>
            {
                return Err(CommError::Mismatch {
                    detail: format!(
                        "{}: rank 0 names root {}, rank {r} names root {}",
                        op.name(),
                        first.root,
                        p.root
                    ),
                });
            }
            // An alltoallv's post carries its count of messages as `root`.
            OpKind::Alltoallv if p.root != posts.len() => {
                return Err(CommError::Invalid(format!(
                    "alltoallv: rank {r} sent {} messages to {} ranks; send one per rank",
                    p.root,
                    posts.len()
                )));
            }
            OpKind::Allgatherv | OpKind::Alltoallv | OpKind::Broadcast | OpKind::PsPush | OpKind::PsPull
                if p.len > max_message =>
            {
                return Err(CommError::TooLarge { op: op.name(), bytes: p.len, limit: max_message });
            }
            _ => {}
        }
    }
    Ok(())
}

fn name(op: Option<OpKind>) -> &'static str {
    op.map_or("nothing", OpKind::name)
}

impl InProcessCollective {
    /// Rank `rank`'s handle to the group `shared`.
    fn join(rank: usize, shared: Arc<Shared>) -> Self {
        let n = shared.n;
        InProcessCollective {
            rank,
            shared,
            posts: vec![Post::default(); n],
            uploads: Gathered::default(),
            duplicates: 0,
        }
    }

    /// Runs one round: arrive, `work` on all posts, release.
    fn round<R>(&mut self, post: Post, work: impl FnOnce(&[Post]) -> R) -> Result<R, CommError> {
        let shared = Arc::clone(&self.shared);
        let op = post.op.expect("rounds carry an op");
        let mut st = shared.lock();
        if let Some(r) = st.failed {
            return Err(CommError::PeerFailed { rank: r });
        }
        st.posts[self.rank] = post;
        st.arrived[self.rank] = true;
        st.n_arrived += 1;
        let generation = st.generation;
        if st.n_arrived == shared.n {
            st.n_arrived = 0;
            st.arrived.iter_mut().for_each(|a| *a = false);
            st.generation += 1;
            st.verdict = check_posts(&st.posts, shared.max_message);
            st.readers = if st.verdict.is_ok() { shared.n } else { 0 };
            shared.cv.notify_all();
        } else {
            let deadline = Instant::now() + shared.timeout;
            while st.generation == generation {
                if let Some(r) = st.failed {
                    return Err(CommError::PeerFailed { rank: r });
                }
                let now = Instant::now();
                if now >= deadline {
                    let waiting_for: Vec<usize> = (0..shared.n).filter(|&r| !st.arrived[r]).collect();
                    // Break the group so the other waiters fail now, not after their own timeout.
                    st.failed = waiting_for.first().copied();
                    shared.cv.notify_all();
                    return Err(CommError::Timeout {
                        op: op.name(),
                        seconds: shared.timeout.as_secs_f64(),
                        waiting_for,
                    });
                }
                st = shared.cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        st.verdict.clone()?;
        self.posts.copy_from_slice(&st.posts);
        drop(st);
        let _release = ReleaseGuard { shared: &shared };
        Ok(work(&self.posts))
    }

    /// Rank r's share `[lo, hi)` of `len` elements.
    fn chunk(&self, len: usize) -> (usize, usize) {
        let n = self.shared.n;
        (len * self.rank / n, len * (self.rank + 1) / n)
    }

    fn reduce<T: Copy + Default, F: Fn(T, T) -> T>(
        &mut self,
        op: OpKind,
        buf: &mut [T],
        combine: F,
    ) -> Result<(), CommError> {
        let post =
            Post { op: Some(op), addr: buf.as_mut_ptr() as usize, len: buf.len(), ..Default::default() };
        let (lo, hi) = self.chunk(buf.len());
        self.round(post, |posts| {
            // SAFETY: every post points at a live buffer of `len` T whose
            // owner is blocked in this round until all ranks release; this
            // rank alone reads and writes elements lo..hi of every buffer
            // (the chunks of different ranks are disjoint), and slices are
            // made only over those elements.
            unsafe { reduce_chunk(posts, lo, hi, combine) }
        })
    }
}

/// Elements per block of the reduction: fits L1 with room for N inputs.
const BLOCK: usize = 1024;

/// Computes `combine` over all posts (in rank order) for elements `lo..hi`
/// and writes the result into every post's buffer.
///
/// # Safety
/// Each post's `addr` must point at a live buffer of at least `hi` elements
/// of `T` that no one else touches in `lo..hi` during the call.
unsafe fn reduce_chunk<T: Copy + Default, F: Fn(T, T) -> T>(
    posts: &[Post],
    lo: usize,
    hi: usize,
    combine: F,
) {
    let mut acc = [T::default(); BLOCK];
    let mut at = lo;
    while at < hi {
        let n = (hi - at).min(BLOCK);
        let acc = &mut acc[..n];
        let part = |p: &Post| unsafe { std::slice::from_raw_parts_mut((p.addr as *mut T).add(at), n) };
        acc.copy_from_slice(part(&posts[0]));
        for p in &posts[1..] {
            for (a, &v) in acc.iter_mut().zip(part(p).iter()) {
                *a = combine(*a, v);
            }
        }
        for p in posts {
            part(p).copy_from_slice(acc);
        }
        at += n;
    }
}

/// The bytes a post describes.
///
/// # Safety
/// The post must describe a live byte buffer that is not written during the borrow.
unsafe fn bytes_of<'a>(p: &Post) -> &'a [u8] {
    if p.len == 0 {
        return &[];
    }
    unsafe { std::slice::from_raw_parts(p.addr as *const u8, p.len) }
}

fn byte_post(op: OpKind, bytes: &[u8], root: usize, placement: u8) -> Post {
    Post { op: Some(op), addr: bytes.as_ptr() as usize, len: bytes.len(), root, placement }
}

impl Collective for InProcessCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.n
    }

    fn allreduce(&mut self, r: Reduction<'_>) -> Result<(), CommError> {
        let kind = r.kind();
        match r {
            Reduction::SumF32(b) => self.reduce(kind, b, |a, b| a + b),
            Reduction::SumF16(b) => self.reduce(kind, b, |a, b| f16::from_f32(a.to_f32() + b.to_f32())),
            Reduction::SumI32(b) => self.reduce(kind, b, i32::wrapping_add),
            Reduction::SumI16(b) => self.reduce(kind, b, i16::wrapping_add),
            Reduction::SumI8(b) => self.reduce(kind, b, i8::wrapping_add),
            Reduction::MaxF32(b) => self.reduce(kind, b, f32::max),
        }
    }

    fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError> {
        self.round(byte_post(OpKind::Allgatherv, send, 0, 0), |posts| {
            let dst = recv.set_from_parts(posts.iter().map(|p| p.len));
            let mut at = 0;
            for p in posts {
                // SAFETY: peers' send buffers are live and unmodified until release.
                dst[at..at + p.len].copy_from_slice(unsafe { bytes_of(p) });
                at += p.len;
            }
        })
    }

    /// Each rank copies its message out of every peer's `send` (posted as a
    /// pointer to it, with its longest message as the length the size
    /// check reads and its count of messages as `root`).
    fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError> {
        let me = self.rank;
        let post = Post {
            op: Some(OpKind::Alltoallv),
            addr: send as *const Gathered as usize,
            len: send.longest(),
            root: send.len(),
            placement: 0,
        };
        self.round(post, |posts| {
            // SAFETY: every post points at its owner's live `Gathered`, which
            // the owner, blocked in this round until all ranks release, does
            // not touch; it is only read here. The check of the posts made
            // sure each holds one message per rank.
            let from = |p: &Post| unsafe { (*(p.addr as *const Gathered)).get(me) };
            let dst = recv.set_from_parts(posts.iter().map(|p| from(p).len()));
            let mut at = 0;
            for p in posts {
                let m = from(p);
                dst[at..at + m.len()].copy_from_slice(m);
                at += m.len();
            }
        })
    }

    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        if root >= self.shared.n {
            return Err(CommError::Invalid(format!("broadcast root {root} outside 0..{}", self.shared.n)));
        }
        let me = self.rank;
        let post = byte_post(OpKind::Broadcast, buf, root, 0);
        self.round(post, |posts| {
            let src = posts[root];
            if me != root {
                buf.clear();
                // SAFETY: the root's buffer is live and unmodified until release.
                buf.extend_from_slice(unsafe { bytes_of(&src) });
            }
        })
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        self.round(Post { op: Some(OpKind::Barrier), ..Default::default() }, |_| ())
    }

    /// A group of its own among the same threads: the k-th call on every
    /// rank joins the same one. A peer that fails in one group is not seen in
    /// the other until its handle there drops too (as it does when its
    /// thread ends).
    fn duplicate(&mut self) -> Result<Option<Box<dyn Collective>>, CommError> {
        let k = self.duplicates;
        self.duplicates += 1;
        let shared = &self.shared;
        let child = {
            let mut made = shared.duplicates.lock().unwrap_or_else(|e| e.into_inner());
            while made.len() <= k {
                made.push(Shared::new(shared.n, shared.timeout, shared.max_message));
            }
            Arc::clone(&made[k])
        };
        Ok(Some(Box::new(InProcessCollective::join(self.rank, child))))
    }

    fn push_pull(
        &mut self,
        placement: ServerPlacement,
        upload: &[u8],
        aggregate: &mut Aggregate<'_>,
        download: &mut Vec<u8>,
    ) -> Result<(), CommError> {
        let n = self.shared.n;
        let server = placement.server_rank(n);
        let me = self.rank;
        let dedicated = placement == ServerPlacement::Dedicated;
        if dedicated && me == server && !upload.is_empty() {
            return Err(CommError::Invalid("a dedicated server uploads nothing".into()));
        }
        let code = dedicated as u8;
        // Round 1: uploads reach the server, which aggregates.
        let mut uploads = std::mem::take(&mut self.uploads);
        let shared = Arc::clone(&self.shared);
        let pushed = self.round(byte_post(OpKind::PsPush, upload, server, code), |posts| {
            if me != server {
                return;
            }
            uploads.clear();
            for (r, p) in posts.iter().enumerate() {
                if !(dedicated && r == server) {
                    // SAFETY: uploads are live and unmodified until release.
                    uploads.push(unsafe { bytes_of(p) });
                }
            }
            download.clear();
            // Set or cleared every round; the workers read it after round 2,
            // before anyone can reach the next round's work phase.
            shared.lock().aggregate_error = aggregate(&uploads, download).err();
        });
        self.uploads = uploads;
        pushed?;

        // Round 2: the download (or the server's error) reaches every rank.
        let post = if me == server {
            byte_post(OpKind::PsPull, download, server, code)
        } else {
            Post { op: Some(OpKind::PsPull), root: server, placement: code, ..Default::default() }
        };
        self.round(post, |posts| {
            let src = posts[server];
            if me != server {
                download.clear();
                // SAFETY: the server's download is live and unmodified until release.
                download.extend_from_slice(unsafe { bytes_of(&src) });
            }
        })?;
        // Set in round 1's work phase, which ended before round 2 began.
        if let Some(e) = self.shared.lock().aggregate_error.clone() {
            return Err(CommError::Aggregate(e));
        }
        Ok(())
    }
}

impl Drop for InProcessCollective {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if st.failed.is_none() {
            st.failed = Some(self.rank);
        }
        self.shared.cv.notify_all();
    }
}
