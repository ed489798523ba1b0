//! Signum on the device (ALGORITHMS.md §9.2): the momentum
//! `m = (1 − β)·g + β·m` stays in device memory (the first step copies g),
//! and its signs go out as ±1, as the CPU's `Signum` computes them.

use cubecl::prelude::*;
use gradcomp_compress::quantize::SignumConfig;
use gradcomp_compress::Message;

use crate::buffer::{DeviceF32, KernelError};
use crate::form::DeviceForm;
use crate::onebit::{self, SignValues};
use crate::{elementwise, grid};
use gradcomp_compress::{CompressorConfig, StateError, UnitContext};

#[cube(launch)]
fn momentum_step(m: &mut [f32], g: &[f32], take: f32, keep: f32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < m.len() {
        m[i] = take * g[i] + keep * m[i];
        i += stride;
    }
}

/// One unit's Signum with its momentum on the device.
#[derive(Clone, Debug)]
pub struct DeviceSignum {
    beta: f32,
    momentum: Option<DeviceF32>,
}

impl DeviceSignum {
    pub fn new(cfg: &SignumConfig) -> Self {
        Self { beta: cfg.momentum, momentum: None }
    }

    /// Folds `g` into the momentum and sends its signs.
    pub fn compress(&mut self, client: &Client, g: &DeviceF32, out: &mut Message) -> Result<(), KernelError> {
        match &self.momentum {
            Some(m) if m.len == g.len => {
                if g.len > 0 {
                    let (cubes, dim) = grid(g.len, 1);
                    momentum_step::launch(client, cubes, dim, m.arg(), g.arg(), 1.0 - self.beta, self.beta);
                }
            }
            _ => self.momentum = Some(elementwise::scaled(client, g, 1.0)?),
        }
        let m = self.momentum.as_ref().expect("set above");
        onebit::compress(client, m, SignValues::Unit, out)
    }

    /// The momentum, read back (empty before the first step).
    pub fn state(&self, client: &Client) -> Result<Vec<f32>, KernelError> {
        self.momentum.as_ref().map_or(Ok(Vec::new()), |m| m.read(client))
    }

    /// Uploads a momentum (empty: none yet).
    pub fn restore(&mut self, client: &Client, momentum: &[f32]) {
        self.momentum = (!momentum.is_empty()).then(|| DeviceF32::upload(client, momentum));
    }
}

/// The registry's line for `signum`.
pub(crate) fn form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Signum(c) = config else { return None };
    Some(Box::new(DeviceSignum::new(c)))
}

impl DeviceForm for DeviceSignum {
    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        _: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        DeviceSignum::compress(self, client, g, out)
    }

    fn state(&self, client: &Client) -> Result<Vec<Vec<f32>>, KernelError> {
        Ok(vec![DeviceSignum::state(self, client)?])
    }

    fn restore(&mut self, client: &Client, state: &[Vec<f32>]) -> Result<(), StateError> {
        gradcomp_compress::state::expect_buffers("Signum", state, 1)?;
        DeviceSignum::restore(self, client, &state[0]);
        Ok(())
    }
}
