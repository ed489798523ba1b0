//! [`PyLocalUpdates`]: the outer rounds of local updates for PyTorch
//! (`gradcomp.torch.LocalUpdates`): the core's local-update strategy
//! (DiLoCo's outer Nesterov by default, Streaming fragments and delay) on a
//! flat float32 copy of the model, its collectives through
//! torch.distributed. The burn front runs the same strategy through the
//! same call (`ModelAveraging::average`).
//!
//! With a delay, a round's exchange runs on the core's round thread
//! (`gradcomp_exchange::strategy`'s outer-round machine) over a second
//! channel: a process group of its own, which the Python `Comm` makes when
//! the machine asks for it ([`Collective::duplicate`]); the front's only
//! part is reading and writing the model.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use gradcomp_comm::{Collective, Metered};
use gradcomp_compress::Combine;
use gradcomp_exchange::grad_stages::CompleteGrad;
use gradcomp_exchange::strategy::{LocalUpdates, OuterSchedule, Strategy};
use gradcomp_exchange::{ExchangeError, Gradient, GradientLayout, StateKey, StepInput};
use numpy::{PyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyFloatingPointError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::collective::TorchCollective;

/// One worker's outer rounds.
///
/// A round in flight runs on the core's round thread, whose collectives call
/// back into Python (taking the GIL): every method that touches the strategy
/// takes its lock with the GIL released, and the schedule is kept outside
/// the lock.
#[pyclass(module = "gradcomp._core", name = "LocalUpdates")]
pub struct PyLocalUpdates {
    strategy: Mutex<LocalUpdates>,
    schedule: OuterSchedule,
    len: usize,
    rank: usize,
    world: usize,
    /// `plan="auto"` deciding again: kept across decisions (the codecs'
    /// costs are measured once), with the configuration and the tensors'
    /// shapes the strategy was built from.
    replan: Option<gradcomp_exchange::auto_plan::Replan>,
    cfg: gradcomp_exchange::DataParallelConfig,
    shapes: Vec<Vec<usize>>,
}

#[pymethods]
impl PyLocalUpdates {
    /// `config`: from `_core.local_config`; `shapes`: the model's trainable
    /// tensors in order; this worker's `rank` among `world`. With
    /// `membership`, the rounds' workers change from round to round (a
    /// torchft quorum), at most `world` of them: θ_outer is kept even for
    /// plain averaging, and the combines that would count a healed worker's
    /// zero change (the senders' mean, the majority vote) are refused.
    #[new]
    #[pyo3(signature = (config, shapes, rank, world, membership=false))]
    fn new(
        config: &str,
        shapes: Vec<Vec<usize>>,
        rank: usize,
        world: usize,
        membership: bool,
    ) -> PyResult<Self> {
        let cfg = crate::config::parse_local(config)?;
        if rank >= world {
            return Err(PyValueError::new_err(format!("rank {rank} is not below the world size {world}")));
        }
        if shapes.iter().any(|s| s.iter().product::<usize>() == 0) {
            return Err(PyValueError::new_err("gradcomp: the model has an empty tensor"));
        }
        let len = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        let layout = layout_of(shapes.clone());
        let built = if membership {
            LocalUpdates::with_membership(&cfg, &layout, world)
        } else {
            gradcomp_exchange::strategy::build_local(&cfg, &layout, world)
        };
        let strategy = built.map_err(|e| PyValueError::new_err(format!("gradcomp: {e}")))?;
        if membership {
            if let Some(u) = strategy
                .units()
                .iter()
                .find(|u| matches!(u.combine, Combine::SenderMean { .. } | Combine::MajorityVote))
            {
                return Err(PyValueError::new_err(format!(
                    "gradcomp: compressor: its messages combine as {:?}, which would count a worker healed from a peer \
                     (sending a zero change) as a sender or a voter; under a manager use one whose messages average \
                     (dense, fp4, int8, topk, qsgd, terngrad, ...)",
                    u.combine
                )));
            }
        }
        let schedule = strategy.schedule().clone();
        Ok(PyLocalUpdates {
            strategy: Mutex::new(strategy),
            schedule,
            len,
            rank,
            world,
            replan: None,
            cfg,
            shapes,
        })
    }

    /// Whether inner step `step` has an outer round's work: step 0 (the
    /// starting model recorded), a round's start, its merge, or both.
    fn due(&self, step: u64) -> bool {
        self.schedule.due(step)
    }

    /// Whether the inner step taken after `step` steps is in the
    /// synchronous phase (`strategy.sync`, or the older `warmup_steps`),
    /// whose gradients go through [`PyLocalUpdates::sync_step`].
    fn warming(&self, step: u64) -> bool {
        self.schedule.warming(step)
    }

    /// The outer rounds' work at inner step `step` on `params`, the flat
    /// model, in place: a round in flight landed and merged, then the
    /// rounds starting here started (on the round thread when they overlap
    /// the next inner steps, over a group `comm` makes for it). Returns the
    /// bytes this worker moved for the rounds that finished here, the
    /// seconds this call took (what the inner steps waited), and whether a
    /// round finished (`finished`). The GIL is released while it runs.
    ///
    /// Under membership, `rank` and `world` are this round's (the quorum's;
    /// default: the constructor's) and `contributors` how many of them
    /// contribute a change (a worker healed just before sends none).
    #[pyo3(signature = (step, params, comm, rank=None, world=None, contributors=None))]
    #[allow(clippy::too_many_arguments)]
    fn average<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        mut params: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
        rank: Option<usize>,
        world: Option<usize>,
        contributors: Option<usize>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let p = params.as_slice_mut().map_err(|e| PyValueError::new_err(format!("params: {e}")))?;
        self.check(p)?;
        let (rank, world) = (rank.unwrap_or(self.rank), world.unwrap_or(self.world));
        if rank >= world || world > self.world {
            return Err(PyValueError::new_err(format!(
                "gradcomp: rank {rank} of a round of {world} workers; the rounds were built for at most {}",
                self.world
            )));
        }
        let mut c = Metered::new(TorchCollective::new(comm, rank, world));
        let t = std::time::Instant::now();
        let mut bytes = py
            .detach(|| -> Result<_, RoundError> {
                let mut strategy = self.lock_str().map_err(RoundError::Other)?;
                let averaging = strategy
                    .averaging_mut()
                    .ok_or_else(|| RoundError::Other("this configuration averages no models".into()))?;
                if let Some(n) = contributors {
                    averaging.set_contributors(n).map_err(RoundError::Exchange)?;
                }
                averaging.average(step, p, &mut c).map_err(RoundError::Exchange)?;
                Ok(averaging.take_channel_bytes())
            })
            .map_err(RoundError::into_py)?;
        bytes.add(&c.meter_mut().take_step());
        let d = record(py, &bytes, t)?;
        d.set_item("finished", step == 0 || self.schedule.merges_any(step))?;
        Ok(d)
    }

    /// A step of the synchronous phase (`strategy.sync`): this worker's
    /// flat gradient `grad` through the phase's per-step compressor and its
    /// memory, replaced in place by the workers' combined gradient, which
    /// the inner optimizer then applies at `lr` (the learning rate error
    /// feedback scales by, where its residual form says so). Returns the
    /// bytes this worker moved and the seconds it took. The GIL is
    /// released while it runs.
    #[pyo3(signature = (step, grad, comm, lr=1.0))]
    fn sync_step<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        mut grad: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
        lr: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = grad.as_slice_mut().map_err(|e| PyValueError::new_err(format!("grad: {e}")))?;
        self.check(out)?;
        if !self.schedule.warming(step) {
            return Err(PyValueError::new_err(format!(
                "gradcomp: step {step} is past the synchronous phase ({} steps)",
                self.schedule.sync_steps()
            )));
        }
        if !(lr.is_finite() && lr > 0.0) {
            return Err(PyValueError::new_err(format!("gradcomp: lr: {lr} is not a positive learning rate")));
        }
        let mut c = Metered::new(TorchCollective::new(comm, self.rank, self.world));
        let t = std::time::Instant::now();
        let own = out.to_vec();
        py.detach(|| -> Result<(), RoundError> {
            let mut strategy = self.lock_str().map_err(RoundError::Other)?;
            let input = StepInput { step, lr, loss: None, measure: false };
            strategy
                .update(&input, Gradient::Host(&mut CompleteGrad(&own)), out, &mut c)
                .map_err(RoundError::Exchange)?;
            Ok(())
        })
        .map_err(RoundError::into_py)?;
        record(py, &c.meter_mut().take_step(), t)
    }

    /// Whether the inner optimizer's state is averaged after the round at
    /// inner step `step` (`inner_state_every`).
    fn averages_inner_state(&self, step: u64) -> PyResult<bool> {
        Ok(self.lock_str().map_err(PyRuntimeError::new_err)?.averages_inner_state(step))
    }

    /// The ranks' mean of `state` (a flat buffer: the inner optimizer's
    /// moments, or the model's floating-point buffers), in place, over
    /// `comm`; returns what it moved and took, as [`PyLocalUpdates::sync_step`].
    /// Under a manager, `rank` and `world` are the round's (its quorum's),
    /// and `contributes` false sends zeros and takes the others' mean (a
    /// replica healed into the round, or sitting it out): the mean is over
    /// the contributors, their number in the record's `contributors`.
    #[pyo3(signature = (state, comm, rank=None, world=None, contributes=None))]
    fn average_state<'py>(
        &self,
        py: Python<'py>,
        mut state: PyReadwriteArray1<'py, f32>,
        comm: Py<PyAny>,
        rank: Option<usize>,
        world: Option<usize>,
        contributes: Option<bool>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let buf = state.as_slice_mut().map_err(|e| PyValueError::new_err(format!("state: {e}")))?;
        let (rank, world) = (rank.unwrap_or(self.rank), world.unwrap_or(self.world));
        if rank >= world {
            return Err(PyValueError::new_err(format!(
                "gradcomp: rank {rank} of a round of {world} workers"
            )));
        }
        let mut c = Metered::new(TorchCollective::new(comm, rank, world));
        let t = std::time::Instant::now();
        let contributors = py
            .detach(|| match contributes {
                None => c.allreduce_mean_f32(buf).map(|()| world),
                Some(yes) => c.allreduce_mean_among_f32(buf, yes),
            })
            .map_err(|e| RoundError::Exchange(e.into()).into_py())?;
        let d = record(py, &c.meter_mut().take_step(), t)?;
        d.set_item("contributors", contributors)?;
        Ok(d)
    }

    /// Whether a round starts at inner step `step` (its exchange and outer step).
    fn starts(&self, step: u64) -> bool {
        self.schedule.starts_any(step)
    }

    /// Which period ends at inner step `step` (1 for the first), if one does.
    fn period_ended(&self, step: u64) -> Option<u64> {
        self.schedule.period_ended(step)
    }

    /// Whether a round's result is merged at inner step `step`.
    fn merges(&self, step: u64) -> bool {
        self.schedule.merges_any(step)
    }

    /// Waits for a round in flight (its start); its merge stays due. Raises
    /// the round's failure (`FloatingPointError` for a non-finite model,
    /// naming the workers, as `average` does).
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| -> Result<(), RoundError> {
            let mut strategy = self.lock_str().map_err(RoundError::Other)?;
            match strategy.averaging_mut() {
                Some(a) => a.wait().map_err(RoundError::Exchange),
                None => Ok(()),
            }
        })
        .map_err(RoundError::into_py)
    }

    /// θ_outer, the outer momentum and the compressors' memories, by name
    /// (a round in flight is landed first: its start is then part of them).
    /// `shared`: only what every worker holds alike (θ_outer, the outer
    /// momentum, the schedule), without the units' buffers each worker owns
    /// (error-feedback memories, compressor state: [`StateKey`]s), as the
    /// rounds' agreement check compares it.
    #[pyo3(signature = (shared=false))]
    fn state<'py>(&self, py: Python<'py>, shared: bool) -> PyResult<Bound<'py, PyDict>> {
        let state = py
            .detach(|| self.lock_str()?.state().map_err(|e| message(&e)))
            .map_err(PyRuntimeError::new_err)?;
        let d = PyDict::new(py);
        for (k, v) in state.into_iter().filter(|(k, _)| !shared || StateKey::parse(k).is_none()) {
            d.set_item(k, PyArray1::from_vec(py, v))?;
        }
        Ok(d)
    }

    /// Restores [`PyLocalUpdates::state`] (buffers saved under the names
    /// they had before the fifth round are read too: docs/MIGRATING.md).
    fn load(&mut self, py: Python<'_>, state: BTreeMap<String, Vec<f32>>) -> PyResult<()> {
        let state = state.into_iter().collect();
        let this = &*self;
        let schedule = py
            .detach(|| -> Result<Result<OuterSchedule, String>, String> {
                let mut strategy = this.lock_str()?;
                Ok(strategy
                    .restore(&state)
                    .map(|()| strategy.schedule().clone())
                    .map_err(|e| format!("gradcomp: {e}")))
            })
            .map_err(PyRuntimeError::new_err)?
            .map_err(PyValueError::new_err)?;
        // A checkpoint may carry periods set while its run went.
        self.schedule = schedule;
        Ok(())
    }

    /// `plan="auto"` at the period's end at inner step `boundary` (every rank
    /// calls it there): the core's decision (`auto_plan::Replan::decide`):
    /// rank 0's median of `times` (this rank's inner steps since the last
    /// decision) against the plan's `step_seconds`; where it drifted, H
    /// decided again for this strategy's configuration and model (the link
    /// `link_bps`/`alpha`, `total_steps`) and taken by every rank from
    /// `boundary`. Returns `(period, line, step_seconds)`: the new period (0:
    /// unchanged), rank 0's line (None elsewhere or undecided) and the plan's
    /// step from now on.
    #[pyo3(signature = (comm, boundary, times, step_seconds, link_bps, alpha, total_steps))]
    #[allow(clippy::too_many_arguments)]
    fn decide_again(
        &mut self,
        py: Python<'_>,
        comm: Py<PyAny>,
        boundary: u64,
        times: Vec<f64>,
        step_seconds: f64,
        link_bps: f64,
        alpha: f64,
        total_steps: u64,
    ) -> PyResult<(u64, Option<String>, f64)> {
        use gradcomp_exchange::auto_plan::Replan;
        let entry = "LocalUpdates.decide_again";
        let shapes = self.shapes.clone();
        let inputs = crate::predict::plan_inputs(
            entry,
            shapes,
            step_seconds,
            self.world,
            link_bps,
            total_steps,
            alpha,
        )?;
        let period = self.schedule.period_at(boundary);
        let replan = self.replan.get_or_insert_with(|| Replan::new(inputs.clone()));
        replan.inputs = inputs;
        let (cfg, mut c) = (&self.cfg, TorchCollective::new(comm, self.rank, self.world));
        let decided = py
            .detach(|| replan.decide(boundary, &times, period, cfg, &mut c))
            .map_err(|e| PyRuntimeError::new_err(format!("gradcomp: plan: {}", message(&e))))?;
        let step_seconds = replan.inputs.step_seconds;
        if let Some(h) = decided.period {
            self.set_period_from(py, boundary, h)?;
        }
        Ok((decided.period.unwrap_or(0), decided.line, step_seconds))
    }

    /// Periods of `period` inner steps from inner step `boundary` on (a
    /// period's end): `plan="auto"` deciding again. Every rank calls it at
    /// the same boundary with the same period; ValueError where a round
    /// would be in flight across it.
    fn set_period_from(&mut self, py: Python<'_>, boundary: u64, period: u64) -> PyResult<()> {
        let this = &*self;
        let schedule = py
            .detach(|| -> Result<OuterSchedule, String> {
                let mut strategy = this.lock_str()?;
                strategy
                    .set_period_from(boundary, period)
                    .map_err(|e| format!("gradcomp: {}", message(&e)))?;
                Ok(strategy.schedule().clone())
            })
            .map_err(PyValueError::new_err)?;
        self.schedule = schedule;
        Ok(())
    }
}

impl Drop for PyLocalUpdates {
    /// A round in flight finishes before the strategy goes, with the GIL
    /// released: its collectives call back into Python, and a drop runs
    /// with the GIL held (a garbage-collected `LocalUpdates`).
    fn drop(&mut self) {
        let strategy = self.strategy.get_mut().unwrap_or_else(|e| e.into_inner());
        Python::attach(|py| {
            py.detach(|| {
                if let Some(a) = strategy.averaging_mut() {
                    // Its failure was or will be nobody's to report: the
                    // front is gone.
                    let _ = a.wait();
                }
            })
        });
    }
}

/// What a call moved and took, as Python reads it: this worker's
/// `bytes_sent`, `bytes_received`, and the `seconds` since `start`.
fn record<'py>(
    py: Python<'py>,
    bytes: &gradcomp_comm::StepBytes,
    start: std::time::Instant,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bytes_sent", bytes.sent())?;
    d.set_item("bytes_received", bytes.received())?;
    d.set_item("seconds", start.elapsed().as_secs_f64())?;
    Ok(d)
}

/// Why a round failed, before Python sees it.
enum RoundError {
    Exchange(ExchangeError),
    Other(String),
}

impl RoundError {
    /// A non-finite model on any worker is `FloatingPointError` on every
    /// worker (agreed inside the round's first collective); the rest
    /// `RuntimeError`.
    fn into_py(self) -> PyErr {
        match self {
            RoundError::Exchange(e @ ExchangeError::NonFiniteModel { .. }) => {
                let ExchangeError::NonFiniteModel { step, ranks } = &e else { unreachable!() };
                let err = PyFloatingPointError::new_err(message(&e));
                // Which workers and which round, for a caller that acts on
                // them (a manager's round discards it where this worker's
                // model is finite).
                Python::attach(|py| {
                    let v = err.value(py);
                    let _ = v.setattr("ranks", ranks.clone());
                    let _ = v.setattr("step", *step);
                });
                err
            }
            RoundError::Exchange(e) => PyRuntimeError::new_err(message(&e)),
            RoundError::Other(m) => PyRuntimeError::new_err(m),
        }
    }
}

/// An exchange error as Python sees it.
fn message(e: &ExchangeError) -> String {
    format!("gradcomp: {e}")
}

/// The layout of a model's trainable tensors, named by their order.
pub fn layout_of(shapes: Vec<Vec<usize>>) -> GradientLayout {
    GradientLayout::new(shapes.into_iter().enumerate().map(|(i, s)| (i.to_string(), s)))
}

impl PyLocalUpdates {
    /// The strategy; call it with the GIL released (see [`PyLocalUpdates`]).
    fn lock_str(&self) -> Result<MutexGuard<'_, LocalUpdates>, String> {
        self.strategy.lock().map_err(|_| "a previous round panicked".to_string())
    }

    /// The model's length. (A non-finite value is every worker's error,
    /// agreed inside the round: `ExchangeError::NonFiniteModel`.)
    fn check(&self, p: &[f32]) -> PyResult<()> {
        if p.len() != self.len {
            return Err(PyValueError::new_err(format!(
                "params: {} values, the model has {}",
                p.len(),
                self.len
            )));
        }
        Ok(())
    }
}
