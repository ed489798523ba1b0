//! [`Hook`]: the Rust half of the DDP comm hook (`gradcomp.torch`): one
//! worker's [`Buckets`], exchanged through torch.distributed, and the
//! statistics of each call.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use gradcomp_comm::{Metered, OpKind};
use gradcomp_exchange::{ExchangeStats, StepInput};
use numpy::{PyArray1, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::collective::{Overhead, TorchCollective};
use crate::exchange::{Buckets, UnitState};

/// One worker's bucket exchanges.
#[pyclass(module = "gradcomp._core")]
pub struct Hook {
    buckets: Mutex<Buckets>,
    rank: usize,
    world: usize,
}

#[pymethods]
impl Hook {
    /// `config`: the JSON of a gradcomp configuration; this worker's `rank`
    /// among `world`.
    #[new]
    fn new(config: &str, rank: usize, world: usize) -> PyResult<Self> {
        let cfg = crate::config::parse(config)?;
        if rank >= world {
            return Err(PyValueError::new_err(format!("rank {rank} is not below the world size {world}")));
        }
        Ok(Hook { buckets: Mutex::new(Buckets::new(cfg, world)), rank, world })
    }

    /// Averages this worker's bucket `grad` (the tensors `keys` of
    /// `shapes`, contiguous float32) over all workers into `out`, calling
    /// `comm` for the collectives; returns the call's statistics. The GIL
    /// is released while it compresses and decodes.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (keys, shapes, grad, out, comm, step, lr=1.0, measure=false))]
    fn exchange<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<u32>,
        shapes: Vec<Vec<usize>>,
        grad: PyReadonlyArray1<'py, f32>,
        mut out: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
        step: u64,
        lr: f64,
        measure: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let g = grad.as_slice().map_err(|e| PyValueError::new_err(format!("grad: {e}")))?;
        let o = out.as_slice_mut().map_err(|e| PyValueError::new_err(format!("out: {e}")))?;
        let input = StepInput { step, lr, loss: None, measure };
        let mut c = Metered::new(TorchCollective::new(comm, self.rank, self.world));
        let st = py
            .detach(|| self.lock()?.exchange(&keys, &shapes, g, o, &input, &mut c))
            .map_err(PyRuntimeError::new_err)?;
        stats_dict(py, &st, &mut c)
    }

    /// Every tensor's state: `{name: {"memory.0": array, ...}}`.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let state = self.lock().map_err(PyRuntimeError::new_err)?.state().map_err(PyRuntimeError::new_err)?;
        for (name, bufs) in state {
            let d = PyDict::new(py);
            for (k, v) in bufs {
                d.set_item(k, PyArray1::from_vec(py, v))?;
            }
            out.set_item(name, d)?;
        }
        Ok(out)
    }

    /// Replaces all state with `state`, as [`Hook::state`] gave it.
    fn load(&self, state: BTreeMap<String, UnitState>) -> PyResult<()> {
        self.lock().map_err(PyRuntimeError::new_err)?.load(state);
        Ok(())
    }
}

impl Hook {
    fn lock(&self) -> Result<MutexGuard<'_, Buckets>, String> {
        self.buckets.lock().map_err(|_| "a previous exchange panicked".to_string())
    }
}

/// The statistics of one exchange, as a dict.
fn stats_dict<'py>(
    py: Python<'py>,
    st: &ExchangeStats,
    c: &mut Metered<TorchCollective>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let bytes = c.meter_mut().take_step();
    d.set_item("bytes_sent", bytes.sent())?;
    d.set_item("bytes_received", bytes.received())?;
    let ops = PyDict::new(py);
    for (op, b) in bytes.iter() {
        ops.set_item(op.name(), (b.calls, b.sent, b.received))?;
    }
    d.set_item("ops", ops)?;
    let Overhead { padding, sizes } = c.unmetered().overhead;
    d.set_item("padding_bytes_sent", padding)?;
    d.set_item("size_bytes_sent", sizes)?;
    d.set_item("wire_bytes", st.wire_bytes)?;
    d.set_item("selected", st.selected)?;
    d.set_item("elements", st.elements)?;
    d.set_item("density", st.selected as f64 / st.elements.max(1) as f64)?;
    d.set_item("compress_seconds", st.compress_seconds)?;
    d.set_item("communicate_seconds", st.communicate_seconds)?;
    d.set_item("decode_seconds", st.decode_seconds)?;
    d.set_item("wall_seconds", st.wall_seconds)?;
    d.set_item("residual_norm", st.residual_norm)?;
    d.set_item("contraction", st.contraction)?;
    d.set_item("bound_ratios", st.bound_ratios.clone())?;
    let allreduces: u64 = bytes.iter().filter(|(op, _)| op.is_allreduce()).map(|(_, b)| b.calls).sum();
    d.set_item("allreduce_calls", allreduces)?;
    d.set_item("allgather_calls", bytes.get(OpKind::Allgatherv).calls)?;
    Ok(d)
}
