//! Signum (Bernstein et al., ICML 2018; ALGORITHMS.md §9.2): signSGD on a
//! momentum, `m = (1 − β)·g + β·m` (the first step `m = g`), each worker
//! sending the signs of its own momentum and the aggregate a majority vote,
//! as GRACE's `SignumCompressor`. The momentum is the compressor's state, so
//! checkpoints carry it.

use serde::{Deserialize, Serialize};

use super::signsgd::unit_signs;
use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::{check, Method};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignumConfig {
    /// β, the momentum's decay (GRACE's default 0.9).
    pub momentum: f32,
}

impl Default for SignumConfig {
    fn default() -> Self {
        Self { momentum: 0.9 }
    }
}

#[derive(Clone, Debug)]
pub struct Signum {
    beta: f32,
    /// Empty before the first step.
    momentum: Vec<f32>,
}

impl Signum {
    pub fn new(cfg: &SignumConfig) -> Self {
        Self { beta: cfg.momentum, momentum: Vec::new() }
    }
}

impl Compressor for Signum {
    fn name(&self) -> &'static str {
        "signum"
    }

    fn combine(&self) -> Combine {
        Combine::MajorityVote
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        if self.momentum.len() == input.len() {
            let (keep, take) = (self.beta, 1.0 - self.beta);
            for (m, &g) in self.momentum.iter_mut().zip(input) {
                *m = take * g + keep * *m;
            }
        } else {
            self.momentum.clear();
            self.momentum.extend_from_slice(input);
        }
        unit_signs(&self.momentum, out);
    }

    fn state(&self) -> Vec<&[f32]> {
        vec![&self.momentum]
    }

    fn restore(&mut self, state: &[Vec<f32>]) -> Result<(), crate::StateError> {
        crate::state::expect_buffers("Signum", state, 1)?;
        self.momentum.clone_from(&state[0]);
        Ok(())
    }
}

impl Method for SignumConfig {
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check((0.0..1.0).contains(&self.momentum), "momentum", || {
            format!("{} is not in [0, 1) (GRACE's default is 0.9)", self.momentum)
        })
    }
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(Signum::new(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_momentum_decides_the_sign_after_the_first_step() {
        let mut s = Signum::new(&SignumConfig { momentum: 0.9 });
        let (mut msg, ctx) = (Message::default(), UnitContext::default());
        s.compress(&[1.0, -1.0], &ctx, &mut msg);
        assert_eq!(s.state()[0], [1.0, -1.0]);
        // 0.1·(−2) + 0.9·1 = 0.7 stays positive; 0.1·4 + 0.9·(−1) = −0.5.
        s.compress(&[-2.0, 4.0], &ctx, &mut msg);
        let mut out = vec![0.0; 2];
        msg.add_to(1.0, &mut out);
        assert_eq!(out, [1.0, -1.0]);
    }
}
