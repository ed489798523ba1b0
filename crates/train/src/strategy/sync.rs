//! Synchronous compressed SGD: every step, every worker's gradient goes
//! through the [`GradientExchange`] and all workers obtain the same averaged
//! gradient, so replicas never diverge and parameters never travel.

use gradcomp_comm::Collective;

use super::{Combined, GradientExchange, StateBuffers, StepInput, Strategy, StrategyError, Unit};

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
            // DGC's local clipping: the norm bound shrinks with N^(-1/2) because
            // the N workers' gradients add up.
            let bound = self.local_clip / (c.world_size() as f64).sqrt();
            let norm = gradcomp_compress::reduce::sum_of_squares(grad).sqrt();
            if norm > bound {
                let scale = (bound / norm) as f32;
                grad.iter_mut().for_each(|g| *g *= scale);
            }
        }
        let stats =
            self.exchange.exchange(grad, input.loss, out, input.step, input.lr as f32, input.measure, c)?;
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
