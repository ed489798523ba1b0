//! Where the exchange compresses ([`CompressionLocation`]), decided at the
//! first step from where burn left the gradient and whether the strategy
//! has a device form, and the step's gradient there.

use burn::module::Module;

use super::{CompressionLocation, DataParallel};
use crate::params::{self, GradSource};
use crate::DataParallelError;

/// This step's gradient: read into `DataParallel::grad`, or left on the device.
pub(super) enum StepGrad {
    Host,
    #[cfg(feature = "device-kernels")]
    Device(gradcomp_exchange::DeviceGrad),
}

impl DataParallel {
    /// This step's gradient where the exchange compresses it: on the device
    /// (left where burn put it), or read into `self.grad`. The first step
    /// decides the [`CompressionLocation`].
    pub(super) fn take_grad<M: Module, G: GradSource>(
        &mut self,
        model: &M,
        grads: &G,
    ) -> Result<StepGrad, DataParallelError> {
        #[cfg(feature = "device-kernels")]
        if matches!(self.location, CompressionLocation::Undecided | CompressionLocation::Device) {
            if let Some(g) = self.device_grad(model, grads)? {
                return Ok(StepGrad::Device(g));
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
        Ok(StepGrad::Host)
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
                self.location = CompressionLocation::Host(why);
                Ok(None)
            }
        }
    }

    /// Copies a device gradient into `self.grad` (measured steps, error reports).
    pub(super) fn grad_on_host(&mut self, grad: &StepGrad) -> Result<(), DataParallelError> {
        match grad {
            StepGrad::Host => Ok(()),
            #[cfg(feature = "device-kernels")]
            StepGrad::Device(g) => g
                .read(&mut self.grad)
                .map_err(|e| DataParallelError::Device { rank: self.rank(), message: e.to_string() }),
        }
    }

    /// This worker's first non-finite value: the loss, or the tensor holding it.
    pub(super) fn find_nonfinite(
        &mut self,
        grad: &StepGrad,
        loss: Option<f64>,
    ) -> Result<Option<(&'static str, String)>, DataParallelError> {
        if loss.is_some_and(|l| !l.is_finite()) {
            return Ok(Some(("loss", "(loss)".to_string())));
        }
        match grad {
            StepGrad::Host => {}
            #[cfg(feature = "device-kernels")]
            StepGrad::Device(g) => {
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
