//! The exchange's front on the device: each unit's memory and compressor run
//! as cubecl kernels on the gradient where burn left it, and only the
//! messages (and the units that travel uncompressed) cross to the host. The
//! collectives, the decoding and the aggregation are the host exchange's own,
//! so a device worker and a CPU worker exchange the same bytes.

use std::time::Instant;

use gradcomp_comm::Collective;
use gradcomp_compress::memory::{Memory, MemoryKind};
use gradcomp_compress::{RngKey, UnitContext};
use gradcomp_kernels::memory::{DeviceDgcMomentum, DeviceErrorFeedback};
use gradcomp_kernels::{Client, DeviceCompressor, DeviceF32, KernelError};

use super::{account, wire, BucketTimes, ExchangeStats, Front, GradientExchange, StrategyError, WireCall};
use crate::device_grad::DeviceGrad;

/// A unit's compensation memory in device memory.
enum DeviceMemory {
    None,
    ErrorFeedback(DeviceErrorFeedback),
    DgcMomentum(DeviceDgcMomentum),
}

/// The units' compressors and memories on one device.
pub(super) struct DeviceFront {
    client: Client,
    compressors: Vec<DeviceCompressor>,
    memories: Vec<DeviceMemory>,
    /// The units that travel uncompressed, copied to the host at their
    /// layout offsets (the rest of the buffer is unused).
    raw_host: Vec<f32>,
}

impl DeviceFront {
    pub(super) fn set_density(&mut self, rho: f64) {
        self.compressors.iter_mut().for_each(|c| c.set_density(rho));
    }

    /// Every unit's memory state, named and ordered as the host memories'
    /// `Memory::state` (so checkpoints move between host and device runs).
    pub(super) fn state(&self) -> Result<Vec<Vec<Vec<f32>>>, KernelError> {
        let read = |b: Option<&DeviceF32>| b.map_or(Ok(Vec::new()), |b| b.read(&self.client));
        self.memories
            .iter()
            .map(|m| match m {
                DeviceMemory::None => Ok(Vec::new()),
                DeviceMemory::ErrorFeedback(ef) => Ok(vec![read(ef.residual())?]),
                DeviceMemory::DgcMomentum(dgc) => {
                    let (u, v) = dgc.state().unzip();
                    Ok(vec![read(u)?, read(v)?])
                }
            })
            .collect()
    }

    /// Uploads the host memories' state (a checkpoint restored into them).
    pub(super) fn load_memories(&mut self, host: &[Box<dyn Memory>]) -> Result<(), KernelError> {
        for (dev, host) in self.memories.iter_mut().zip(host) {
            let state = host.state();
            match dev {
                DeviceMemory::None => {}
                DeviceMemory::ErrorFeedback(ef) => {
                    ef.restore(&self.client, state.first().copied().unwrap_or(&[]))
                }
                DeviceMemory::DgcMomentum(dgc) => match state.as_slice() {
                    [u, v] => dgc.restore(&self.client, u, v)?,
                    _ => dgc.restore(&self.client, &[], &[])?,
                },
            }
        }
        Ok(())
    }
}

fn device_error(e: KernelError) -> StrategyError {
    StrategyError::Device(e.to_string())
}

impl GradientExchange {
    /// Moves the units' compressors and memories to `client`'s device (with
    /// whatever state the host memories hold), so that
    /// [`exchange_device`](Self::exchange_device) can run. Errors when the
    /// compressor has no device form (trimmed top-k, eSGD), and when every
    /// unit travels uncompressed (the dense compressor, or all units
    /// excluded): the host path reads such a gradient back in one transfer.
    pub fn to_device(&mut self, client: &Client) -> Result<(), String> {
        if self.plan.raw.iter().all(|&r| r) {
            return Err("every unit travels uncompressed: one read-back on the host is cheapest".into());
        }
        let mut compressor = DeviceCompressor::new(&self.spec.compressor).map_err(|e| e.to_string())?;
        if let Some(rho) = self.spec.density {
            compressor.set_density(rho);
        }
        let memories = self
            .plan
            .has_memory
            .iter()
            .map(|&m| match (m, self.spec.memory) {
                (true, MemoryKind::ErrorFeedback) => {
                    DeviceMemory::ErrorFeedback(DeviceErrorFeedback::new(self.spec.residual))
                }
                (true, MemoryKind::DgcMomentum) => {
                    DeviceMemory::DgcMomentum(DeviceDgcMomentum::new(self.spec.momentum))
                }
                _ => DeviceMemory::None,
            })
            .collect();
        let mut front = DeviceFront {
            client: client.clone(),
            compressors: self.plan.units.iter().map(|_| compressor.clone()).collect(),
            memories,
            raw_host: Vec::new(),
        };
        front.load_memories(&self.front.memories).map_err(|e| e.to_string())?;
        self.device = Some(front);
        Ok(())
    }

    /// Whether the compressors and memories run on the device.
    pub fn on_device(&self) -> bool {
        self.device.is_some()
    }

    /// [`exchange`](Self::exchange) for a gradient in device memory: the same
    /// collectives, messages and result, with each unit's memory and
    /// compressor run by the device kernels. Call [`to_device`](Self::to_device) first.
    #[allow(clippy::too_many_arguments)]
    pub fn exchange_device(
        &mut self,
        grad: &DeviceGrad,
        out: &mut [f32],
        step: u64,
        lr: f32,
        measure: bool,
        c: &mut dyn Collective,
    ) -> Result<ExchangeStats, StrategyError> {
        let Some(mut front) = self.device.take() else {
            return Err(StrategyError::Device("exchange_device before to_device".into()));
        };
        let result = self.exchange_on(&mut front, grad, out, step, lr, measure, c);
        self.device = Some(front);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn exchange_on(
        &mut self,
        front: &mut DeviceFront,
        grad: &DeviceGrad,
        out: &mut [f32],
        step: u64,
        lr: f32,
        measure: bool,
        c: &mut dyn Collective,
    ) -> Result<ExchangeStats, StrategyError> {
        let plan = &self.plan;
        if grad.units.len() != plan.units.len()
            || grad.units.iter().zip(&plan.units).any(|(g, u)| g.len != u.len)
        {
            return Err(StrategyError::Device(
                "the device gradient is not cut into this exchange's units".into(),
            ));
        }
        let wall = Instant::now();
        let client = &front.client;
        let mut st = ExchangeStats { elements: out.len() as u64, ..Default::default() };
        let t = Instant::now();
        // 1. Memories fold in their state; raw units come to the host as they are.
        front.raw_host.resize(out.len(), 0.0);
        let mut inputs = Vec::with_capacity(plan.units.len());
        for (u, unit) in plan.units.iter().enumerate() {
            let g = &grad.units[u];
            if plan.raw[u] {
                let host = g.read(client).map_err(device_error)?;
                front.raw_host[unit.offset..unit.offset + unit.len].copy_from_slice(&host);
            }
            inputs.push(match &mut front.memories[u] {
                DeviceMemory::None => g.clone(),
                DeviceMemory::ErrorFeedback(ef) => ef.compensate(client, g, lr).clone(),
                DeviceMemory::DgcMomentum(dgc) => dgc.compensate(client, g).clone(),
            });
        }
        // 2. Two-phase compressors agree on their scalars (TernGrad's shared scaler).
        self.front.scalars.clear();
        self.front.scalar_of.clear();
        for (u, input) in inputs.iter().enumerate() {
            let s = if plan.raw[u] {
                None
            } else {
                front.compressors[u].local_scalar(client, input).map_err(device_error)?
            };
            self.front.push_scalar(s);
        }
        let before_scalars = t.elapsed().as_secs_f64();
        let scalar_round = self.share_scalars(c, &mut st)?;
        // 3. Compress every unit on the device; only the message comes back.
        let t = Instant::now();
        let (plan, host) = (&self.plan, &mut self.front);
        let key = RngKey::new(self.seed, c.rank() as u32, step, 0);
        host.measured.clear();
        host.measured.resize(plan.units.len(), None);
        for (u, input) in inputs.iter().enumerate() {
            let unit = &plan.units[u];
            if plan.raw[u] {
                if plan.topology == crate::config::Topology::ParameterServer {
                    let m = host.msgs[u].dense_mut();
                    m.values.clear();
                    m.values.extend_from_slice(&front.raw_host[unit.offset..unit.offset + unit.len]);
                }
                continue;
            }
            let ctx = UnitContext {
                key: RngKey { unit: unit.id, ..key },
                shared_scalar: host.scalar_of[u].map(|i| host.scalars[i]),
                loss: None,
            };
            front.compressors[u].compress(client, input, &ctx, &mut host.msgs[u]).map_err(device_error)?;
            let measured = if measure { Some(input.read(client).map_err(device_error)?) } else { None };
            host.measured[u] = account(&host.msgs[u], measured.as_deref(), &mut host.scratch, &mut st);
        }
        if measure {
            host.fold_measured(&mut st);
        }
        st.compress_seconds = before_scalars + t.elapsed().as_secs_f64();
        // 4. Move the messages bucket by bucket and aggregate into `out`, on
        // the host (not pipelined: the device path keeps one stream of work).
        let t = Instant::now();
        out.fill(0.0);
        let inv_n = 1.0 / c.world_size() as f32;
        st.buckets = vec![BucketTimes::default(); plan.buckets.len()];
        for b in 0..plan.buckets.len() {
            let p = &mut self.payloads[b];
            wire::stage(plan, &host.msgs, &front.raw_host, b, p);
            wire::move_bucket(plan, b, p, &mut self.server, c)?;
            p.record(b, &mut st);
            wire::land(plan, &host.msgs, b, p, out, inv_n)?;
        }
        st.communicate_seconds = scalar_round + t.elapsed().as_secs_f64();
        // 5. Memories keep what was not sent; lr-scaled units return to gradient units.
        let t = Instant::now();
        let mut residual_sq = 0.0;
        for (u, mem) in front.memories.iter_mut().enumerate() {
            let residual = match mem {
                DeviceMemory::None => continue,
                DeviceMemory::ErrorFeedback(ef) => {
                    ef.update(client, &host.msgs[u]).map_err(device_error)?;
                    ef.residual()
                }
                DeviceMemory::DgcMomentum(dgc) => {
                    dgc.update(client, &host.msgs[u]).map_err(device_error)?;
                    dgc.state().map(|(_, v)| v)
                }
            };
            if let Some(r) = residual {
                residual_sq +=
                    gradcomp_kernels::reduce::moments(client, r).map_err(device_error)?.sum_of_squares();
            }
        }
        for u in 0..plan.units.len() {
            plan.to_gradient_units(u, out, lr);
        }
        st.residual_norm = residual_sq.sqrt();
        st.decode_seconds = t.elapsed().as_secs_f64();
        st.wall_seconds = wall.elapsed().as_secs_f64();
        Ok(st)
    }
}

impl GradientExchange {
    /// The scalars' max-reduce across workers (TernGrad's shared scaler), if
    /// any unit has one; returns its seconds.
    fn share_scalars(
        &mut self,
        c: &mut dyn Collective,
        st: &mut ExchangeStats,
    ) -> Result<f64, StrategyError> {
        let t = Instant::now();
        let scalars = &mut self.front.scalars;
        if !scalars.is_empty() {
            c.allreduce_max_f32(scalars)?;
            st.calls.push(WireCall::scalar_round(scalars.len()));
        }
        Ok(t.elapsed().as_secs_f64())
    }
}

impl Front {
    /// Records the next unit's local scalar (two-phase compressors), in unit order.
    fn push_scalar(&mut self, s: Option<f32>) {
        self.scalar_of.push(s.map(|s| {
            self.scalars.push(s);
            self.scalars.len() - 1
        }));
    }
}
