//! [`TorchCollective`]: gradcomp's [`Collective`] over `torch.distributed`.
//!
//! The exchange runs in Rust with the GIL released; each collective takes
//! the GIL back and calls the Python object `comm` (`gradcomp._comm.Comm`),
//! which runs the operation on the process group. Buffers cross as
//! memoryviews of the Rust memory (no copy); the memoryview is released
//! when the call returns, so Python cannot keep a pointer into it.
//!
//! torch.distributed's allgather moves equal sizes only: per-worker
//! messages are padded to the longest, after a round that gathers the
//! sizes. Those bytes are real traffic but not the codec's: the meter
//! ([`Metered`](gradcomp_comm::Metered)) counts the messages' own bytes and
//! [`Overhead`] the padding and the size round apart.

use std::os::raw::c_char;

use gradcomp_comm::{Aggregate, Collective, CommError, Gathered, OpKind, Reduction, ServerPlacement};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// Bytes an allgather moved beyond the messages themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Overhead {
    /// Padding up to the longest message, sent by this worker.
    pub padding: u64,
    /// The size round: 8 bytes per worker and allgather, sent by this worker.
    pub sizes: u64,
}

/// A worker's view of a `torch.distributed` process group.
pub struct TorchCollective {
    comm: Py<PyAny>,
    rank: usize,
    world: usize,
    /// Whether `comm`'s own `rank` and `world` attributes are this worker's
    /// place (a channel that outlives one round under membership, whose
    /// quorum changes them: `_membership.FtComm`), not `rank` and `world`.
    follows: bool,
    pub overhead: Overhead,
}

impl TorchCollective {
    pub fn new(comm: Py<PyAny>, rank: usize, world: usize) -> Self {
        TorchCollective { comm, rank, world, follows: false, overhead: Overhead::default() }
    }

    /// `comm`'s attribute `name`, where it follows the quorum; else `fixed`.
    fn place(&self, name: &str, fixed: usize) -> usize {
        if !self.follows {
            return fixed;
        }
        Python::attach(|py| self.comm.getattr(py, name).and_then(|v| v.extract::<usize>(py))).unwrap_or(fixed)
    }

    /// Calls `comm.all_reduce(view, dtype, op)` on `bytes` bytes at `ptr`, in place.
    fn all_reduce(&mut self, op: OpKind, ptr: *mut u8, bytes: usize, dtype: &str) -> Result<(), CommError> {
        let reduce = if op == OpKind::AllreduceMaxF32 { "max" } else { "sum" };
        Python::attach(|py| {
            let view = MemoryView::new(py, ptr, bytes)?;
            let r = self.comm.call_method1(py, "all_reduce", (view.obj(), dtype, reduce));
            view.release(py)?;
            r.map(drop)
        })
        .map_err(comm_error)?;
        Ok(())
    }
}

/// A writable memoryview over Rust memory, valid until released.
struct MemoryView(Py<PyAny>);

impl MemoryView {
    fn new(py: Python<'_>, ptr: *mut u8, len: usize) -> PyResult<Self> {
        const PYBUF_WRITE: i32 = 0x200;
        // SAFETY: `ptr` is valid for `len` bytes for the whole call; the view
        // is released before the call returns, which fails (and is reported)
        // if Python still holds an export of it.
        let obj = unsafe {
            let raw = pyo3::ffi::PyMemoryView_FromMemory(ptr as *mut c_char, len as isize, PYBUF_WRITE);
            Bound::from_owned_ptr_or_err(py, raw)?
        };
        Ok(MemoryView(obj.unbind()))
    }

    fn obj(&self) -> &Py<PyAny> {
        &self.0
    }

    fn release(self, py: Python<'_>) -> PyResult<()> {
        self.0.call_method0(py, "release").map(drop)
    }
}

/// A Python exception in a collective, as the exchange reports it.
fn comm_error(e: PyErr) -> CommError {
    CommError::Backend(format!("torch.distributed: {e}"))
}

impl Collective for TorchCollective {
    fn rank(&self) -> usize {
        self.place("rank", self.rank)
    }

    fn world_size(&self) -> usize {
        self.place("world", self.world)
    }

    fn allreduce(&mut self, mut r: Reduction<'_>) -> Result<(), CommError> {
        let (kind, dtype) = (r.kind(), r.dtype());
        let bytes = r.as_mut_bytes();
        self.all_reduce(kind, bytes.as_mut_ptr(), bytes.len(), dtype)
    }

    fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError> {
        let longest = Python::attach(|py| -> PyResult<usize> {
            let out = self.comm.call_method1(py, "all_gather", (PyBytes::new(py, send),))?;
            let parts = out.bind(py).cast::<PyList>()?;
            recv.clear();
            let mut longest = 0;
            for part in parts.iter() {
                let bytes = part.cast::<PyBytes>()?.as_bytes();
                longest = longest.max(bytes.len());
                recv.push(bytes);
            }
            Ok(longest)
        })
        .map_err(comm_error)?;
        let world = self.world_size();
        if recv.len() != world {
            return Err(CommError::Mismatch {
                detail: format!("allgather returned {} messages for {} workers", recv.len(), world),
            });
        }
        self.overhead.padding += (longest - send.len()) as u64;
        self.overhead.sizes += 8;
        Ok(())
    }

    /// `comm.all_to_all(parts)`: the sizes first (8 bytes to each peer,
    /// counted as overhead), then the messages unpadded.
    fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError> {
        let world = self.world_size();
        if send.len() != world {
            return Err(CommError::Invalid(format!(
                "alltoallv: {} messages for {world} workers; send one per worker",
                send.len()
            )));
        }
        Python::attach(|py| -> PyResult<()> {
            let parts = PyList::new(py, send.iter().map(|m| PyBytes::new(py, m)))?;
            let out = self.comm.call_method1(py, "all_to_all", (parts,))?;
            recv.clear();
            for part in out.bind(py).cast::<PyList>()?.iter() {
                recv.push(part.cast::<PyBytes>()?.as_bytes());
            }
            Ok(())
        })
        .map_err(comm_error)?;
        if recv.len() != world {
            return Err(CommError::Mismatch {
                detail: format!("all_to_all returned {} messages for {world} workers", recv.len()),
            });
        }
        self.overhead.sizes += 8 * (world as u64 - 1);
        Ok(())
    }

    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        let got = Python::attach(|py| -> PyResult<Vec<u8>> {
            let out = self.comm.call_method1(py, "broadcast", (PyBytes::new(py, buf), root))?;
            Ok(out.bind(py).cast::<PyBytes>()?.as_bytes().to_vec())
        })
        .map_err(comm_error)?;
        *buf = got;
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        Python::attach(|py| self.comm.call_method0(py, "barrier").map(drop)).map_err(comm_error)?;
        Ok(())
    }

    /// A process group of its own, of the same ranks (`comm.duplicate()`,
    /// made collectively: every rank calls it at the same point), for the
    /// outer rounds' thread: its collectives never interleave with the
    /// caller's own on this group.
    fn duplicate(&mut self) -> Result<Option<Box<dyn Collective>>, CommError> {
        let (own, follows) = Python::attach(|py| -> PyResult<_> {
            let own = self.comm.call_method0(py, "duplicate")?;
            let follows =
                own.getattr(py, "follows_quorum").and_then(|v| v.extract::<bool>(py)).unwrap_or(false);
            Ok((own, follows))
        })
        .map_err(comm_error)?;
        let mut c = TorchCollective::new(own, self.rank, self.world);
        c.follows = follows;
        Ok(Some(Box::new(c)))
    }

    fn push_pull(
        &mut self,
        _placement: ServerPlacement,
        _upload: &[u8],
        _aggregate: &mut Aggregate<'_>,
        _download: &mut Vec<u8>,
    ) -> Result<(), CommError> {
        // Refused up front by the configuration check (config.rs); this is
        // the backstop.
        Err(CommError::Invalid(
            "torch.distributed has no parameter server; use topology \"allreduce\" or \"allgather\"".into(),
        ))
    }
}
