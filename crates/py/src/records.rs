//! What the hook reports: one [`BucketRecord`] per bucket exchange, and a
//! step's record, the sum of its buckets' ([`step_record`]). The figures
//! are listed once, here; Python receives them as dicts.

use std::collections::BTreeMap;

use gradcomp_comm::{OpKind, StepBytes};
use gradcomp_exchange::ExchangeStats;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde::Serialize;

use crate::collective::Overhead;

/// One bucket exchange on this worker.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BucketRecord {
    /// DDP's index of the bucket.
    pub bucket: usize,
    /// Whether the step was skipped for a non-finite gradient.
    pub skipped: bool,
    /// The workers that held a non-finite gradient in this bucket.
    pub nonfinite_workers: Vec<usize>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Per operation: (calls, bytes sent, bytes received).
    pub ops: PerOp,
    pub allreduce_calls: u64,
    pub allgather_calls: u64,
    /// Padding to the longest message, and the size round, of torch's all_gather.
    pub padding_bytes_sent: u64,
    pub size_bytes_sent: u64,
    /// The non-finite flags, carried inside the first collective.
    pub nonfinite_check_bytes: u64,
    pub wire_bytes: u64,
    pub selected: u64,
    pub elements: u64,
    pub density: f64,
    pub compress_seconds: f64,
    pub communicate_seconds: f64,
    pub decode_seconds: f64,
    pub wall_seconds: f64,
    /// The copies from and to a device or bf16/fp16 bucket (Python's).
    pub device_copy_seconds: f64,
    pub residual_norm: f64,
    pub contraction: Option<f64>,
    pub bound_ratios: Vec<f64>,
}

impl BucketRecord {
    /// The record of an exchange: `st`, the `bytes` the meter counted, the
    /// all_gather `overhead`, and `flag_bytes` of non-finite flags.
    pub fn of(
        bucket: usize,
        st: &ExchangeStats,
        bytes: &StepBytes,
        overhead: Overhead,
        flag_bytes: usize,
    ) -> Self {
        BucketRecord {
            bucket,
            bytes_sent: bytes.sent(),
            bytes_received: bytes.received(),
            ops: per_op(bytes),
            allreduce_calls: bytes.iter().filter(|(op, _)| op.is_allreduce()).map(|(_, b)| b.calls).sum(),
            allgather_calls: bytes.get(OpKind::Allgatherv).calls,
            padding_bytes_sent: overhead.padding,
            size_bytes_sent: overhead.sizes,
            nonfinite_check_bytes: flag_bytes as u64,
            wire_bytes: st.wire_bytes,
            selected: st.selected,
            elements: st.elements,
            density: st.selected as f64 / st.elements.max(1) as f64,
            compress_seconds: st.compress_seconds,
            communicate_seconds: st.communicate_seconds,
            decode_seconds: st.decode_seconds,
            wall_seconds: st.wall_seconds,
            residual_norm: st.residual_norm,
            contraction: st.contraction,
            bound_ratios: st.bound_ratios.clone(),
            ..Default::default()
        }
    }

    /// Adds `b` into this sum of buckets.
    fn add(&mut self, b: &BucketRecord) {
        self.skipped |= b.skipped;
        for r in &b.nonfinite_workers {
            if !self.nonfinite_workers.contains(r) {
                self.nonfinite_workers.push(*r);
            }
        }
        for (op, (calls, sent, received)) in &b.ops {
            let t = self.ops.entry(op).or_default();
            *t = (t.0 + calls, t.1 + sent, t.2 + received);
        }
        let counts = [
            (&mut self.bytes_sent, b.bytes_sent),
            (&mut self.bytes_received, b.bytes_received),
            (&mut self.allreduce_calls, b.allreduce_calls),
            (&mut self.allgather_calls, b.allgather_calls),
            (&mut self.padding_bytes_sent, b.padding_bytes_sent),
            (&mut self.size_bytes_sent, b.size_bytes_sent),
            (&mut self.nonfinite_check_bytes, b.nonfinite_check_bytes),
            (&mut self.wire_bytes, b.wire_bytes),
            (&mut self.selected, b.selected),
            (&mut self.elements, b.elements),
        ];
        for (total, v) in counts {
            *total += v;
        }
        let seconds = [
            (&mut self.compress_seconds, b.compress_seconds),
            (&mut self.communicate_seconds, b.communicate_seconds),
            (&mut self.decode_seconds, b.decode_seconds),
            (&mut self.wall_seconds, b.wall_seconds),
            (&mut self.device_copy_seconds, b.device_copy_seconds),
        ];
        for (total, v) in seconds {
            *total += v;
        }
        self.bound_ratios.extend_from_slice(&b.bound_ratios);
    }
}

/// Per operation: (calls, bytes sent, bytes received).
pub type PerOp = BTreeMap<&'static str, (u64, u64, u64)>;

/// The meter's counts by operation.
pub fn per_op(bytes: &StepBytes) -> PerOp {
    bytes.iter().map(|(op, b)| (op.name(), (b.calls, b.sent, b.received))).collect()
}

/// A step's record: its buckets' figures summed (the residual norm as the
/// norm of the whole, the density over all elements, the contraction as
/// the mean of the measured buckets'), and each bucket's own under
/// `buckets`.
pub fn step_record<'py>(py: Python<'py>, buckets: &[BucketRecord]) -> PyResult<Bound<'py, PyDict>> {
    let mut total = BucketRecord::default();
    for b in buckets {
        total.add(b);
    }
    total.density = total.selected as f64 / total.elements.max(1) as f64;
    total.residual_norm = buckets.iter().map(|b| b.residual_norm * b.residual_norm).sum::<f64>().sqrt();
    let measured: Vec<f64> = buckets.iter().filter_map(|b| b.contraction).collect();
    total.contraction = (!measured.is_empty()).then(|| measured.iter().sum::<f64>() / measured.len() as f64);
    let d = to_dict(py, &total)?;
    d.del_item("bucket")?;
    let list = PyList::empty(py);
    for b in buckets {
        list.append(to_dict(py, b)?)?;
    }
    d.set_item("buckets", list)?;
    Ok(d)
}

/// A record as a dict of its fields.
pub fn to_dict<'py>(py: Python<'py>, r: &BucketRecord) -> PyResult<Bound<'py, PyDict>> {
    let value =
        serde_json::to_value(r).map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    let object = json_to_py(py, &value)?;
    Ok(object.cast_into::<PyDict>()?)
}

/// A JSON value as the Python value `json.loads` would give.
fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::IntoPyObjectExt;
    use serde_json::Value;
    match v {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Number(n) => match n.as_u64() {
            Some(u) => u.into_bound_py_any(py),
            None => n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py),
        },
        Value::String(s) => s.into_bound_py_any(py),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            Ok(list.into_any())
        }
        Value::Object(map) => {
            let d = PyDict::new(py);
            for (k, item) in map {
                d.set_item(k, json_to_py(py, item)?)?;
            }
            Ok(d.into_any())
        }
    }
}
