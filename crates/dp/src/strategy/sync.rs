//! Synchronous compressed SGD: every step, every worker's gradient goes
//! through the [`GradientExchange`] and all workers obtain the same averaged
//! gradient, so replicas never diverge and parameters never travel.

use gradcomp_comm::Collective;

use super::{Combined, GradStages, GradientExchange, StateBuffers, StepInput, Strategy, StrategyError, Unit};

/// Synchronous exchange, with DGC's optional local gradient clipping.
pub struct Synchronous {
    exchange: GradientExchange,
    /// DGC's local clipping bound before the N^(−1/2) factor (0: off).
    local_clip: f64,
}

impl Synchronous {
    /// `local_clip`: each worker scales its gradient to norm at most
    /// `local_clip · N^(−1/2)` before its memory (DGC; 0 turns it off).
    pub fn new(exchange: GradientExchange, local_clip: f64) -> Self {
        Self { exchange, local_clip }
    }
}

impl Synchronous {
    /// DGC's local clipping: the factor that brings a gradient of squared
    /// norm `norm_sq` to norm `local_clip · N^(−1/2)` (the bound shrinks with
    /// N^(−1/2) because the N workers' gradients add up), if it exceeds it.
    /// Only called with clipping on.
    fn clip_scale(&self, norm_sq: f64, workers: usize) -> Option<f32> {
        let bound = self.local_clip / (workers as f64).sqrt();
        let norm = norm_sq.sqrt();
        (norm > bound).then(|| (bound / norm) as f32)
    }
}

impl Strategy for Synchronous {
    fn name(&self) -> &'static str {
        "sync"
    }

    fn averages_models(&self, _step: u64) -> bool {
        false
    }

    fn average_models(
        &mut self,
        _step: u64,
        _params: &mut [f32],
        _c: &mut dyn Collective,
    ) -> Result<(), StrategyError> {
        Ok(())
    }

    fn combine(
        &mut self,
        input: &StepInput,
        grad: &mut [f32],
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Combined, StrategyError> {
        if self.local_clip > 0.0 {
            let norm_sq = gradcomp_compress::reduce::sum_of_squares(grad);
            if let Some(scale) = self.clip_scale(norm_sq, c.world_size()) {
                grad.iter_mut().for_each(|g| *g *= scale);
            }
        }
        let stats =
            self.exchange.exchange(grad, input.loss, out, input.step, input.lr as f32, input.measure, c)?;
        Ok(Combined { lr: input.lr, extra: Vec::new(), stats })
    }

    /// Streams unless DGC's local clipping needs the whole gradient's norm first.
    fn streams(&self) -> bool {
        self.local_clip == 0.0
    }

    fn combine_staged(
        &mut self,
        input: &StepInput,
        stages: &mut dyn GradStages,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Combined, StrategyError> {
        if !self.streams() {
            let mut grad = super::complete(stages)?;
            return self.combine(input, &mut grad, out, c);
        }
        let stats = self.exchange.exchange_staged(
            stages,
            input.loss,
            out,
            input.step,
            input.lr as f32,
            input.measure,
            c,
        )?;
        Ok(Combined { lr: input.lr, extra: Vec::new(), stats })
    }

    #[cfg(feature = "device-kernels")]
    fn to_device(&mut self, client: &gradcomp_kernels::Client) -> Result<(), String> {
        self.exchange.to_device(client)
    }

    #[cfg(feature = "device-kernels")]
    fn combine_device(
        &mut self,
        input: &StepInput,
        grad: &crate::device_grad::DeviceGrad,
        out: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<Combined, StrategyError> {
        use gradcomp_kernels::{elementwise, reduce};
        let device = |e: gradcomp_kernels::KernelError| StrategyError::Device(e.to_string());
        let mut clipped = None;
        if self.local_clip > 0.0 {
            let mut norm_sq = 0.0;
            for g in &grad.units {
                norm_sq += reduce::moments(&grad.client, g).map_err(device)?.sum_of_squares();
            }
            if let Some(scale) = self.clip_scale(norm_sq, c.world_size()) {
                let units = grad
                    .units
                    .iter()
                    .map(|g| elementwise::scaled(&grad.client, g, scale))
                    .collect::<Result<_, _>>()
                    .map_err(device)?;
                clipped = Some(crate::device_grad::DeviceGrad { client: grad.client.clone(), units });
            }
        }
        let grad = clipped.as_ref().unwrap_or(grad);
        let stats =
            self.exchange.exchange_device(grad, out, input.step, input.lr as f32, input.measure, c)?;
        Ok(Combined { lr: input.lr, extra: Vec::new(), stats })
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

    fn state(&self) -> StateBuffers {
        let mut s = StateBuffers::new();
        self.exchange.state("", &mut s);
        s
    }

    fn restore(&mut self, state: &StateBuffers) -> Result<(), String> {
        self.exchange.restore("", state)
    }
}
