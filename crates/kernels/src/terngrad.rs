//! TernGrad on the device (ALGORITHMS.md §1.1): the scaler from one
//! statistics pass, then stochastic ternarization and 2-bit packing fused in
//! a second pass that reads each element once and writes one word per 16.
//! Two passes are the minimum: every code depends on the scaler, which
//! depends on every element (and, with scalar sharing, on every worker).

use cubecl::prelude::*;
use gradcomp_compress::quantize::ratio_factors;
use gradcomp_compress::quantize::terngrad::TernGradConfig;
use gradcomp_compress::{Message, RngKey};

use crate::buffer::{read_prefix, u32_arg, DeviceF32, KernelError};
use crate::form::DeviceForm;
use crate::grid;
use crate::hash::{draw, stream_words};
use crate::reduce;
use gradcomp_compress::{CompressorConfig, ReduceOp, UnitContext};

/// Codes of 16 elements per word, element `j` in bits `2j..2j+2`: `0b01` = +1,
/// `0b10` = −1, 0 = dropped, as the CPU's `pack_ternary`. `b_k = 1` iff a
/// uniform draw on the 2^-24 grid is below `|g_k|/s`; NaN is dropped.
#[cube(launch)]
fn pack_ternary(g: &[f32], words: &mut [u32], pre: f32, inv_s: f32, k0: u32, k1: u32) {
    let n = g.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut w = ABSOLUTE_POS;
    while w < words.len() {
        let mut word = 0u32;
        #[unroll]
        for j in 0..16u32 {
            let i = w * 16 + j as usize;
            if i < n {
                let bits = u32::reinterpret(g[i]);
                // |g|/s as (|g|·pre)·(1/(s·pre)), finite for any s (`ratio_factors`).
                let p = (f32::reinterpret(bits & 0x7fff_ffffu32) * pre) * inv_s;
                let u = draw(i as u32, k0, k1);
                let d = f32::cast_from(u >> 8u32) * (1.0f32 / 16_777_216.0f32);
                if d < p {
                    word |= (1u32 + (bits >> 31u32)) << (2u32 * j);
                }
            }
        }
        words[w] = word;
        w += stride;
    }
}

/// TernGrad with the CPU compressor's options.
#[derive(Clone, Debug, Default)]
pub struct DeviceTernGrad {
    pub config: TernGradConfig,
}

impl DeviceTernGrad {
    pub fn new(config: TernGradConfig) -> Self {
        Self { config }
    }

    /// This worker's scaler: `c·σ` with clipping, `max |g|` without.
    pub fn scaler(&self, client: &Client, g: &DeviceF32) -> Result<f32, KernelError> {
        let m = reduce::moments(client, g)?;
        Ok(if self.config.clipping { self.config.c * m.population_std() as f32 } else { m.max_abs })
    }

    /// [`Message::Ternary`] for `g`, with `shared` the max-reduced scaler when
    /// the workers share one (agreed in the CPU compressor's round).
    pub fn compress(
        &self,
        client: &Client,
        g: &DeviceF32,
        shared: Option<f32>,
        key: &RngKey,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        let s = match shared {
            Some(s) => s,
            None => self.scaler(client, g)?,
        };
        let m = out.ternary_mut();
        m.len = g.len;
        m.packing = self.config.packing;
        m.scale = if s.is_finite() && s > 0.0 { s } else { 0.0 };
        m.packed.clear();
        m.packed.resize(g.len.div_ceil(4), 0);
        if m.scale == 0.0 || g.len == 0 {
            return Ok(());
        }
        let n_words = g.len.div_ceil(16);
        let words = client.empty(n_words * 4);
        let (k0, k1) = stream_words(key);
        let (cubes, dim) = grid(n_words, 1);
        let (pre, inv_s) = ratio_factors(1.0, m.scale);
        pack_ternary::launch(client, cubes, dim, g.arg(), u32_arg(&words, n_words), pre, inv_s, k0, k1);
        m.packed = read_prefix(client, &words, m.packed.len())?;
        Ok(())
    }
}

/// TernGrad's device form: its scaler, shared through one max round when
/// the workers share one.
#[derive(Debug)]
struct TernGradForm {
    tern: DeviceTernGrad,
    /// The agreed scaler of the last round.
    shared: Option<f32>,
}

/// The registry's line for `terngrad`.
pub(crate) fn form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Terngrad(c) = config else { return None };
    Some(Box::new(TernGradForm { tern: DeviceTernGrad::new(c.clone()), shared: None }))
}

impl DeviceForm for TernGradForm {
    fn round_contribution(
        &mut self,
        client: &Client,
        round: usize,
        g: &DeviceF32,
        _: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, KernelError> {
        if !(self.tern.config.share_scaler && round == 0) {
            return Ok(None);
        }
        self.shared = None;
        out.push(self.tern.scaler(client, g)?);
        Ok(Some(ReduceOp::Max))
    }

    fn round_result(&mut self, _round: usize, combined: &[f32], _workers: usize) {
        self.shared = combined.first().copied();
    }

    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        self.tern.compress(client, g, self.shared.take(), &ctx.key, out)
    }
}
