//! [`LocalRounds`]: the outer rounds of local updates for PyTorch
//! (`gradcomp.torch.LocalUpdates`): the core's model-round strategy (CELGC's
//! rounds with an outer optimizer, DiLoCo's Nesterov by default) on a flat
//! float32 copy of the model, its collectives through torch.distributed.
//! The burn front runs the same strategy ([`gradcomp_exchange::strategy`]).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use gradcomp_comm::Metered;
use gradcomp_exchange::strategy::Strategy;
use gradcomp_exchange::GradientLayout;
use numpy::{PyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::collective::TorchCollective;

/// One worker's outer rounds.
#[pyclass(module = "gradcomp._core")]
pub struct LocalRounds {
    strategy: Mutex<Box<dyn Strategy>>,
    len: usize,
    rank: usize,
    world: usize,
}

#[pymethods]
impl LocalRounds {
    /// `config`: from `_core.local_config`; `shapes`: the model's trainable
    /// tensors in order; this worker's `rank` among `world`.
    #[new]
    fn new(config: &str, shapes: Vec<Vec<usize>>, rank: usize, world: usize) -> PyResult<Self> {
        let cfg = crate::config::parse_local(config)?;
        if rank >= world {
            return Err(PyValueError::new_err(format!("rank {rank} is not below the world size {world}")));
        }
        if shapes.iter().any(|s| s.iter().product::<usize>() == 0) {
            return Err(PyValueError::new_err("gradcomp: the model has an empty tensor"));
        }
        let len = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        let strategy = gradcomp_exchange::strategy::build(&cfg, &layout_of(shapes), world);
        Ok(LocalRounds { strategy: Mutex::new(strategy), len, rank, world })
    }

    /// The round at inner step `step` (a multiple of the period; step 0
    /// records the starting model, identical on every worker): `params`, the
    /// flat model, becomes the new shared model. Returns the round's bytes
    /// and seconds. The GIL is released while it computes.
    fn round<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        mut params: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let p = params.as_slice_mut().map_err(|e| PyValueError::new_err(format!("params: {e}")))?;
        if p.len() != self.len {
            return Err(PyValueError::new_err(format!(
                "params: {} values, the model has {}",
                p.len(),
                self.len
            )));
        }
        if let Some(i) = gradcomp_compress::reduce::first_nonfinite(p) {
            return Err(pyo3::exceptions::PyFloatingPointError::new_err(format!(
                "gradcomp: step {step}: this worker's parameter {i} is {}; the round would spread it to every worker",
                p[i]
            )));
        }
        let mut c = Metered::new(TorchCollective::new(comm, self.rank, self.world));
        let t = std::time::Instant::now();
        py.detach(|| self.lock()?.average_models(step, p, &mut c).map_err(|e| e.to_string()))
            .map_err(PyRuntimeError::new_err)?;
        let bytes = c.meter_mut().take_step();
        let d = PyDict::new(py);
        d.set_item("bytes_sent", bytes.sent())?;
        d.set_item("bytes_received", bytes.received())?;
        d.set_item("seconds", t.elapsed().as_secs_f64())?;
        Ok(d)
    }

    /// θ_outer, the outer momentum and the compressor's memories, by name.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self
            .lock()
            .map_err(PyRuntimeError::new_err)?
            .state()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let d = PyDict::new(py);
        for (k, v) in state {
            d.set_item(k, PyArray1::from_vec(py, v))?;
        }
        Ok(d)
    }

    /// Restores [`LocalRounds::state`].
    fn load(&self, state: BTreeMap<String, Vec<f32>>) -> PyResult<()> {
        self.lock()
            .map_err(PyRuntimeError::new_err)?
            .restore(&state.into_iter().collect())
            .map_err(|e| PyValueError::new_err(format!("gradcomp: {e}")))
    }
}

/// The layout of a model's trainable tensors, named by their order.
pub fn layout_of(shapes: Vec<Vec<usize>>) -> GradientLayout {
    GradientLayout::new(shapes.into_iter().enumerate().map(|(i, s)| (i.to_string(), s)))
}

impl LocalRounds {
    fn lock(&self) -> Result<MutexGuard<'_, Box<dyn Strategy>>, String> {
        self.strategy.lock().map_err(|_| "a previous round panicked".to_string())
    }
}
