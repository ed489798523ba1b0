//! [`GradientExchange`]: one worker's exchange state (plan, memories,
//! compressors, messages, buffers) and its one entry point.

use std::time::Instant;

use gradcomp_comm::Collective;
use gradcomp_compress::{Message, RngKey};

use super::bucket::Bucket;
use super::exchange_rounds::RoundValues;
use super::gradient_side::GradientSide;
use super::host::HostCompression;
use super::pipeline::{self, BucketArgs, Pipeline};
use super::plan::{Plan, Unit};
use super::recipe::Recipe;
use super::server::ServerBuffers;
use super::stats::{BucketTimes, ExchangeStats};
use super::wire;
use crate::config::DataParallelConfig;
use crate::error::ExchangeError;
#[cfg(feature = "device-kernels")]
use crate::grad_stages::CompleteGrad;
use crate::grad_stages::GradStages;
use crate::layout::GradientLayout;

/// A strategy's state buffers, for checkpoints: named flat buffers.
pub type StateBuffers = std::collections::BTreeMap<String, Vec<f32>>;

/// This worker's step, as the exchange and the strategies see it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepInput {
    /// The step number, from 0. With the rank and the unit it seeds every
    /// random choice of the compressors, and it decides CELGC's rounds.
    pub step: u64,
    /// The learning rate the caller's optimizer applies this step (positive).
    pub lr: f64,
    /// This worker's training loss, when known (eSGD's selection reads it).
    pub loss: Option<f64>,
    /// Measure the contraction ratio and TernGrad's bound ratios this step.
    pub measure: bool,
}

/// Where this step's gradient is.
pub enum Gradient<'a> {
    /// On the host: complete, or arriving in stages.
    Host(&'a mut dyn GradStages),
    /// In device memory, one buffer per unit, after
    /// [`GradientExchange::to_device`].
    #[cfg(feature = "device-kernels")]
    Device(&'a crate::device_grad::DeviceGrad),
}

/// Per-worker state of the compressed exchange.
pub struct GradientExchange {
    pub(super) plan: Plan,
    /// What the units' compressors and memories were built from (their device form).
    #[cfg_attr(not(feature = "device-kernels"), allow(dead_code))]
    pub(super) recipe: Recipe,
    pub(super) host: HostCompression,
    pub(super) work: Working,
    server: ServerBuffers,
    /// The reduce-scatter's owned shards and buffers (`comm.topology =
    /// "reduce-scatter"`); unused on the other topologies.
    pub(super) scatter: super::scatter::Scatter,
    seed: u64,
    /// Move the buckets through a communication thread.
    pipeline: bool,
    /// The density last set (warm-up), which a device form starts from.
    pub(super) density: Option<f64>,
    /// The compressors and memories on the device, once
    /// [`GradientExchange::to_device`] moved them there.
    #[cfg(feature = "device-kernels")]
    pub(super) device: Option<super::device::DeviceUnits>,
}

impl GradientExchange {
    /// The exchange `cfg` describes for a model of `layout` among `workers`
    /// workers; `seed` seeds the compressors' random streams.
    pub fn new(layout: &GradientLayout, cfg: &DataParallelConfig, workers: usize, seed: u64) -> Self {
        let recipe = Recipe::new(cfg);
        let place = (cfg.topology(), cfg.placement());
        let plan = Plan::new(layout, &recipe, &cfg.compression, cfg.granularity(), place, workers);
        GradientExchange {
            host: HostCompression::new(&plan, &recipe),
            work: Working {
                msgs: plan.units.iter().map(|_| Message::default()).collect(),
                buckets: (0..plan.buckets.len()).map(|b| Some(Bucket::new(b, plan.code_width))).collect(),
                rounds: RoundValues::default(),
                measured: Vec::new(),
            },
            server: ServerBuffers::default(),
            scatter: super::scatter::Scatter::new(&plan),
            seed,
            pipeline: cfg.compression.pipeline,
            density: None,
            #[cfg(feature = "device-kernels")]
            device: None,
            plan,
            recipe,
        }
    }

    pub fn units(&self) -> &[Unit] {
        &self.plan.units
    }

    /// The buckets' unit ranges, in the order they are exchanged.
    pub fn buckets(&self) -> &[std::ops::Range<usize>] {
        &self.plan.buckets
    }

    /// Unit `u`'s last message (tests compare them across schedules).
    #[cfg(test)]
    pub(super) fn message(&self, u: usize) -> &Message {
        &self.work.msgs[u]
    }

    /// Gives the units the ids that key their random streams (by default a
    /// tensor's index in the layout). A caller that exchanges a model in
    /// pieces (PyTorch DDP's buckets, which DDP may rebuild) gives each unit
    /// its index in the whole model, so that a tensor's stream does not
    /// depend on how the model was cut.
    pub fn set_unit_ids(&mut self, ids: &[u32]) -> Result<(), ExchangeError> {
        if ids.len() != self.plan.units.len() {
            return Err(ExchangeError::Usage(format!(
                "{} unit ids for {} units",
                ids.len(),
                self.plan.units.len()
            )));
        }
        self.plan.units.iter_mut().zip(ids).for_each(|(u, &id)| u.id = id);
        Ok(())
    }

    pub fn set_density(&mut self, rho: f64) {
        self.host.units.iter_mut().for_each(|c| c.compressor_mut().set_density(rho));
        self.density = Some(rho);
        #[cfg(feature = "device-kernels")]
        if let Some(d) = &mut self.device {
            d.set_density(rho);
        }
    }

    /// Averages this worker's gradient over all workers into `out`, in
    /// gradient units: compress, exchange, decode, aggregate, update the
    /// memories. `out` has the layout's length.
    pub fn exchange(
        &mut self,
        grad: Gradient<'_>,
        input: &StepInput,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<ExchangeStats, ExchangeError> {
        let wall = Instant::now();
        let total = self.plan.total();
        if out.len() != total {
            return Err(ExchangeError::Usage(format!(
                "the output has {} values, the exchange's units {total}",
                out.len()
            )));
        }
        let args = BucketArgs {
            loss: input.loss,
            key: RngKey::new(self.seed, c.rank() as u32, input.step, 0),
            lr: input.lr as f32,
            measure: input.measure,
            inv_n: 1.0 / c.world_size() as f32,
            workers: c.world_size(),
        };
        let mut st = ExchangeStats { elements: total as u64, ..Default::default() };
        st.pipelined = self.pipeline && self.plan.buckets.len() > 1;
        st.buckets = vec![BucketTimes::default(); self.plan.buckets.len()];
        out.fill(0.0);
        self.work.measured.clear();
        self.work.measured.resize(self.plan.units.len(), None);
        if self.plan.topology == crate::config::Topology::ReduceScatter {
            self.exchange_scattered(grad, input, out, c, &mut st)?;
            st.wall_seconds = wall.elapsed().as_secs_f64();
            return Ok(st);
        }
        let (plan, work, server) = (&self.plan, &mut self.work, &mut self.server);
        #[cfg(feature = "device-kernels")]
        let (mut on_device, mut nothing_on_host);
        let (local, stages): (&mut dyn GradientSide, &mut dyn GradStages) = match grad {
            Gradient::Host(stages) => {
                if stages.grad().len() != total {
                    return Err(ExchangeError::Usage(format!(
                        "the gradient has {} values, the exchange's units {total}",
                        stages.grad().len()
                    )));
                }
                (&mut self.host, stages)
            }
            #[cfg(feature = "device-kernels")]
            Gradient::Device(g) => {
                let units = self.device.as_mut().ok_or_else(|| {
                    ExchangeError::Device("a device gradient before the exchange moved to the device".into())
                })?;
                on_device = super::device::DeviceCompression::new(units, plan, g)?;
                nothing_on_host = CompleteGrad(&[]);
                (&mut on_device, &mut nothing_on_host)
            }
        };
        let mut pipe = work.pipeline(plan, local, args);
        wire::with_wire(st.pipelined, plan, server, c, |wire| {
            pipeline::drive(&mut pipe, stages, wire, out, &mut st)
        })?;
        if pipe.args.measure {
            st.fold_measured(pipe.measured);
        }
        st.extra = pipe.local.extra();
        st.residual_norm = pipe.local.residual_norm()?;
        st.sum_buckets();
        st.wall_seconds = wall.elapsed().as_secs_f64();
        Ok(st)
    }

    /// [`GradientExchange::exchange`] on the reduce-scatter: one exchange per
    /// call, on the host (`scatter/`).
    fn exchange_scattered(
        &mut self,
        grad: Gradient<'_>,
        input: &StepInput,
        out: &mut [f32],
        c: &mut dyn Collective,
        st: &mut ExchangeStats,
    ) -> Result<(), ExchangeError> {
        #[allow(irrefutable_let_patterns)]
        let Gradient::Host(stages) = grad
        else {
            return Err(ExchangeError::Device("the reduce-scatter has no device form".into()));
        };
        stages.complete()?;
        let total = self.plan.total();
        if stages.grad().len() != total {
            return Err(ExchangeError::Usage(format!(
                "the gradient has {} values, the exchange's units {total}",
                stages.grad().len()
            )));
        }
        let units = super::scatter::Units {
            plan: &self.plan,
            recipe: &self.recipe,
            host: &mut self.host,
            key: RngKey::new(self.seed, c.rank() as u32, input.step, 0),
            lr: input.lr as f32,
            loss: input.loss,
        };
        self.scatter.exchange(units, stages.grad(), out, c, st)?;
        st.residual_norm = self.host.residual_norm()?;
        Ok(())
    }

    /// Moves the units' compressors and memories to `client`'s device (with
    /// whatever state the host's hold), so that a
    /// [`Gradient::Device`] can be exchanged; the error says why the
    /// exchange has no device form.
    #[cfg(feature = "device-kernels")]
    pub fn to_device(&mut self, client: &gradcomp_kernels::Client) -> Result<(), crate::error::NoDeviceForm> {
        let units =
            super::device::DeviceUnits::new(client, &self.plan, &self.recipe, self.density, &self.host)?;
        self.device = Some(units);
        Ok(())
    }

    /// Whether the compressors and memories run on the device.
    pub fn on_device(&self) -> bool {
        #[cfg(feature = "device-kernels")]
        return self.device.is_some();
        #[cfg(not(feature = "device-kernels"))]
        false
    }

    /// ‖residual‖₂ over all units with a memory (host memories).
    pub fn residual_norm(&self) -> f64 {
        self.host.residual_norm().unwrap_or(0.0)
    }
}

/// The buffers one exchange works in, reused every step.
pub(super) struct Working {
    pub msgs: Vec<Message>,
    /// The buckets, each away while it is on the wire.
    buckets: Vec<Option<Bucket>>,
    rounds: RoundValues,
    measured: Vec<Option<[f64; 3]>>,
}

impl Working {
    fn pipeline<'a>(
        &'a mut self,
        plan: &'a Plan,
        local: &'a mut dyn GradientSide,
        args: BucketArgs,
    ) -> Pipeline<'a> {
        Pipeline {
            plan,
            local,
            msgs: &mut self.msgs,
            buckets: &mut self.buckets,
            rounds: &mut self.rounds,
            measured: &mut self.measured,
            args,
            in_flight: 0,
        }
    }
}
