//! [`PyCompressor`]: one tensor's compressor and memory, for callers with a
//! transport of their own (federated learning, Horovod, a custom
//! allgather): `compress` makes gradcomp's wire bytes, `aggregate` decodes
//! and combines every worker's. The bytes are the codec's
//! (`gradcomp_compress::codec`), the same a Rust worker sends.
//!
//! Compressors whose exchange is a sequence of allreduce rounds (PowerSGD)
//! have no single message to hand over and are refused: use the DDP hook.

use std::sync::Mutex;

use gradcomp_compress::aggregate::combine_encoded;
use gradcomp_compress::memory::ResidualForm;
use gradcomp_compress::{codec, Combine, CompressionUnit, Message, RngKey, UnitContext};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use serde_json::Value;

use gradcomp_exchange::config::CompressionConfig;
use gradcomp_exchange::DataParallelConfig;

/// A tensor's compressor and its memory (error feedback, DGC momentum).
#[pyclass(name = "Compressor", module = "gradcomp._core")]
pub struct PyCompressor {
    inner: Mutex<Inner>,
    name: String,
    len: usize,
}

struct Inner {
    unit: CompressionUnit,
    combine: Combine,
    msg: Message,
    /// The random streams' seed and this worker's rank.
    seed: u64,
    rank: u32,
    /// The unit field of this compressor's messages (`message_tag`).
    tag: u32,
}

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("gradcomp: {e}"))
}

/// The options that say how a model is cut, stepped or moved: a single
/// tensor's compressor has none of them.
const NOT_FOR_ONE_TENSOR: [(&str, &str); 8] = [
    (
        "granularity",
        "one compressor is one tensor; granularity is how gradcomp's hook and trainer cut a model",
    ),
    ("exclude", "one compressor is one tensor; exclusion is how gradcomp's hook and trainer cut a model"),
    ("warmup", "the density warm-up is per epoch, which the bytes API does not see; set density"),
    ("local_clip", "DGC's local clipping needs the whole model's gradient norm; clip before compress"),
    ("topology", "the bytes API moves no bytes; your transport is the topology"),
    ("bucket_mb", "one compressor is one tensor; buckets are how gradcomp's hook and trainer group a model"),
    ("pipeline", "the bytes API moves no bytes, so there is nothing to overlap"),
    ("on_device", "the bytes API compresses numpy arrays on the host"),
];

#[pymethods]
impl PyCompressor {
    /// Compressor `name` for a tensor of `shape`, with keyword `options`
    /// (docs/CONFIG.md's keys): the compressor's own, `memory`,
    /// `dgc_momentum`, `residual` (raw only: no learning rate here) and
    /// `seed`. The options that say how a model is cut, stepped or moved
    /// are refused, naming the option and why.
    #[new]
    #[pyo3(signature = (name, shape, options=None, rank=0))]
    fn new(
        name: &Bound<'_, PyAny>,
        shape: Vec<usize>,
        options: Option<&Bound<'_, PyDict>>,
        rank: u32,
    ) -> PyResult<Self> {
        let r = crate::config::Routed::new(name, options)?;
        r.refuse(&NOT_FOR_ONE_TENSOR)?;
        if let Some(other) = r.top.keys().find(|k| *k != "seed") {
            return Err(value_error(format!("{other}: not an option of one tensor's compressor")));
        }
        let seed = match r.top.get("seed") {
            None => 1,
            Some(v) => {
                v.as_u64().ok_or_else(|| value_error(format!("seed: {v} is not a whole number ≥ 0")))?
            }
        };
        let compression: CompressionConfig =
            serde_path_to_error::deserialize(Value::Object(r.compression.clone()))
                .map_err(|e| value_error(format!("{}: {}", e.path(), e.inner())))?;
        if compression.residual != ResidualForm::Raw {
            return Err(value_error(
                "residual: the bytes API has no learning rate, so its error feedback keeps raw gradients ('raw', the default)",
            ));
        }
        let dgc_momentum = compression.dgc_momentum;
        if !(0.0..1.0).contains(&dgc_momentum) {
            return Err(value_error(format!("dgc_momentum: {dgc_momentum} is not in [0, 1)")));
        }
        let cfg = crate::config::parse_compressor(&Value::Object(r.compressor.clone()))?;
        let kind = compression.memory;
        let whole =
            DataParallelConfig { compressor: cfg.clone().into(), compression, seed, ..Default::default() };
        r.refuse_inert(&whole)?;
        let compressor = cfg.build_for(&shape);
        if compressor.combine() == Combine::InRounds {
            return Err(value_error(format!(
                "compressor {} exchanges in allreduce rounds, not one message; use gradcomp.torch.hook",
                cfg.name()
            )));
        }
        // A compressor's own rounds (TernGrad's shared scaler) run as this
        // worker alone: each message carries its own scale.
        // The bytes API has no learning rate: residuals are raw gradients.
        let memory = cfg.build_memory(kind, ResidualForm::Raw, dgc_momentum);
        let combine = compressor.combine();
        let unit = CompressionUnit::new(compressor, memory);
        let inner =
            Inner { unit, combine, msg: Message::default(), seed, rank, tag: cfg.message_tag(&shape) };
        Ok(PyCompressor {
            inner: Mutex::new(inner),
            name: cfg.name().to_string(),
            len: shape.iter().product(),
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// `array`'s compressed message (after the memory's compensation), as
    /// wire bytes; the memory records what was sent. `step` keys the random
    /// stream with the seed and rank.
    fn compress<'py>(
        &self,
        py: Python<'py>,
        array: PyReadonlyArray1<'py, f32>,
        step: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let x = array.as_slice().map_err(value_error)?;
        self.check_len(x.len())?;
        if let Some(j) = gradcomp_compress::reduce::first_nonfinite(x) {
            return Err(value_error(format!(
                "array: element {j} is {}: a non-finite gradient has no compressed form (skip the step, or lower the learning rate)",
                x[j]
            )));
        }
        let wire = py.detach(|| -> PyResult<Vec<u8>> {
            let mut guard = self.lock()?;
            let inner = &mut *guard;
            let ctx = UnitContext { key: RngKey::new(inner.seed, inner.rank, step, 0), loss: None };
            inner.unit.step_alone(x, 1.0, &ctx, &mut inner.msg, |_, _| {});
            let mut wire = Vec::new();
            codec::encode(&inner.msg, inner.tag, &mut wire);
            Ok(wire)
        })?;
        Ok(PyBytes::new(py, &wire))
    }

    /// Every worker's messages combined as the compressor's exchange
    /// combines them: their average, or signSGD's majority vote. A message
    /// that does not decode, or that another compressor, configuration or
    /// shape made (its tag), raises ValueError naming it.
    fn aggregate<'py>(&self, py: Python<'py>, messages: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyArray1<f32>>> {
        if messages.is_empty() {
            return Err(value_error("messages: aggregate needs at least one message"));
        }
        let (combine, tag) = {
            let inner = self.lock()?;
            (inner.combine, inner.tag)
        };
        for (i, m) in messages.iter().enumerate() {
            let h = codec::read_header(m).map_err(|e| value_error(format!("messages[{i}]: {e}")))?;
            if h.unit != tag {
                return Err(value_error(format!(
                    "messages[{i}] was made by another compressor, configuration or shape than {} over {} values (tag {:#010x}, this compressor's {tag:#010x}); build every worker's with the same gradcomp.compressor(name, shape, **options)",
                    self.name, self.len, h.unit
                )));
            }
        }
        let mut out = vec![0.0f32; self.len];
        combine_encoded(messages.iter().map(|m| &m[..]), combine, &mut out)
            .map_err(|(i, e)| value_error(format!("messages[{i}]: {e}")))?;
        Ok(PyArray1::from_vec(py, out))
    }

    /// The memory's and compressor's state, for checkpoints.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.lock()?;
        let d = PyDict::new(py);
        for (i, b) in inner.unit.memory().state().into_iter().enumerate() {
            d.set_item(format!("memory.{i}"), PyArray1::from_slice(py, b))?;
        }
        for (i, b) in inner.unit.compressor().state().into_iter().enumerate() {
            d.set_item(format!("compressor.{i}"), PyArray1::from_slice(py, b))?;
        }
        Ok(d)
    }

    fn load_state_dict(&self, state: std::collections::BTreeMap<String, Vec<f32>>) -> PyResult<()> {
        let mut inner = self.lock()?;
        let pick = |kind: &str, n: usize| -> PyResult<Vec<Vec<f32>>> {
            (0..n)
                .map(|i| {
                    let k = format!("{kind}.{i}");
                    state.get(&k).cloned().ok_or_else(|| value_error(format!("state: {k} is missing")))
                })
                .collect()
        };
        let mem = pick("memory", inner.unit.memory().state().len())?;
        if mem.iter().any(|b| !b.is_empty() && b.len() != self.len) {
            return Err(value_error(format!("state: a memory buffer is not {} values long", self.len)));
        }
        inner.unit.memory_mut().restore(&mem).map_err(value_error)?;
        let comp = pick("compressor", inner.unit.compressor().state().len())?;
        inner.unit.compressor_mut().restore(&comp).map_err(value_error)
    }
}

impl PyCompressor {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| PyRuntimeError::new_err("a previous call panicked"))
    }

    fn check_len(&self, got: usize) -> PyResult<()> {
        if got == self.len {
            Ok(())
        } else {
            Err(value_error(format!("the array has {got} values, the compressor's shape {}", self.len)))
        }
    }
}
