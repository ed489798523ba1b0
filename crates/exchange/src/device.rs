//! The exchange's compression on the device: each unit's memory and
//! compressor run as cubecl kernels on the gradient where burn left it, and
//! only the messages (and the units that travel uncompressed) cross to the
//! host. The pipeline, the collectives, the decoding and the aggregation are
//! the host exchange's own, so a device worker and a CPU worker exchange
//! the same bytes.

use gradcomp_compress::memory::MemoryKind;
use gradcomp_compress::{Message, StateError, UnitContext};
use gradcomp_kernels::memory::{DeviceDgcMomentum, DeviceErrorFeedback};
use gradcomp_kernels::{Client, DeviceCompressor, DeviceF32, KernelError};

use super::gradient_side::{GradientSide, ReduceOp};
use super::host::HostCompression;
use super::plan::Plan;
use super::recipe::Recipe;
use super::stats::measure;
use crate::device_grad::DeviceGrad;
use crate::error::{ExchangeError, NoDeviceForm};

/// A unit's compensation memory in device memory.
enum DeviceMemory {
    None,
    ErrorFeedback(DeviceErrorFeedback),
    DgcMomentum(DeviceDgcMomentum),
}

/// The units' compressors and memories on one device, kept across steps.
pub(crate) struct DeviceUnits {
    client: Client,
    compressors: Vec<DeviceCompressor>,
    memories: Vec<DeviceMemory>,
    /// The units that travel uncompressed, copied to the host at their
    /// layout offsets (the rest of the buffer is unused).
    uncompressed_on_host: Vec<f32>,
    scratch: Vec<f32>,
}

fn device_error(e: KernelError) -> ExchangeError {
    ExchangeError::Device(e.to_string())
}

impl DeviceUnits {
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

    /// The compressors' own state (PowerSGD's Q, Signum's momentum), as the
    /// host compressors' `Compressor::state`.
    pub(super) fn compressor_state(&self) -> Result<Vec<Vec<Vec<f32>>>, KernelError> {
        self.compressors.iter().map(|c| c.state(&self.client)).collect()
    }

    /// Uploads the host compressors' and memories' state (a checkpoint
    /// restored into them), so that either path continues the other's run.
    pub(super) fn load(&mut self, host: &HostCompression) -> Result<(), StateError> {
        let device = |e: gradcomp_kernels::KernelError| StateError::Device(e.to_string());
        for (dev, host) in self.compressors.iter_mut().zip(&host.units) {
            let state: Vec<Vec<f32>> = host.compressor().state().into_iter().map(<[f32]>::to_vec).collect();
            dev.restore(&self.client, &state)?;
        }
        for (dev, host) in self.memories.iter_mut().zip(&host.units) {
            let state = host.memory().state();
            match dev {
                DeviceMemory::None => {}
                DeviceMemory::ErrorFeedback(ef) => {
                    ef.restore(&self.client, state.first().copied().unwrap_or(&[]))
                }
                DeviceMemory::DgcMomentum(dgc) => match state.as_slice() {
                    [u, v] => dgc.restore(&self.client, u, v).map_err(device)?,
                    _ => dgc.restore(&self.client, &[], &[]).map_err(device)?,
                },
            }
        }
        Ok(())
    }
}

impl DeviceUnits {
    /// The units' compressors and memories on `client`'s device, built from
    /// `recipe` at density `density`, with the host's state uploaded. Errors when the compressor has no device form (trimmed
    /// top-k, eSGD, a compressor of the user's own), and when every unit
    /// travels uncompressed (the dense compressor, or all units excluded):
    /// the host path reads such a gradient back in one transfer.
    pub(super) fn new(
        client: &Client,
        plan: &Plan,
        recipe: &Recipe,
        density: Option<f64>,
        host: &HostCompression,
    ) -> Result<Self, NoDeviceForm> {
        if plan.units.iter().all(|u| u.uncompressed) {
            return Err(NoDeviceForm::NothingToCompress);
        }
        if plan.topology == crate::config::Topology::ReduceScatter {
            return Err(NoDeviceForm::HostOnly(
                "the reduce-scatter compresses its shards on the host".into(),
            ));
        }
        let Some(builtin) = recipe.compressor.builtin() else {
            let name = recipe.compressor.name();
            return Err(NoDeviceForm::HostOnly(format!(
                "compressor `{name}` is the user's own and has no device form"
            )));
        };
        let compressors = plan
            .units
            .iter()
            .map(|u| {
                let mut c = DeviceCompressor::new(builtin, &u.shape)
                    .map_err(|e| NoDeviceForm::Device(e.to_string()))?;
                if let Some(rho) = density {
                    c.set_density(rho);
                }
                Ok(c)
            })
            .collect::<Result<_, NoDeviceForm>>()?;
        let memories = plan
            .units
            .iter()
            .map(|u| match (u.has_memory, recipe.memory_kind()) {
                (true, MemoryKind::ErrorFeedback) => DeviceMemory::ErrorFeedback(
                    DeviceErrorFeedback::with_decay(recipe.residual, recipe.decay),
                ),
                (true, MemoryKind::DgcMomentum) => {
                    DeviceMemory::DgcMomentum(DeviceDgcMomentum::new(recipe.momentum))
                }
                _ => DeviceMemory::None,
            })
            .collect();
        let mut units = DeviceUnits {
            client: client.clone(),
            compressors,
            memories,
            uncompressed_on_host: vec![0.0; plan.total()],
            scratch: Vec::new(),
        };
        units.load(host).map_err(|e| NoDeviceForm::Device(e.to_string()))?;
        Ok(units)
    }
}

/// One step's compression on the device: the persistent units, the step's
/// gradient buffers, and each unit's input once compensated.
pub(crate) struct DeviceCompression<'a> {
    units: &'a mut DeviceUnits,
    grad: &'a DeviceGrad,
    /// Per unit: its buffer handle after compensation (a handle, not a copy).
    inputs: Vec<Option<DeviceF32>>,
}

impl<'a> DeviceCompression<'a> {
    pub(crate) fn new(
        units: &'a mut DeviceUnits,
        plan: &Plan,
        grad: &'a DeviceGrad,
    ) -> Result<Self, ExchangeError> {
        if grad.units.len() != plan.units.len()
            || grad.units.iter().zip(&plan.units).any(|(g, u)| g.len != u.len)
        {
            return Err(ExchangeError::Device(
                "the device gradient is not cut into this exchange's units".into(),
            ));
        }
        Ok(DeviceCompression { units, grad, inputs: vec![None; plan.units.len()] })
    }

    fn input(&self, u: usize) -> Result<&DeviceF32, ExchangeError> {
        self.inputs[u]
            .as_ref()
            .ok_or_else(|| ExchangeError::Device(format!("unit {u} compressed before compensation")))
    }
}

impl GradientSide for DeviceCompression<'_> {
    /// The compressors' rounds: PowerSGD's two, TernGrad's shared scaler's one.
    fn rounds(&self) -> usize {
        self.units.compressors.iter().map(|c| c.rounds()).max().unwrap_or(0)
    }

    fn compensate(&mut self, plan: &Plan, u: usize, _grad: &[f32], lr: f32) -> Result<(), ExchangeError> {
        let d = &mut *self.units;
        let g = &self.grad.units[u];
        if plan.units[u].uncompressed {
            let unit = &plan.units[u];
            let host = g.read(&d.client).map_err(device_error)?;
            d.uncompressed_on_host[unit.offset..unit.offset + unit.len].copy_from_slice(&host);
        }
        self.inputs[u] = Some(match &mut d.memories[u] {
            DeviceMemory::None => g.clone(),
            DeviceMemory::ErrorFeedback(ef) => ef.compensate(&d.client, g, lr).clone(),
            DeviceMemory::DgcMomentum(dgc) => dgc.compensate(&d.client, g).clone(),
        });
        Ok(())
    }

    /// The compressor's rounds: PowerSGD's factors, or TernGrad's local
    /// scalar max-reduced (ALGORITHMS.md §1.2).
    fn contribute(
        &mut self,
        plan: &Plan,
        u: usize,
        round: usize,
        _grad: &[f32],
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, ExchangeError> {
        if plan.units[u].uncompressed {
            return Ok(None);
        }
        let input = self.input(u)?.clone();
        let d = &mut *self.units;
        d.compressors[u].round_contribution(&d.client, round, &input, ctx, out).map_err(device_error)
    }

    fn round_result(&mut self, u: usize, round: usize, values: &[f32], workers: usize) {
        self.units.compressors[u].round_result(round, values, workers);
    }

    fn compress(
        &mut self,
        _plan: &Plan,
        u: usize,
        _grad: &[f32],
        ctx: &UnitContext,
        msg: &mut Message,
        measured: bool,
    ) -> Result<Option<[f64; 3]>, ExchangeError> {
        let input = self.input(u)?.clone();
        let d = &mut *self.units;
        d.compressors[u].compress(&d.client, &input, ctx, msg).map_err(device_error)?;
        if !measured {
            return Ok(None);
        }
        let x = input.read(&d.client).map_err(device_error)?;
        Ok(Some(measure(&x, msg, &mut d.scratch)))
    }

    fn uncompressed<'b>(&'b self, plan: &Plan, u: usize, _grad: &'b [f32]) -> &'b [f32] {
        let unit = &plan.units[u];
        &self.units.uncompressed_on_host[unit.offset..unit.offset + unit.len]
    }

    fn update(&mut self, u: usize, msg: &Message) -> Result<(), ExchangeError> {
        let d = &mut *self.units;
        match &mut d.memories[u] {
            DeviceMemory::None => Ok(()),
            DeviceMemory::ErrorFeedback(ef) => ef.update(&d.client, msg).map_err(device_error),
            DeviceMemory::DgcMomentum(dgc) => dgc.update(&d.client, msg).map_err(device_error),
        }
    }

    fn residual_norm(&self) -> Result<f64, ExchangeError> {
        let d = &*self.units;
        let mut sq = 0.0;
        for mem in &d.memories {
            let residual = match mem {
                DeviceMemory::None => None,
                DeviceMemory::ErrorFeedback(ef) => ef.residual(),
                DeviceMemory::DgcMomentum(dgc) => dgc.state().map(|(_, v)| v),
            };
            if let Some(r) = residual {
                sq += gradcomp_kernels::reduce::moments(&d.client, r).map_err(device_error)?.sum_of_squares();
            }
        }
        Ok(sq.sqrt())
    }
}
