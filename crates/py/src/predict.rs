//! [`predict`]: the network model from Python, with gradcomp-exchange's
//! [`predict`](gradcomp_exchange::predict) (the code `gradcomp model` runs).

use gradcomp_comm::NetworkModel;
use gradcomp_exchange::predict::{
    local_step_seconds, methods, outer_seconds_per_value, step_seconds, LocalSetup, Workload,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What every entry point of the model checks (`entry` names it in the
/// error): tensors that are there, a positive link speed, a latency ≥ 0.
fn check_model(entry: &str, shapes: &[Vec<usize>], link_bps: f64, alpha: f64) -> PyResult<()> {
    let bad = |key: &str, what: &str| Err(PyValueError::new_err(format!("{entry}: {key}: {what}")));
    if shapes.is_empty() || shapes.iter().any(|s| s.iter().product::<usize>() == 0) {
        return bad("shapes", "needs at least one tensor, none of them empty");
    }
    if !(link_bps.is_finite() && link_bps > 0.0) {
        return bad("link_gbps", "must be a positive speed");
    }
    if !(alpha.is_finite() && alpha >= 0.0) {
        return bad("alpha", "must be a latency in seconds, ≥ 0");
    }
    Ok(())
}

/// Every method's predicted step for a model of `shapes` whose step
/// computes for `compute_seconds`, among `workers` workers on a link of
/// `link_bps` bits per second with per-message latency `alpha` seconds;
/// the sparsifiers at `density`. Each method's message sizes and codec
/// speed are measured here, on this CPU, on the model's shapes. Only what
/// the DDP hook can run: torch.distributed has no parameter server. With
/// `period`, each method also prices local updates carrying the change
/// (`LocalUpdates`: `fragments`, `delay`, the round overlapped with the
/// delay's inner steps): `local_step_seconds` per inner step and
/// `local_bytes_per_period`.
#[pyfunction]
#[pyo3(signature = (shapes, compute_seconds, workers, link_bps, density=0.001, alpha=1e-4, period=None, fragments=1, delay=0))]
#[allow(clippy::too_many_arguments)]
pub fn predict<'py>(
    py: Python<'py>,
    shapes: Vec<Vec<usize>>,
    compute_seconds: f64,
    workers: usize,
    link_bps: f64,
    density: f64,
    alpha: f64,
    period: Option<u64>,
    fragments: usize,
    delay: u64,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    check_model("gradcomp.model", &shapes, link_bps, alpha)?;
    let bad = |key: &str, what: &str| Err(PyValueError::new_err(format!("gradcomp.model: {key}: {what}")));
    if !(compute_seconds.is_finite() && compute_seconds >= 0.0) {
        return bad("compute_seconds", "must be a time in seconds, ≥ 0");
    }
    if workers == 0 {
        return bad("workers", "must be at least 1");
    }
    if !(density > 0.0 && density <= 1.0) {
        return bad("density", "must be in (0, 1]");
    }
    if period == Some(0) {
        return bad("period", "must be at least 1 inner step");
    }
    if fragments == 0 || fragments > shapes.len() || period.is_some_and(|h| fragments as u64 > h) {
        return bad("fragments", "must be at least 1 and at most the number of tensors and the period");
    }
    if period.is_some_and(|h| delay >= h) {
        return bad("delay", "must be below the period");
    }
    let work = Workload::new(compute_seconds, shapes);
    // The outer step is measured only when local updates are priced.
    let (mut ms, outer) = py.detach(|| {
        let total: usize = work.units.iter().sum();
        (methods(&work.shapes, density), period.map(|_| outer_seconds_per_value(total)))
    });
    // What the PyTorch front can run: LocalUpdates' rounds with a period,
    // a DDP hook without (the route table's word).
    use gradcomp_exchange::route::Runner;
    let runner = if period.is_some() { Runner::TorchRounds } else { Runner::DdpHook };
    ms.retain(|m| m.topology.refused_by(runner).is_none());
    let net = NetworkModel::from_bits_per_second(link_bps, alpha);
    let dense = step_seconds(&work, &ms[0], workers, &net);
    ms.iter()
        .map(|m| {
            let t = step_seconds(&work, m, workers, &net);
            let d = PyDict::new(py);
            d.set_item("method", &m.label)?;
            d.set_item("compressor", m.compressor.name())?;
            d.set_item("step_seconds", t)?;
            d.set_item("speedup_over_dense", dense / t)?;
            d.set_item("bytes_per_worker", m.upload + m.rounds.iter().sum::<u64>())?;
            d.set_item("compress_seconds", m.compress_seconds)?;
            d.set_item("decode_seconds", m.decode_seconds)?;
            if let (Some(period), Some(outer)) = (period, outer) {
                let rounds = LocalSetup { period, fragments, delay, overlap: true };
                let local = local_step_seconds(&work, m, workers, &net, &rounds, outer);
                d.set_item("local_step_seconds", local.step_seconds)?;
                d.set_item("local_bytes_per_period", local.bytes_per_period)?;
            }
            Ok(d)
        })
        .collect()
}

/// The rule's inputs, each checked, the errors named after `entry`: a
/// measured step > 0, at least 2 workers (a plan of local updates needs
/// peers), a run of at least one step, and `check_model`'s.
pub(crate) fn plan_inputs(
    entry: &str,
    shapes: Vec<Vec<usize>>,
    step_seconds: f64,
    workers: usize,
    link_bps: f64,
    total_steps: u64,
    alpha: f64,
) -> PyResult<gradcomp_exchange::auto_plan::PlanInputs> {
    check_model(entry, &shapes, link_bps, alpha)?;
    let bad = |key: &str, what: &str| Err(PyValueError::new_err(format!("{entry}: {key}: {what}")));
    if !(step_seconds.is_finite() && step_seconds > 0.0) {
        return bad("step_seconds", "must be a measured step in seconds, > 0");
    }
    if workers < 2 {
        return bad("workers", "must be at least 2: a plan of local updates needs peers");
    }
    if total_steps == 0 {
        return bad("total_steps", "must be at least 1");
    }
    Ok(gradcomp_exchange::auto_plan::PlanInputs {
        step_seconds,
        link: NetworkModel::from_bits_per_second(link_bps, alpha),
        workers,
        shapes,
        total_steps,
    })
}

/// `plan = "auto"` (ALGORITHMS.md §2.5): the plan of local updates the
/// core's rule chooses for a model of `shapes` whose communication-free step
/// takes `step_seconds`, among `workers` workers on a link of `link_bps`
/// bits per second (latency `alpha`), over a run of `total_steps` inner
/// steps. Returns `{"lines": [...], "local_updates": {...}}`: each decision
/// with its reason, and `LocalUpdates`' keyword arguments that run it.
#[pyfunction]
#[pyo3(signature = (shapes, step_seconds, workers, link_bps, total_steps, alpha=1e-4))]
pub fn plan<'py>(
    py: Python<'py>,
    shapes: Vec<Vec<usize>>,
    step_seconds: f64,
    workers: usize,
    link_bps: f64,
    total_steps: u64,
    alpha: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let inputs = plan_inputs("gradcomp.plan", shapes, step_seconds, workers, link_bps, total_steps, alpha)?;
    let chosen = py.detach(|| gradcomp_exchange::auto_plan::choose_here(&inputs));
    let st = &chosen.strategy;
    let kwargs = PyDict::new(py);
    kwargs.set_item("period", st.period)?;
    kwargs.set_item("fragments", st.fragments)?;
    kwargs.set_item("delay", st.delay)?;
    kwargs.set_item("outer", st.outer().kind_name())?;
    kwargs.set_item("outer_warmup_rounds", st.outer.warmup_rounds)?;
    kwargs.set_item("compressor", chosen.compressor.name())?;
    kwargs.set_item("topology", chosen.topology.name())?;
    if let Some(phase) = st.sync_phase() {
        let c = phase.compressor();
        kwargs.set_item("sync_steps", phase.steps)?;
        kwargs.set_item("sync_compressor", c.name())?;
        let options = PyDict::new(py);
        if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(&c) {
            for (k, v) in m.iter().filter(|(k, _)| *k != "name") {
                // PowerSGD's rank by torch's name: `rank` is the worker's in Python.
                let k = if k == "rank" { "matrix_approximation_rank" } else { k.as_str() };
                if let Some(x) = v.as_f64().filter(|_| v.is_number()) {
                    if v.is_u64() {
                        options.set_item(k, v.as_u64())?
                    } else {
                        options.set_item(k, x)?
                    }
                } else if let Some(b) = v.as_bool() {
                    options.set_item(k, b)?;
                }
            }
        }
        kwargs.set_item("sync_options", options)?;
    }
    let lines: Vec<String> = chosen.decisions.iter().map(ToString::to_string).collect();
    let d = PyDict::new(py);
    d.set_item("lines", lines)?;
    d.set_item("local_updates", kwargs)?;
    d.set_item("local_step_seconds", chosen.local_step_seconds)?;
    Ok(d)
}

/// `_core.probe_link(comm, rank, world)`: the link between the ranks of
/// `comm` measured by a probe round (`auto_plan::probe_link`: allreduces of
/// 4 KiB to 4 MiB, fitted by the α–β model), as `(link_bps, alpha)`, the
/// same on every rank. Every rank calls it.
#[pyfunction]
pub fn probe_link(py: Python<'_>, comm: Py<PyAny>, rank: usize, world: usize) -> PyResult<(f64, f64)> {
    let mut c = crate::collective::TorchCollective::new(comm, rank, world);
    let model = py
        .detach(|| gradcomp_exchange::auto_plan::probe_link(&mut c))
        .map_err(|e| PyValueError::new_err(format!("gradcomp: {e}")))?;
    Ok((model.bandwidth * 8.0, model.alpha))
}
