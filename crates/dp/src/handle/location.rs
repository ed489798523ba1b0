//! Where the exchange compresses ([`CompressionLocation`]), decided at the
//! first step from where burn left the gradient and whether the strategy
//! has a device form, and how the step's gradient arrives there
//! ([`Arrival`]).

use burn::module::Module;

use super::{CompressionLocation, DataParallel};
use crate::backward::{Pass, StagedBackward};
use crate::params::{self, GradSource};
use crate::DataParallelError;

/// How a step's gradient reaches the exchange.
pub(super) enum Arrival {
    /// Read whole into `DataParallel::grad`.
    Host,
    /// Left on the device, one buffer per unit.
    #[cfg(feature = "device-kernels")]
    Device(gradcomp_exchange::DeviceGrad),
    /// A staged backward pass, streamed stage by stage into the host exchange.
    Streamed(Box<StagedBackward>),
}

impl DataParallel {
    /// This step's gradient where the exchange compresses it: streamed,
    /// when the pass is staged and the host compresses (streaming must know
    /// that before the first stage); otherwise whole, on the device (left
    /// where burn put it) or read into `self.grad` (a staged pass merged
    /// first). The first step decides the [`CompressionLocation`]. burn's
    /// gradients are read (or their device buffers held) and freed here.
    pub(super) fn arrival<M: Module, G: GradSource>(
        &mut self,
        model: &M,
        grads: Pass<G>,
    ) -> Result<Arrival, DataParallelError> {
        match grads {
            Pass::Staged(stages) if matches!(self.location, CompressionLocation::Host(_)) => {
                Ok(Arrival::Streamed(stages))
            }
            Pass::Staged(stages) => {
                let merged = params::merge_stages(model, *stages).map_err(DataParallelError::Usage)?;
                self.whole(model, &merged)
            }
            Pass::Whole(grads) => self.whole(model, &grads),
        }
    }

    /// A whole gradient where the exchange compresses it.
    fn whole<M: Module, G: GradSource>(
        &mut self,
        model: &M,
        grads: &G,
    ) -> Result<Arrival, DataParallelError> {
        #[cfg(feature = "device-kernels")]
        if matches!(self.location, CompressionLocation::Undecided | CompressionLocation::Device) {
            if let Some(g) = self.device_grad(model, grads)? {
                return Ok(Arrival::Device(g));
            }
        }
        if self.location == CompressionLocation::Undecided {
            self.location = CompressionLocation::Host(if cfg!(feature = "device-kernels") {
                "compression.on_device = false".into()
            } else {
                "this build has no device kernels (cargo features cuda, wgpu)".into()
            });
        }
        params::read_grads(model, grads, &mut self.grad);
        Ok(Arrival::Host)
    }

    /// The gradient as device buffers, one per unit, when the exchange runs
    /// on the device; at the first step, moves the strategy there if it can
    /// and records why not otherwise.
    #[cfg(feature = "device-kernels")]
    fn device_grad<M: Module, G: GradSource>(
        &mut self,
        model: &M,
        grads: &G,
    ) -> Result<Option<gradcomp_exchange::DeviceGrad>, DataParallelError> {
        use crate::device_grad::from_burn;
        if !self.cfg.compression.on_device {
            return Ok(None);
        }
        if self.location == CompressionLocation::Device {
            // The memories live on the device now: a gradient that left it
            // (a model moved to the CPU mid-run) cannot go back to the host path.
            return from_burn(model, grads, self.strategy.units())
                .ok_or_else(|| DataParallelError::Device {
                    rank: self.rank(),
                    message: "the gradients left the GPU after the exchange moved its memories there".into(),
                })
                .map(Some);
        }
        if self.strategy.units().is_empty() {
            self.location = CompressionLocation::Host(format!(
                "strategy `{}` compresses on the host",
                self.strategy.name()
            ));
            return Ok(None);
        }
        let Some(g) = from_burn(model, grads, self.strategy.units()) else {
            self.location = CompressionLocation::Host(
                "the gradients are not f32 tensors on a GPU (cuda, wgpu) device".into(),
            );
            return Ok(None);
        };
        match self.strategy.to_device(&g.client) {
            Ok(()) => {
                self.location = CompressionLocation::Device;
                Ok(Some(g))
            }
            Err(why) => {
                self.location = CompressionLocation::Host(why.to_string());
                Ok(None)
            }
        }
    }

    /// Copies a device gradient into `self.grad` (measured steps, error reports).
    pub(super) fn grad_on_host(&mut self, grad: &Arrival) -> Result<(), DataParallelError> {
        match grad {
            Arrival::Host | Arrival::Streamed(_) => Ok(()),
            #[cfg(feature = "device-kernels")]
            Arrival::Device(g) => g
                .read(&mut self.grad)
                .map_err(|e| DataParallelError::Device { rank: self.rank(), message: e.to_string() }),
        }
    }

    /// This worker's first non-finite value: the loss, or the tensor holding it.
    pub(super) fn find_nonfinite(
        &mut self,
        grad: &Arrival,
        loss: Option<f64>,
    ) -> Result<Option<super::NonFinite>, DataParallelError> {
        if loss.is_some_and(|l| !l.is_finite()) {
            return Ok(Some(("loss", "(loss)".to_string())));
        }
        match grad {
            Arrival::Host | Arrival::Streamed(_) => {}
            #[cfg(feature = "device-kernels")]
            Arrival::Device(g) => {
                let device = |e: gradcomp_kernels::KernelError| DataParallelError::Device {
                    rank: self.rank(),
                    message: e.to_string(),
                };
                if g.all_finite().map_err(device)? {
                    return Ok(None);
                }
                self.grad_on_host(grad)?;
            }
        }
        if gradcomp_compress::reduce::all_finite(&self.grad) {
            return Ok(None);
        }
        let Some(j) = self.grad.iter().position(|g| !g.is_finite()) else {
            return Ok(None);
        };
        Ok(Some(("gradient", self.layout.slot_of(j).map_or_else(|| "?".into(), |s| s.name.clone()))))
    }
}
