//! Synchronous compressed SGD: every step, every worker's gradient goes
//! through the [`GradientExchange`] and all workers obtain the same averaged
//! gradient, so replicas never diverge and parameters never travel.

use gradcomp_comm::Collective;

use super::base::{Strategy, Update};
use crate::error::ExchangeError;
use crate::grad_stages::CompleteGrad;
use crate::{Gradient, GradientExchange, StateBuffers, StepInput, Unit};

/// Synchronous exchange, with DGC's optional local gradient clipping.
pub struct Synchronous {
    exchange: GradientExchange,
    /// DGC's local clipping bound before the N^(−1/2) factor (0: off).
    local_clip: f64,
    /// The clipped gradient (local clipping on the host), reused.
    clipped: Vec<f32>,
}

impl Synchronous {
    /// `local_clip`: each worker scales its gradient to norm at most
    /// `local_clip · N^(−1/2)` before its memory (DGC; 0 turns it off).
    pub fn new(exchange: GradientExchange, local_clip: f64) -> Self {
        Self { exchange, local_clip, clipped: Vec::new() }
    }

    /// DGC's local clipping: the factor that brings a gradient of squared
    /// norm `norm_sq` to norm `local_clip · N^(−1/2)` (the bound shrinks with
    /// N^(−1/2) because the N workers' gradients add up), if it exceeds it.
    /// Only called with clipping on.
    fn clip_scale(&self, norm_sq: f64, workers: usize) -> Option<f32> {
        let bound = self.local_clip / (workers as f64).sqrt();
        let norm = norm_sq.sqrt();
        (norm > bound).then(|| (bound / norm) as f32)
    }

    /// The exchange of a device gradient clipped first (DGC), if clipping
    /// applies to it.
    #[cfg(feature = "device-kernels")]
    fn clip_on_device(
        &self,
        grad: &crate::device_grad::DeviceGrad,
        workers: usize,
    ) -> Result<Option<crate::device_grad::DeviceGrad>, ExchangeError> {
        use gradcomp_kernels::{elementwise, reduce};
        let device = |e: gradcomp_kernels::KernelError| ExchangeError::Device(e.to_string());
        let mut norm_sq = 0.0;
        for g in &grad.units {
            norm_sq += reduce::moments(&grad.client, g).map_err(device)?.sum_of_squares();
        }
        let Some(scale) = self.clip_scale(norm_sq, workers) else {
            return Ok(None);
        };
        let units = grad
            .units
            .iter()
            .map(|g| elementwise::scaled(&grad.client, g, scale))
            .collect::<Result<_, _>>()
            .map_err(device)?;
        Ok(Some(crate::device_grad::DeviceGrad { client: grad.client.clone(), units }))
    }
}

impl Strategy for Synchronous {
    fn name(&self) -> &'static str {
        "sync"
    }

    /// Streams a staged gradient bucket by bucket, unless DGC's local
    /// clipping needs the whole gradient's norm first.
    fn update(
        &mut self,
        input: &StepInput,
        grad: Gradient<'_>,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Update, ExchangeError> {
        let stats = match grad {
            Gradient::Host(stages) if self.local_clip > 0.0 => {
                stages.complete()?;
                self.clipped.clear();
                self.clipped.extend_from_slice(stages.grad());
                let norm_sq = gradcomp_compress::reduce::sum_of_squares(&self.clipped);
                if let Some(scale) = self.clip_scale(norm_sq, c.world_size()) {
                    self.clipped.iter_mut().for_each(|g| *g *= scale);
                }
                self.exchange.exchange(Gradient::Host(&mut CompleteGrad(&self.clipped)), input, out, c)?
            }
            #[cfg(feature = "device-kernels")]
            Gradient::Device(g) if self.local_clip > 0.0 => match self.clip_on_device(g, c.world_size())? {
                Some(clipped) => self.exchange.exchange(Gradient::Device(&clipped), input, out, c)?,
                None => self.exchange.exchange(Gradient::Device(g), input, out, c)?,
            },
            grad => self.exchange.exchange(grad, input, out, c)?,
        };
        Ok(Update { lr: input.lr, extra: Vec::new(), stats })
    }

    fn identical_replicas(&self) -> bool {
        true
    }

    fn set_density(&mut self, rho: f64) {
        self.exchange.set_density(rho);
    }

    fn units(&self) -> &[Unit] {
        self.exchange.units()
    }

    fn state(&self) -> Result<StateBuffers, ExchangeError> {
        let mut s = StateBuffers::new();
        self.exchange.state("", &mut s)?;
        Ok(s)
    }

    fn restore(&mut self, state: &StateBuffers) -> Result<(), gradcomp_compress::StateError> {
        self.exchange.restore("", state)
    }

    #[cfg(feature = "device-kernels")]
    fn to_device(&mut self, client: &gradcomp_kernels::Client) -> Result<(), crate::error::NoDeviceForm> {
        self.exchange.to_device(client)
    }
}
