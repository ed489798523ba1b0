//! [`Exchange`]: one DDP bucket's compressed exchange, gradcomp-dp's
//! [`GradientExchange`] over the bucket's tensors.
//!
//! State is named by tensor, not by bucket position: [`Exchange::state`]
//! returns each unit's memory and compressor buffers under the unit's name
//! (the hook names a tensor by its key, its order of first appearance), and
//! [`Exchange::restore`] takes them back by name, so a tensor's residual,
//! momentum and PowerSGD Q follow it when DDP rebuilds its buckets, and
//! into a resumed run whose buckets are cut differently.

use std::collections::BTreeMap;
use std::sync::Mutex;

use gradcomp_comm::{Collective, OpKind};
use gradcomp_dp::exchange::{ExchangeStats, Gradient, GradientExchange, StateBuffers, StepInput};
use gradcomp_dp::grad_stages::CompleteGrad;
use gradcomp_dp::{DataParallelConfig, GradientLayout};
use numpy::{PyArray1, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::collective::{Overhead, TorchCollective};

/// A bucket's exchange: its tensors' compressors, memories and buffers.
#[pyclass(module = "gradcomp._core")]
pub struct Exchange {
    inner: Mutex<Inner>,
}

struct Inner {
    exchange: GradientExchange,
    /// Each unit's name (a tensor's key, or "global").
    names: Vec<String>,
}

impl Exchange {
    /// The exchange of tensors named `names` of `shapes` among `world`
    /// workers, each unit's random stream keyed by `ids`.
    pub fn build(
        cfg: &DataParallelConfig,
        names: Vec<String>,
        shapes: Vec<Vec<usize>>,
        ids: &[u32],
        world: usize,
    ) -> PyResult<Self> {
        if names.len() != shapes.len() || names.len() != ids.len() {
            return Err(PyValueError::new_err("names, shapes and ids differ in length"));
        }
        let layout = GradientLayout::new(names.into_iter().zip(shapes));
        let mut exchange = GradientExchange::new(&layout, cfg, world, cfg.seed);
        // A global unit (the whole bucket) is keyed by its first tensor.
        let ids = if exchange.units().len() == 1 { &ids[..1.min(ids.len())] } else { ids };
        if !ids.is_empty() {
            exchange.set_unit_ids(ids).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        let names = exchange.units().iter().map(|u| u.name.clone()).collect();
        Ok(Exchange { inner: Mutex::new(Inner { exchange, names }) })
    }

    /// Averages `grad` over the workers into `out` through `c`.
    pub fn run(
        &self,
        grad: &[f32],
        out: &mut [f32],
        input: &StepInput,
        c: &mut dyn Collective,
    ) -> Result<ExchangeStats, String> {
        let mut inner = self.inner.lock().map_err(|_| "a previous exchange panicked".to_string())?;
        inner.exchange.exchange(Gradient::Host(&mut CompleteGrad(grad)), input, out, c).map_err(|e| e.to_string())
    }
}

#[pymethods]
impl Exchange {
    /// `config`: the JSON of a gradcomp configuration; `names`, `shapes`:
    /// the bucket's tensors in bucket order; `ids`: each tensor's index in
    /// the whole model (keys its random stream); `world`: the workers.
    #[new]
    fn new(config: &str, names: Vec<String>, shapes: Vec<Vec<usize>>, ids: Vec<u32>, world: usize) -> PyResult<Self> {
        let cfg = crate::config::parse(config)?;
        Exchange::build(&cfg, names, shapes, &ids, world)
    }

    /// Averages this worker's `grad` over all workers into `out` (both
    /// contiguous float32, the bucket's length), calling `comm` for the
    /// collectives; returns the step's statistics. The GIL is released
    /// while it compresses and decodes.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (grad, out, comm, rank, world, step, lr=1.0, measure=false))]
    fn exchange<'py>(
        &self,
        py: Python<'py>,
        grad: PyReadonlyArray1<'py, f32>,
        mut out: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
        rank: usize,
        world: usize,
        step: u64,
        lr: f64,
        measure: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let g = grad.as_slice().map_err(|e| PyValueError::new_err(format!("grad: {e}")))?;
        let o = out.as_slice_mut().map_err(|e| PyValueError::new_err(format!("out: {e}")))?;
        let input = StepInput { step, lr, loss: None, measure };
        let mut c = TorchCollective::new(comm, rank, world);
        let st = py.detach(|| self.run(g, o, &input, &mut c)).map_err(PyRuntimeError::new_err)?;
        stats_dict(py, &st, &mut c)
    }

    /// The units' names, in unit order.
    fn unit_names(&self) -> PyResult<Vec<String>> {
        Ok(self.lock()?.names.clone())
    }

    /// Every unit's state: `{unit name: {"memory.0": array, ...}}`.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.lock()?;
        let out = PyDict::new(py);
        for (name, bufs) in per_unit(&inner) {
            let d = PyDict::new(py);
            for (k, v) in bufs {
                d.set_item(k, PyArray1::from_vec(py, v))?;
            }
            out.set_item(name, d)?;
        }
        Ok(out)
    }

    /// Restores the units named in `state` (as [`Exchange::state`] gave
    /// it); units it does not name keep their state.
    fn restore(&self, state: BTreeMap<String, BTreeMap<String, Vec<f32>>>) -> PyResult<()> {
        let mut inner = self.lock()?;
        let mut flat = StateBuffers::new();
        inner.exchange.state("", &mut flat);
        for (u, name) in inner.names.iter().enumerate() {
            if let Some(bufs) = state.get(name) {
                for (k, v) in bufs {
                    let key = unit_key(k, u).ok_or_else(|| PyValueError::new_err(format!("{name}: no buffer {k}")))?;
                    flat.insert(key, v.clone());
                }
            }
        }
        inner.exchange.restore("", &flat).map_err(PyValueError::new_err)
    }
}

impl Exchange {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| PyRuntimeError::new_err("a previous exchange panicked"))
    }
}

/// `memory.3` of unit 5 is `memory.5.3` in the exchange's own naming.
fn unit_key(k: &str, u: usize) -> Option<String> {
    let (kind, i) = k.split_once('.')?;
    matches!(kind, "memory" | "compressor").then(|| format!("{kind}.{u}.{i}"))
}

/// The exchange's state regrouped by unit name: `memory.{u}.{i}` → unit
/// u's `memory.{i}`.
fn per_unit(inner: &Inner) -> BTreeMap<String, BTreeMap<String, Vec<f32>>> {
    let mut flat = StateBuffers::new();
    inner.exchange.state("", &mut flat);
    let mut out: BTreeMap<String, BTreeMap<String, Vec<f32>>> = BTreeMap::new();
    for (key, v) in flat {
        let mut parts = key.splitn(3, '.');
        let (Some(kind), Some(u), Some(i)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Some(name) = u.parse::<usize>().ok().and_then(|u| inner.names.get(u)) else { continue };
        out.entry(name.clone()).or_default().insert(format!("{kind}.{i}"), v);
    }
    out
}

/// The statistics of one exchange, as a dict.
fn stats_dict<'py>(py: Python<'py>, st: &ExchangeStats, c: &mut TorchCollective) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let bytes = c.meter_mut().take_step();
    d.set_item("bytes_sent", bytes.sent())?;
    d.set_item("bytes_received", bytes.received())?;
    let ops = PyDict::new(py);
    for (op, b) in bytes.iter() {
        ops.set_item(op.name(), (b.calls, b.sent, b.received))?;
    }
    d.set_item("ops", ops)?;
    let Overhead { padding, sizes } = c.overhead;
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
    d.set_item("allreduce_calls", bytes.iter().filter(|(op, _)| op.is_allreduce()).map(|(_, b)| b.calls).sum::<u64>())?;
    d.set_item("allgather_calls", bytes.get(OpKind::Allgatherv).calls)?;
    Ok(d)
}
