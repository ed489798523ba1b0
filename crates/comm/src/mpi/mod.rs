//! The MPI backend (feature `mpi`): one worker per MPI rank, launched with
//! `mpirun -np N`. Built on the `mpi` crate (rsmpi) and the system's MPI
//! (Debian: `libopenmpi-dev openmpi-bin`, plus `libclang-dev` for bindgen).
//!
//! Operations are MPI's blocking collectives (the fastest path Open MPI
//! has). Bounded waits come from a watchdog thread: before each call the
//! rank arms a deadline, and if the call has not returned by then the
//! watchdog prints which rank timed out in which operation and exits the
//! process non-zero, which makes `mpirun` terminate the whole job. A rank
//! that panics, or drops its collective while panicking, calls `MPI_Abort`
//! the same way. So under MPI a failure ends the job within the timeout with
//! the failed rank named on stderr; it does not come back as a `Result` on
//! the other ranks (MPI cannot cancel a collective in flight).
//!
//! A rank that stops (SIGSTOP, a frozen node) or dies is found sooner than
//! the timeout: ranks beat to each other over UDP ([`crate::heartbeat`]), and
//! the watchdog of a rank waiting in a collective names a predecessor silent
//! for longer than the heartbeat bound (10 s by default) and ends the job.

mod in_place;
mod watchdog;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mpi::collective::SystemOperation;
use mpi::datatype::{Equivalence, Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;

use crate::collective::{Aggregate, Collective, CommError, Gathered, ServerPlacement};
use crate::heartbeat::{self, Heartbeat};
use crate::op::{OpKind, Reduction};
use watchdog::Watchdog;
pub use watchdog::{DEFAULT_HEARTBEAT, TIMEOUT_EXIT_CODE};

/// Bytes of a rank's record in the heartbeat address exchange: port (2),
/// nonce (8), address count (1), up to 16 IPv4 addresses (4 each).
const RECORD: usize = 11 + 16 * 4;

/// Binds this rank's heartbeat socket, trades addresses with every rank (one
/// allgather), starts beating to the successor at each of its addresses, and
/// waits (at most 3 s) for the predecessor's first beat. All ranks agree
/// (one allreduce) to run without heartbeats if any of them did not hear
/// its predecessor, since a rank that expects beats that never come would
/// raise a false alarm; rank 0 then says so, and the per-operation timeout
/// still bounds every wait.
fn start_heartbeat(
    world: &SimpleCommunicator,
    rank: usize,
    size: usize,
) -> Result<Option<Heartbeat>, CommError> {
    if size < 2 {
        return Ok(None);
    }
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok();
    let port = socket.as_ref().and_then(|s| s.local_addr().ok()).map_or(0, |a| a.port());
    let nonce =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
    let addrs = heartbeat::local_ipv4();
    let mut mine = [0u8; RECORD];
    mine[..2].copy_from_slice(&port.to_le_bytes());
    mine[2..10].copy_from_slice(&nonce.to_le_bytes());
    let n = addrs.len().min(16);
    mine[10] = n as u8;
    for (i, a) in addrs.iter().take(n).enumerate() {
        mine[11 + 4 * i..15 + 4 * i].copy_from_slice(&a.octets());
    }
    let mut all = vec![0u8; RECORD * size];
    world.all_gather_into(&mine[..], &mut all[..]);
    let record = |r: usize| &all[r * RECORD..(r + 1) * RECORD];
    let job_nonce = u64::from_le_bytes(record(0)[2..10].try_into().expect("8 bytes"));
    let s = record((rank + 1) % size);
    let s_port = u16::from_le_bytes([s[0], s[1]]);
    let successor: Vec<std::net::SocketAddr> = (0..usize::from(s[10]).min(16))
        .map(|i| {
            std::net::SocketAddr::from(([s[11 + 4 * i], s[12 + 4 * i], s[13 + 4 * i], s[14 + 4 * i]], s_port))
        })
        .collect();
    let started = match socket {
        Some(socket) if s_port != 0 => {
            Heartbeat::start(socket, rank, (rank + size - 1) % size, successor, job_nonce).ok()
        }
        _ => None,
    };
    let heard = started.as_ref().is_some_and(|h| h.first_beat(Duration::from_secs(3)));
    let ok = i32::from(heard);
    let mut all_ok = 0i32;
    world.all_reduce_into(&ok, &mut all_ok, SystemOperation::min());
    if all_ok == 1 {
        return Ok(started);
    }
    if rank == 0 {
        eprintln!(
            "warning: MPI heartbeats are off (a rank could not reach its successor over UDP); \
             a stopped or dead rank is found by comm.timeout_seconds alone"
        );
    }
    Ok(None)
}

/// What each channel (the world, a duplicate) keeps for itself, empty at
/// first: the signatures agreed on and the buffers its calls reuse.
#[derive(Default)]
struct ChannelState {
    /// (operation, length or root) signatures every rank has agreed on.
    agreed: Vec<(OpKind, usize)>,
    /// The (operation, length) pairs of every rank, from [`MpiCollective::gather_lengths`].
    pairs: Vec<Count>,
    counts: Vec<Count>,
    displs: Vec<Count>,
    uploads: Gathered,
    /// An alltoallv's send counts and displacements (`counts` and `displs`
    /// are its receive side).
    send_counts: Vec<Count>,
    send_displs: Vec<Count>,
    /// The server's receive buffer for the uploads.
    flat: Vec<u8>,
}

/// This process's rank of an MPI job.
pub struct MpiCollective {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    timeout: Duration,
    max_message: usize,
    watchdog: Arc<Watchdog>,
    /// This channel's deadline slot in the watchdog (0: the world).
    channel: usize,
    /// Whether MPI runs at `MPI_THREAD_MULTIPLE`, so that a duplicate may
    /// be called from another thread while this one is in a call.
    concurrent: bool,
    own: ChannelState,
    // Declared last: finalizes MPI after everything above is dropped, and
    // after the last duplicate (each holds it too).
    _universe: Arc<mpi::environment::Universe>,
}

impl MpiCollective {
    /// Initializes MPI. `expected_workers` is the world size the run was
    /// configured for: a different one means the binary was started without
    /// `mpirun`, with the wrong `-np`, or by another MPI's launcher (which
    /// silently starts N independent size-1 jobs), and is an error.
    pub fn init(expected_workers: Option<usize>, timeout: Duration) -> Result<Self, CommError> {
        Self::init_with(expected_workers, timeout, false)
    }

    /// [`MpiCollective::init`], asking MPI for `MPI_THREAD_MULTIPLE` when
    /// `concurrent` (a run whose rounds overlap its steps on a
    /// [duplicate](Collective::duplicate) channel). An MPI that does not
    /// offer it leaves the run on one channel ([`Collective::duplicate`] is
    /// `None`), its rounds blocking, and rank 0 says so.
    pub fn init_with(
        expected_workers: Option<usize>,
        timeout: Duration,
        concurrent: bool,
    ) -> Result<Self, CommError> {
        // Serialized: MPI may be called from any thread, one at a time, which
        // ownership of this handle guarantees (see the `Send` impl); Multiple
        // for duplicates called from a thread of their own.
        let wanted = if concurrent { mpi::Threading::Multiple } else { mpi::Threading::Serialized };
        let (universe, level) = mpi::initialize_with_threading(wanted)
            .ok_or_else(|| CommError::Mpi("MPI was already initialized in this process".into()))?;
        if level < mpi::Threading::Serialized {
            return Err(CommError::Mpi(format!(
                "the MPI library offers thread level {level:?}; gradcomp needs Serialized"
            )));
        }
        let concurrent = level >= mpi::Threading::Multiple;
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        if let Some(n) = expected_workers {
            if n != size {
                return Err(CommError::Mpi(format!(
                    "the MPI world has {size} rank(s) but {n} workers were configured; launch with \
                     `mpirun -np {n} ...` using the mpirun of the MPI this binary was built against \
                     (Open MPI here); another MPI's launcher starts {n} separate single-rank jobs"
                )));
            }
        }
        if wanted == mpi::Threading::Multiple && !concurrent && rank == 0 {
            eprintln!(
                "warning: the MPI library offers thread level {level:?}, not Multiple: rounds that \
                 could overlap the steps (strategy.delay) block them instead"
            );
        }
        let heartbeat = start_heartbeat(&world, rank, size)?;
        Ok(Self {
            world,
            rank,
            size,
            timeout,
            max_message: 1 << 31,
            watchdog: Watchdog::start(rank, heartbeat),
            channel: 0,
            concurrent,
            own: ChannelState::default(),
            _universe: Arc::new(universe),
        })
    }

    /// How long a peer's heartbeat may be silent, while this rank waits in
    /// a collective, before the job ends naming it ([`DEFAULT_HEARTBEAT`];
    /// zero turns the check off, leaving the per-operation timeout).
    pub fn heartbeat_bound(self, bound: Duration) -> Self {
        self.watchdog.heartbeat_bound_ms.store(bound.as_millis() as u64, Ordering::Relaxed);
        self
    }

    pub fn max_message_bytes(mut self, b: usize) -> Self {
        self.max_message = b;
        self
    }

    /// Ends the whole job now (all ranks), with `code` as exit status.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    /// `MPI_Allreduce` through the `mpi` crate with no checks, agreement or
    /// watchdog: the baseline the benchmark compares this backend against.
    pub fn raw_allreduce_sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        self.world.all_reduce_into(send, recv, mpi::collective::SystemOperation::sum());
    }

    /// Runs one blocking MPI call under the watchdog.
    fn guarded<R>(&self, op: OpKind, f: impl FnOnce(&SimpleCommunicator) -> R) -> R {
        self.watchdog.arm(self.channel, op.name(), self.timeout);
        let r = f(&self.world);
        self.watchdog.disarm(self.channel);
        r
    }

    fn check_len(&self, op: OpKind, bytes: usize) -> Result<(), CommError> {
        if bytes > self.max_message {
            return Err(CommError::TooLarge { op: op.name(), bytes, limit: self.max_message });
        }
        Ok(())
    }

    /// [`Self::agree`] the first time a signature (operation, length or
    /// root) is used, and never again: a training loop repeats the same few
    /// calls, and the agreement cost a 16-byte allgather per call
    /// (11–15% of a 1 MiB allreduce, docs/BENCHMARKS.md). A mismatch in a
    /// signature's first call is an error on every rank; a later mismatch
    /// between two signatures that were each agreed before is left to MPI
    /// and the watchdog (a hang ends the job naming the rank).
    fn agree_once(&mut self, op: OpKind, len: usize) -> Result<(), CommError> {
        if self.own.agreed.contains(&(op, len)) {
            return Ok(());
        }
        self.agree(op, len)?;
        self.own.agreed.push((op, len));
        Ok(())
    }

    /// The error of a rank `r` that called another operation than `op`.
    fn other_operation(&self, op: OpKind, r: usize) -> CommError {
        CommError::Mismatch {
            detail: format!("rank {} called {}, rank {r} called another operation", self.rank, op.name()),
        }
    }

    /// Checks that every rank called the same operation with the same
    /// element count (one small allgather), so a mismatch is an error on
    /// every rank rather than undefined behaviour inside MPI.
    fn agree(&mut self, op: OpKind, len: usize) -> Result<(), CommError> {
        let mine = [op as u64, len as u64];
        let mut all = vec![0u64; 2 * self.size];
        self.guarded(op, |w| w.all_gather_into(&mine[..], &mut all[..]));
        for (r, pair) in all.chunks_exact(2).enumerate() {
            if pair[0] != mine[0] {
                return Err(self.other_operation(op, r));
            }
            if pair[1] != mine[1] {
                return Err(CommError::Mismatch {
                    detail: format!(
                        "{}: rank {} has {len} elements, rank {r} has {}",
                        op.name(),
                        self.rank,
                        pair[1]
                    ),
                });
            }
        }
        Ok(())
    }

    /// `MPI_Allreduce` of `buf` in place.
    fn reduce<T: Equivalence>(
        &mut self,
        kind: OpKind,
        buf: &mut [T],
        op: SystemOperation,
    ) -> Result<(), CommError> {
        self.reduce_with(kind, buf, T::equivalent_datatype().as_raw(), op.as_raw())
    }

    /// `MPI_Allreduce` in place of `buf`, whose elements are each one
    /// `datatype`, under the operation `op` (raw handles, for the half
    /// sum, which MPI has no type of its own for).
    fn reduce_with<T>(
        &mut self,
        kind: OpKind,
        buf: &mut [T],
        datatype: mpi::ffi::MPI_Datatype,
        op: mpi::ffi::MPI_Op,
    ) -> Result<(), CommError> {
        self.agree_once(kind, buf.len())?;
        let bytes = std::mem::size_of_val(buf);
        self.check_len(kind, bytes)?;
        self.watchdog.arm(self.channel, kind.name(), self.timeout);
        let rc = in_place::allreduce(&self.world, buf, datatype, op);
        self.watchdog.disarm(self.channel);
        if rc != mpi::ffi::MPI_SUCCESS as i32 {
            return Err(CommError::Mpi(format!("{} returned MPI error code {rc}", kind.name())));
        }
        Ok(())
    }

    /// Every rank's message length, into `counts` and `displs`. The
    /// operation travels with the length, so a rank that called another
    /// operation is an error on every rank at no extra round.
    fn gather_lengths(&mut self, op: OpKind, len: usize) -> Result<(), CommError> {
        let mine = [
            op as Count,
            Count::try_from(len).map_err(|_| CommError::TooLarge {
                op: op.name(),
                bytes: len,
                limit: self.max_message,
            })?,
        ];
        self.own.pairs.clear();
        self.own.pairs.resize(2 * self.size, 0);
        let pairs = &mut self.own.pairs;
        self.watchdog.arm(self.channel, op.name(), self.timeout);
        self.world.all_gather_into(&mine[..], &mut pairs[..]);
        self.watchdog.disarm(self.channel);
        if let Some(r) = self.own.pairs.chunks_exact(2).position(|p| p[0] != mine[0]) {
            return Err(self.other_operation(op, r));
        }
        self.own.counts.clear();
        self.own.counts.extend(self.own.pairs.chunks_exact(2).map(|p| p[1]));
        self.own.displs.clear();
        let mut at: Count = 0;
        for &c in &self.own.counts {
            self.own.displs.push(at);
            at = at.checked_add(c).ok_or(CommError::TooLarge {
                op: op.name(),
                bytes: usize::MAX,
                limit: self.max_message,
            })?;
        }
        Ok(())
    }
}

// SAFETY: MPI was initialized with `Threading::Serialized` at least, so its
// calls may come from any thread as long as they do not overlap; every call
// goes through `&mut self` or `&self` of this single owner, so they cannot.
// A duplicate (another communicator) exists only under `Threading::Multiple`,
// where calls on different communicators may overlap.
unsafe impl Send for MpiCollective {}

impl Collective for MpiCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn abandon(&mut self, code: i32) {
        self.abort(code)
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn allreduce(&mut self, r: Reduction<'_>) -> Result<(), CommError> {
        let kind = r.kind();
        let (sum, max) = (SystemOperation::sum(), SystemOperation::max());
        match r {
            Reduction::SumF32(b) => self.reduce(kind, b, sum),
            Reduction::SumF16(b) => {
                let datatype = u16::equivalent_datatype().as_raw();
                self.reduce_with(kind, b, datatype, in_place::f16_sum())
            }
            Reduction::SumI32(b) => self.reduce(kind, b, sum),
            Reduction::SumI16(b) => self.reduce(kind, b, sum),
            Reduction::SumI8(b) => self.reduce(kind, b, sum),
            Reduction::MaxF32(b) => self.reduce(kind, b, max),
        }
    }

    fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError> {
        self.check_len(OpKind::Allgatherv, send.len())?;
        self.gather_lengths(OpKind::Allgatherv, send.len())?;
        let dst = recv.set_from_parts(self.own.counts.iter().map(|&c| c as usize));
        let mut part = PartitionMut::new(&mut dst[..], &self.own.counts[..], &self.own.displs[..]);
        self.watchdog.arm(self.channel, OpKind::Allgatherv.name(), self.timeout);
        self.world.all_gather_varcount_into(send, &mut part);
        self.watchdog.disarm(self.channel);
        Ok(())
    }

    /// An `MPI_Alltoall` of (operation, length) pairs, so that a rank that
    /// called another operation is an error on every rank, then
    /// `MPI_Alltoallv` of the messages.
    fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError> {
        const OP: OpKind = OpKind::Alltoallv;
        if send.len() != self.size {
            return Err(CommError::Invalid(format!(
                "alltoallv: {} messages for {} ranks; send one per rank",
                send.len(),
                self.size
            )));
        }
        let too_large = |bytes| CommError::TooLarge { op: OP.name(), bytes, limit: self.max_message };
        let own = &mut self.own;
        own.send_counts.clear();
        own.send_displs.clear();
        own.pairs.clear();
        for m in send.iter() {
            if m.len() > self.max_message {
                return Err(too_large(m.len()));
            }
            let len = Count::try_from(m.len()).map_err(|_| too_large(m.len()))?;
            own.send_displs.push(own.send_counts.iter().sum());
            own.send_counts.push(len);
            own.pairs.extend([OP as Count, len]);
        }
        own.counts.clear();
        own.counts.resize(2 * self.size, 0);
        self.watchdog.arm(self.channel, OP.name(), self.timeout);
        self.world.all_to_all_into(&self.own.pairs[..], &mut self.own.counts[..]);
        self.watchdog.disarm(self.channel);
        if let Some(r) = self.own.counts.chunks_exact(2).position(|p| p[0] != OP as Count) {
            return Err(self.other_operation(OP, r));
        }
        let own = &mut self.own;
        let lens: Vec<Count> = own.counts.chunks_exact(2).map(|p| p[1]).collect();
        own.counts.clone_from(&lens);
        own.displs.clear();
        let mut at: Count = 0;
        for &c in &own.counts {
            own.displs.push(at);
            at = at.checked_add(c).ok_or_else(|| too_large(usize::MAX))?;
        }
        let dst = recv.set_from_parts(own.counts.iter().map(|&c| c as usize));
        let from = Partition::new(send.as_bytes(), &own.send_counts[..], &own.send_displs[..]);
        let mut into = PartitionMut::new(&mut dst[..], &own.counts[..], &own.displs[..]);
        self.watchdog.arm(self.channel, OP.name(), self.timeout);
        self.world.all_to_all_varcount_into(&from, &mut into);
        self.watchdog.disarm(self.channel);
        Ok(())
    }

    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        if root >= self.size {
            return Err(CommError::Invalid(format!("broadcast root {root} outside 0..{}", self.size)));
        }
        self.agree_once(OpKind::Broadcast, root)?;
        let mut len = buf.len() as u64;
        self.guarded(OpKind::Broadcast, |w| w.process_at_rank(root as i32).broadcast_into(&mut len));
        self.check_len(OpKind::Broadcast, len as usize)?;
        buf.resize(len as usize, 0);
        let data = &mut buf[..];
        self.watchdog.arm(self.channel, OpKind::Broadcast.name(), self.timeout);
        self.world.process_at_rank(root as i32).broadcast_into(data);
        self.watchdog.disarm(self.channel);
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        // The agreement is itself a barrier (an allgather completes only
        // when every rank contributed) and catches mismatched calls.
        self.agree(OpKind::Barrier, 0)?;
        Ok(())
    }

    /// `MPI_Comm_dup` of the world, under the same watchdog (a deadline
    /// slot of its own) and heartbeats; `None` unless MPI runs at
    /// `MPI_THREAD_MULTIPLE` ([`MpiCollective::init_with`]).
    fn duplicate(&mut self) -> Result<Option<Box<dyn Collective>>, CommError> {
        if !self.concurrent {
            return Ok(None);
        }
        self.watchdog.arm(self.channel, "MPI_Comm_dup", self.timeout);
        let world = self.world.duplicate();
        self.watchdog.disarm(self.channel);
        Ok(Some(Box::new(MpiCollective {
            world,
            rank: self.rank,
            size: self.size,
            timeout: self.timeout,
            max_message: self.max_message,
            watchdog: Arc::clone(&self.watchdog),
            channel: self.watchdog.add_channel(),
            concurrent: true,
            own: ChannelState::default(),
            _universe: Arc::clone(&self._universe),
        })))
    }

    fn push_pull(
        &mut self,
        placement: ServerPlacement,
        upload: &[u8],
        aggregate: &mut Aggregate<'_>,
        download: &mut Vec<u8>,
    ) -> Result<(), CommError> {
        let server = placement.server_rank(self.size);
        let dedicated = placement == ServerPlacement::Dedicated;
        if dedicated && self.rank == server && !upload.is_empty() {
            return Err(CommError::Invalid("a dedicated server uploads nothing".into()));
        }
        self.agree_once(OpKind::PsPush, server)?;
        self.check_len(OpKind::PsPush, upload.len())?;
        self.gather_lengths(OpKind::PsPush, upload.len())?;
        let root = self.world.process_at_rank(server as i32);
        if self.rank == server {
            let mut all = std::mem::take(&mut self.own.uploads);
            let total: usize = self.own.counts.iter().map(|&c| c as usize).sum();
            let mut flat = std::mem::take(&mut self.own.flat);
            flat.resize(total, 0);
            {
                let mut part = PartitionMut::new(&mut flat[..], &self.own.counts[..], &self.own.displs[..]);
                self.watchdog.arm(self.channel, OpKind::PsPush.name(), self.timeout);
                root.gather_varcount_into_root(upload, &mut part);
                self.watchdog.disarm(self.channel);
            }
            all.clear();
            for (r, (&c, &d)) in self.own.counts.iter().zip(&self.own.displs).enumerate() {
                if !(dedicated && r == server) {
                    all.push(&flat[d as usize..(d + c) as usize]);
                }
            }
            download.clear();
            let status = aggregate(&all, download);
            self.own.uploads = all;
            self.own.flat = flat;
            // Tell everyone whether the aggregation worked before the download.
            let mut code: u8 = u8::from(status.is_err());
            self.guarded(OpKind::PsPull, |w| w.process_at_rank(server as i32).broadcast_into(&mut code));
            if let Err(e) = status {
                let mut msg = e.clone().into_bytes();
                self.broadcast(&mut msg, server)?;
                return Err(CommError::Aggregate(e));
            }
        } else {
            self.watchdog.arm(self.channel, OpKind::PsPush.name(), self.timeout);
            root.gather_varcount_into(upload);
            self.watchdog.disarm(self.channel);
            let mut code = 0u8;
            self.guarded(OpKind::PsPull, |w| w.process_at_rank(server as i32).broadcast_into(&mut code));
            if code != 0 {
                let mut msg = Vec::new();
                self.broadcast(&mut msg, server)?;
                return Err(CommError::Aggregate(String::from_utf8_lossy(&msg).into_owned()));
            }
        }

        let mut len = download.len() as u64;
        self.guarded(OpKind::PsPull, |w| w.process_at_rank(server as i32).broadcast_into(&mut len));
        download.resize(len as usize, 0);
        let data = &mut download[..];
        self.watchdog.arm(self.channel, OpKind::PsPull.name(), self.timeout);
        self.world.process_at_rank(server as i32).broadcast_into(data);
        self.watchdog.disarm(self.channel);
        Ok(())
    }
}

impl Drop for MpiCollective {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("error: MPI rank {} panicked; aborting the job", self.rank);
            self.world.abort(1);
        }
    }
}
