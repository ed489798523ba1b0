//! [`replay`]: the same exchanges on gradcomp's in-process collective, one
//! thread per worker: the Rust library's own result for gradients that a
//! DDP run recorded, so a test can check the hook against it.

use gradcomp_comm::{Collective, InProcessCollective, InProcessGroup, Metered};
use gradcomp_exchange::StepInput;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::exchange::Buckets;
use crate::records::{per_op, PerOp};

/// `grads[rank][call]` is the bucket gradient worker `rank` handed to the
/// hook's call-th call, which exchanged the tensors `keys[call]` of
/// `shapes[call]` at step `steps[call]`. Returns every worker's averaged
/// gradients, `[rank][call]`, and what each sent in all: per operation,
/// `(calls, bytes sent, bytes received)`. `lr` is the learning rate every
/// step is given (lr-scaled error feedback reads it).
#[pyfunction]
#[pyo3(signature = (config, keys, shapes, steps, grads, lr=1.0))]
pub fn replay<'py>(
    py: Python<'py>,
    config: &str,
    keys: Vec<Vec<u32>>,
    shapes: Vec<Vec<Vec<usize>>>,
    steps: Vec<u64>,
    grads: Vec<Vec<PyReadonlyArray1<'py, f32>>>,
    lr: f64,
) -> PyResult<Replayed<'py>> {
    let cfg = crate::config::parse(config)?;
    let world = grads.len();
    let calls = steps.len();
    if keys.len() != calls || shapes.len() != calls || grads.iter().any(|g| g.len() != calls) {
        return Err(PyValueError::new_err("every worker needs one gradient per recorded call"));
    }
    let grads = owned(&grads)?;
    let outs = run_workers(py, world, |c| -> Result<(Vec<Vec<f32>>, PerOp), String> {
        let mut c = Metered::new(c);
        let rank = c.rank();
        let mut buckets = Buckets::new(cfg.clone(), world);
        let mut outs = Vec::new();
        for call in 0..calls {
            let g = &grads[rank][call];
            let mut out = vec![0.0; g.len()];
            let input = StepInput { step: steps[call], lr, loss: None, measure: false };
            buckets.exchange(&keys[call], &shapes[call], g, &mut out, &input, &mut c)?;
            outs.push(out);
        }
        Ok((outs, per_op(c.meter().total())))
    })?;
    let (outs, sent): (Vec<_>, Vec<_>) = outs.into_iter().unzip();
    Ok((arrays(py, outs), sent))
}

/// Every worker's outputs `[rank][call]`, and what each sent.
type Replayed<'py> = (Vec<Vec<Bound<'py, PyArray1<f32>>>>, Vec<PerOp>);

/// `LocalUpdates`' rounds replayed on the in-process collective:
/// `params[rank][round]` is the flat model worker `rank` handed to the
/// round at inner step `steps[round]`; returns every worker's model after
/// each round, `[rank][round]`, as the core's strategy makes it.
#[pyfunction]
pub fn replay_local<'py>(
    py: Python<'py>,
    config: &str,
    shapes: Vec<Vec<usize>>,
    steps: Vec<u64>,
    params: Vec<Vec<PyReadonlyArray1<'py, f32>>>,
) -> PyResult<Vec<Vec<Bound<'py, PyArray1<f32>>>>> {
    let cfg = crate::config::parse_local(config)?;
    let world = params.len();
    if params.iter().any(|p| p.len() != steps.len()) {
        return Err(PyValueError::new_err("every worker needs one model per recorded round"));
    }
    let params = owned(&params)?;
    let layout = crate::local::layout_of(shapes);
    let outs = run_workers(py, world, |mut c| -> Result<Vec<Vec<f32>>, String> {
        let rank = c.rank();
        let mut strategy =
            gradcomp_exchange::strategy::build(&cfg, &layout, world).map_err(|e| e.to_string())?;
        let mut outs = Vec::new();
        for (round, &step) in steps.iter().enumerate() {
            let mut p = params[rank][round].clone();
            let averaging = strategy.averaging_mut().ok_or("this configuration averages no models")?;
            averaging.average(step, &mut p, &mut c).map_err(|e| e.to_string())?;
            outs.push(p);
        }
        Ok(outs)
    })?;
    Ok(arrays(py, outs))
}

/// Every worker's recorded arrays, `[rank][call]`, copied out of Python.
fn owned(arrays: &[Vec<PyReadonlyArray1<'_, f32>>]) -> PyResult<Vec<Vec<Vec<f32>>>> {
    arrays.iter().map(|w| w.iter().map(|a| Ok(a.as_slice()?.to_vec())).collect()).collect()
}

/// `f` on `world` in-process workers with the GIL released; every
/// worker's value in rank order, or the first panic or error.
fn run_workers<T: Send>(
    py: Python<'_>,
    world: usize,
    f: impl Fn(InProcessCollective) -> Result<T, String> + Sync + Send,
) -> PyResult<Vec<T>> {
    let outs = py
        .detach(|| InProcessGroup::new(world).run(f))
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    outs.into_iter()
        .map(|w| {
            w.map_err(|p| PyRuntimeError::new_err(format!("worker {} panicked: {}", p.rank, p.message)))?
                .map_err(PyRuntimeError::new_err)
        })
        .collect()
}

/// `[rank][call]` arrays for Python.
fn arrays(py: Python<'_>, outs: Vec<Vec<Vec<f32>>>) -> Vec<Vec<Bound<'_, PyArray1<f32>>>> {
    outs.into_iter().map(|w| w.into_iter().map(|o| PyArray1::from_vec(py, o)).collect()).collect()
}
