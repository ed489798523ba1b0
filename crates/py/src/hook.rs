//! [`Hook`]: the Rust half of the DDP comm hook (`gradcomp.torch`): one
//! worker's [`Buckets`], exchanged through torch.distributed; the workers'
//! agreement on a non-finite gradient, carried inside each bucket's first
//! collective ([`Flagged`]); and the records of each bucket and step.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use gradcomp_comm::{Flagged, Metered};
use gradcomp_exchange::{ExchangeStats, StepInput};
use numpy::{PyArray1, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyFloatingPointError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::collective::TorchCollective;
use crate::exchange::{Buckets, UnitState};
use crate::records::{step_record, to_dict, BucketRecord};

/// One worker's bucket exchanges.
#[pyclass(module = "gradcomp._core")]
pub struct Hook {
    inner: Mutex<Inner>,
    rank: usize,
    world: usize,
}

struct Inner {
    buckets: Buckets,
    /// The records of the step under way, and of the last complete one.
    current: Vec<BucketRecord>,
    last: Option<Vec<BucketRecord>>,
    /// The widened buffer of the flags' first float32 allreduce.
    scratch: Vec<f32>,
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
        let inner =
            Inner { buckets: Buckets::new(cfg, world), current: Vec::new(), last: None, scratch: Vec::new() };
        Ok(Hook { inner: Mutex::new(inner), rank, world })
    }

    /// Averages this worker's bucket `grad` (DDP's bucket `bucket`: the
    /// tensors `keys` of `shapes`, contiguous float32) over all workers into
    /// `out`, calling `comm` for the collectives, and records it; returns
    /// the bucket's record. The GIL is released while it compresses and
    /// decodes.
    ///
    /// Whether any worker's gradient holds a NaN or Inf travels inside the
    /// bucket's first collective (a worker that holds one compresses zeros
    /// in its place, so every worker runs the same schedule). Then every
    /// worker raises FloatingPointError naming them (`skip` false), or skips
    /// the bucket (`skip`): `out` zero, the bucket's memories as before.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (bucket, keys, shapes, grad, out, comm, step, lr=1.0, measure=false, skip=false))]
    fn exchange<'py>(
        &self,
        py: Python<'py>,
        bucket: usize,
        keys: Vec<u32>,
        shapes: Vec<Vec<usize>>,
        grad: PyReadonlyArray1<'py, f32>,
        mut out: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
        step: u64,
        lr: f64,
        measure: bool,
        skip: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let g = grad.as_slice().map_err(|e| PyValueError::new_err(format!("grad: {e}")))?;
        let o = out.as_slice_mut().map_err(|e| PyValueError::new_err(format!("out: {e}")))?;
        let input = StepInput { step, lr, loss: None, measure };
        let torch = TorchCollective::new(comm, self.rank, self.world);
        let record = py.detach(|| -> Result<BucketRecord, HookError> {
            let mut inner = self.lock().map_err(HookError::Other)?;
            inner.exchange(bucket, &keys, &shapes, g, o, &input, torch, skip)
        });
        let record = record.map_err(|e| e.into_py(step, bucket))?;
        let d = to_dict(py, &record)?;
        self.lock().map_err(PyRuntimeError::new_err)?.current.push(record);
        Ok(d)
    }

    /// Adds the seconds Python spent copying the last bucket to and from
    /// the host, and ends the step after DDP's last bucket (`is_last`).
    fn end_bucket(&self, device_copy_seconds: f64, is_last: bool) -> PyResult<()> {
        let mut inner = self.lock().map_err(PyRuntimeError::new_err)?;
        if let Some(r) = inner.current.last_mut() {
            r.device_copy_seconds = device_copy_seconds;
        }
        if is_last {
            let step = std::mem::take(&mut inner.current);
            inner.last = Some(step);
        }
        Ok(())
    }

    /// The last complete step's record, its buckets' summed (each bucket's
    /// own under `buckets`); None before the first.
    fn last_step<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let inner = self.lock().map_err(PyRuntimeError::new_err)?;
        inner.last.as_deref().map(|b| step_record(py, b)).transpose()
    }

    /// Every tensor's state: `{name: {"memory.0": array, ...}}`.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let state =
            self.lock().map_err(PyRuntimeError::new_err)?.buckets.state().map_err(PyRuntimeError::new_err)?;
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
        self.lock().map_err(PyRuntimeError::new_err)?.buckets.load(state);
        Ok(())
    }
}

impl Hook {
    fn lock(&self) -> Result<MutexGuard<'_, Inner>, String> {
        self.inner.lock().map_err(|_| "a previous exchange panicked".to_string())
    }
}

/// Why an exchange did not give a bucket.
enum HookError {
    /// Workers (in rank order) held a NaN or Inf gradient, this one from element `own`.
    NonFinite {
        workers: Vec<usize>,
        own: Option<usize>,
    },
    Other(String),
}

impl HookError {
    fn into_py(self, step: u64, bucket: usize) -> PyErr {
        match self {
            HookError::NonFinite { workers, own } => {
                let here = own.map_or(String::new(), |i| format!(" (here from element {i})"));
                PyFloatingPointError::new_err(format!(
                    "gradcomp: step {step}: worker(s) {workers:?} have a NaN or Inf gradient in bucket \
                     {bucket}{here}; every worker stops (on_nonfinite='skip' skips such steps instead)"
                ))
            }
            HookError::Other(e) => PyRuntimeError::new_err(e),
        }
    }
}

impl Inner {
    /// [`Hook::exchange`] without the GIL.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &mut self,
        bucket: usize,
        keys: &[u32],
        shapes: &[Vec<usize>],
        grad: &[f32],
        out: &mut [f32],
        input: &StepInput,
        torch: TorchCollective,
        skip: bool,
    ) -> Result<BucketRecord, HookError> {
        let own = gradcomp_compress::reduce::first_nonfinite(grad);
        let zeros;
        let grad = if own.is_some() {
            zeros = vec![0.0; grad.len()];
            &zeros[..]
        } else {
            grad
        };
        let before =
            if skip { Some(self.buckets.snapshot(keys, shapes).map_err(HookError::Other)?) } else { None };
        let flagged = Flagged::with_scratch(torch, own.is_some(), std::mem::take(&mut self.scratch));
        let mut c = Metered::new(flagged);
        let result = self.buckets.exchange(keys, shapes, grad, out, input, &mut c);
        // Every worker ran the same operations unless one failed: only then
        // may the flags need a round of their own.
        let workers = match &result {
            Ok(_) => c.unmetered().flagged().map_err(|e| HookError::Other(e.to_string()))?,
            Err(_) => c.unmetered().known().unwrap_or_default(),
        };
        let flag_bytes = c.unmetered().flag_bytes();
        let overhead = c.unmetered().inner().overhead;
        let bytes = c.meter_mut().take_step();
        self.scratch = c.into_inner().into_parts().1;
        if workers.is_empty() {
            let st: ExchangeStats = result.map_err(HookError::Other)?;
            return Ok(BucketRecord::of(bucket, &st, &bytes, overhead, flag_bytes));
        }
        let Some(before) = before else { return Err(HookError::NonFinite { workers, own }) };
        self.buckets.restore_bucket(keys, &before).map_err(HookError::Other)?;
        out.fill(0.0);
        let mut record = BucketRecord::of(bucket, &ExchangeStats::default(), &bytes, overhead, flag_bytes);
        record.elements = grad.len() as u64;
        (record.skipped, record.nonfinite_workers) = (true, workers);
        Ok(record)
    }
}
