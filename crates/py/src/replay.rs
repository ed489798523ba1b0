//! [`replay`]: the same exchanges on gradcomp's in-process collective, one
//! thread per worker: the Rust library's own result for gradients that a
//! DDP run recorded, so a test can check the hook against it.

use gradcomp_comm::InProcessGroup;
use gradcomp_dp::exchange::StepInput;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::exchange::Exchange;

/// `grads[rank][call]` is the gradient worker `rank` handed to the call-th
/// exchange, made at step `steps[call]` by the bucket `buckets[call]` (an
/// index into `names`, `shapes` and `ids`, one list per bucket). Returns
/// every worker's averaged gradients, `[rank][call]`.
#[pyfunction]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub fn replay<'py>(
    py: Python<'py>,
    config: &str,
    names: Vec<Vec<String>>,
    shapes: Vec<Vec<Vec<usize>>>,
    ids: Vec<Vec<u32>>,
    buckets: Vec<usize>,
    steps: Vec<u64>,
    grads: Vec<Vec<PyReadonlyArray1<'py, f32>>>,
) -> PyResult<Vec<Vec<Bound<'py, PyArray1<f32>>>>> {
    let cfg = crate::config::parse(config)?;
    let world = grads.len();
    if grads.iter().any(|g| g.len() != buckets.len()) || steps.len() != buckets.len() {
        return Err(PyValueError::new_err("every worker needs one gradient per recorded call"));
    }
    let grads = grads
        .iter()
        .map(|g| g.iter().map(|a| Ok(a.as_slice()?.to_vec())).collect::<PyResult<Vec<_>>>())
        .collect::<PyResult<Vec<_>>>()?;
    let outs = py.detach(|| {
        InProcessGroup::new(world).run(|mut c| -> Result<Vec<Vec<f32>>, String> {
            let rank = gradcomp_comm::Collective::rank(&c);
            let mut exchanges = Vec::new();
            for b in 0..names.len() {
                let e = Exchange::build(&cfg, names[b].clone(), shapes[b].clone(), &ids[b], world)
                    .map_err(|e| e.to_string())?;
                exchanges.push(e);
            }
            let mut outs = Vec::new();
            for (call, (&b, &step)) in buckets.iter().zip(&steps).enumerate() {
                let g = &grads[rank][call];
                let mut out = vec![0.0; g.len()];
                let input = StepInput { step, lr: 1.0, loss: None, measure: false };
                exchanges[b].run(g, &mut out, &input, &mut c)?;
                outs.push(out);
            }
            Ok(outs)
        })
    })
    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    outs.into_iter()
        .map(|w| {
            let w = w.map_err(|p| PyRuntimeError::new_err(format!("worker {} panicked: {}", p.rank, p.message)))?.map_err(PyRuntimeError::new_err)?;
            Ok(w.into_iter().map(|o| PyArray1::from_vec(py, o)).collect())
        })
        .collect()
}
