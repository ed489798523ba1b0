//! [`LocalRounds`]: the outer rounds of local updates for PyTorch
//! (`gradcomp.torch.LocalUpdates`): the core's local-update strategy
//! (DiLoCo's outer Nesterov by default, Streaming fragments and delay) on a
//! flat float32 copy of the model, its collectives through
//! torch.distributed. The burn front runs the same strategy
//! ([`gradcomp_exchange::strategy`]).
//!
//! With `delay` 0 a round is one call ([`LocalRounds::round`]). With a
//! delay the front calls [`LocalRounds::start`] on its communication thread
//! with a snapshot of the model, goes on with its inner steps, and
//! [`LocalRounds::merge`]s the result `delay` steps later: the same
//! arithmetic as the blocking form, in the same order.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use gradcomp_comm::Metered;
use gradcomp_exchange::strategy::{Celgc, Schedule, Strategy};
use gradcomp_exchange::GradientLayout;
use numpy::{PyArray1, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyFloatingPointError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::collective::TorchCollective;

/// One worker's outer rounds.
///
/// A delayed round's start holds the strategy's lock, without the GIL,
/// while its collectives call back into Python (which takes the GIL): so
/// the schedule is kept outside the lock, and every other method takes the
/// lock with the GIL released.
#[pyclass(module = "gradcomp._core")]
pub struct LocalRounds {
    strategy: Mutex<Celgc>,
    schedule: Schedule,
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
        let strategy = gradcomp_exchange::strategy::build_local(&cfg, &layout_of(shapes), world)
            .map_err(|e| PyValueError::new_err(format!("gradcomp: {e}")))?;
        let schedule = strategy.schedule().clone();
        Ok(LocalRounds { strategy: Mutex::new(strategy), schedule, len, rank, world })
    }

    /// Whether inner step `step` has a round (blocking form), or the start
    /// or merge of one (with a delay).
    fn due(&self, step: u64) -> bool {
        self.schedule.due(step)
    }

    /// Whether a round starts at `step` (its pseudo-gradient taken).
    fn starts_at(&self, step: u64) -> bool {
        self.schedule.starts_any(step)
    }

    /// Whether a round's result is merged at `step`.
    fn merges_at(&self, step: u64) -> bool {
        self.schedule.merges_any(step)
    }

    /// The round at inner step `step` (step 0 records the starting model,
    /// identical on every worker): `params`, the flat model, becomes the
    /// new one. Returns the round's bytes and seconds. The GIL is released
    /// while it computes.
    fn round<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        mut params: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let p = params.as_slice_mut().map_err(|e| PyValueError::new_err(format!("params: {e}")))?;
        self.check(step, p)?;
        self.collective(py, comm, |s, c| s.average_models(step, p, c).map_err(|e| e.to_string()))
    }

    /// The first half of the rounds starting at `step`, on `params`, a
    /// snapshot of the model at `step` the caller does not touch: the
    /// pseudo-gradients are exchanged and θ_outer stepped. For the
    /// communication thread; the GIL is released.
    fn start<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        params: PyReadonlyArray1<'py, f32>,
        comm: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let p = params.as_slice().map_err(|e| PyValueError::new_err(format!("params: {e}")))?;
        self.check(step, p)?;
        self.collective(py, comm, |s, c| {
            let r = s.rounds_mut().ok_or("plain averaging has no delayed rounds")?;
            r.start(step, p, c).map_err(|e| e.to_string())
        })
    }

    /// The second half: the results due at `step` merged into `params`
    /// (α·θ + (1 − α)·θ_outer, per fragment). Call it once the start
    /// `delay` steps before has returned.
    fn merge(&self, py: Python<'_>, step: u64, mut params: PyReadwriteArray1<'_, f32>) -> PyResult<()> {
        let p = params.as_slice_mut().map_err(|e| PyValueError::new_err(format!("params: {e}")))?;
        if p.len() != self.len {
            return Err(PyValueError::new_err(format!(
                "params: {} values, the model has {}",
                p.len(),
                self.len
            )));
        }
        py.detach(|| -> Result<(), String> {
            if let Some(r) = self.lock_str()?.rounds_mut() {
                r.merge(step, p);
            }
            Ok(())
        })
        .map_err(PyRuntimeError::new_err)
    }

    /// θ_outer, the outer momentum and the compressors' memories, by name.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = py
            .detach(|| self.lock_str()?.state().map_err(|e| e.to_string()))
            .map_err(PyRuntimeError::new_err)?;
        let d = PyDict::new(py);
        for (k, v) in state {
            d.set_item(k, PyArray1::from_vec(py, v))?;
        }
        Ok(d)
    }

    /// Restores [`LocalRounds::state`].
    fn load(&self, py: Python<'_>, state: BTreeMap<String, Vec<f32>>) -> PyResult<()> {
        let state = state.into_iter().collect();
        py.detach(|| -> Result<Result<(), String>, String> {
            Ok(self.lock_str()?.restore(&state).map_err(|e| format!("gradcomp: {e}")))
        })
        .map_err(PyRuntimeError::new_err)?
        .map_err(PyValueError::new_err)
    }
}

/// The layout of a model's trainable tensors, named by their order.
pub fn layout_of(shapes: Vec<Vec<usize>>) -> GradientLayout {
    GradientLayout::new(shapes.into_iter().enumerate().map(|(i, s)| (i.to_string(), s)))
}

impl LocalRounds {
    /// `f` on the strategy and a metered collective over `comm`, with the
    /// GIL released; the round's bytes (this worker's) and seconds.
    fn collective<'py>(
        &self,
        py: Python<'py>,
        comm: Py<PyAny>,
        f: impl FnOnce(&mut Celgc, &mut Metered<TorchCollective>) -> Result<(), String> + Send,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut c = Metered::new(TorchCollective::new(comm, self.rank, self.world));
        let t = std::time::Instant::now();
        py.detach(|| f(&mut *self.lock_str()?, &mut c)).map_err(PyRuntimeError::new_err)?;
        let bytes = c.meter_mut().take_step();
        let d = PyDict::new(py);
        d.set_item("bytes_sent", bytes.sent())?;
        d.set_item("bytes_received", bytes.received())?;
        d.set_item("seconds", t.elapsed().as_secs_f64())?;
        Ok(d)
    }

    /// The strategy; call it with the GIL released (see [`LocalRounds`]).
    fn lock_str(&self) -> Result<MutexGuard<'_, Celgc>, String> {
        self.strategy.lock().map_err(|_| "a previous round panicked".to_string())
    }

    /// The model's length, and no non-finite value to spread to every worker.
    fn check(&self, step: u64, p: &[f32]) -> PyResult<()> {
        if p.len() != self.len {
            return Err(PyValueError::new_err(format!(
                "params: {} values, the model has {}",
                p.len(),
                self.len
            )));
        }
        if let Some(i) = gradcomp_compress::reduce::first_nonfinite(p) {
            return Err(PyFloatingPointError::new_err(format!(
                "gradcomp: step {step}: this worker's parameter {i} is {}; the round would spread it to every worker",
                p[i]
            )));
        }
        Ok(())
    }
}
