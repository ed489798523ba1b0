//! QSGD on the device (Alistarh et al., 2017; ALGORITHMS.md §5): one pass for
//! the per-block norms (a cube per block, folded in shared memory), one
//! that draws, rounds and writes two signed 16-bit levels per word.
//!
//! The level rule is the CPU's: `r = |v|·s/n`, level `⌊r⌋ + [u < r − ⌊r⌋]`
//! with `u` on the 2⁻²⁴ grid, capped at `s`, signed by `v`'s sign bit; a
//! block whose norm is 0 or not finite sends zeros. The norms differ from
//! the CPU's in rounding only (f32 tree sums against f32 lanes folded in
//! f64), and the draws come from the counter hash, so the messages agree in
//! distribution.

use cubecl::prelude::*;
use gradcomp_compress::quantize::qsgd::{QsgdConfig, MAX_LEVELS};
use gradcomp_compress::{Message, RngKey};

use crate::buffer::{f32_arg, read_f32s, read_prefix, u32_arg, DeviceF32, KernelError};
use crate::form::DeviceForm;
use crate::hash::{draw, stream_words};
use crate::reduce::{fold_shared, pow2_scale, strided_abs_max};
use crate::{block_grid, grid};
use gradcomp_compress::{CompressorConfig, UnitContext};

/// `norms[b] = ‖x[b·block .. (b+1)·block]‖₂`, or 0 when that is not finite.
#[cube(launch)]
fn block_norms(x: &[f32], norms: &mut [f32], block: u32) {
    let n = x.len();
    let u = UNIT_POS as usize;
    let mut sh = Shared::<[f32]>::new_slice(256usize);
    let mut b = CUBE_POS;
    while b < norms.len() {
        let start = b * block as usize;
        let mut end = start + block as usize;
        if end > n {
            end = n;
        }
        // max |v| first: squares of v·scale (scale = pow2_scale(max), as
        // the CPU's moments) neither overflow nor underflow f32.
        sh[u] = strided_abs_max(x, start, end, u);
        sync_cube();
        fold_shared(&mut sh, u, true);
        let scale = pow2_scale(sh[0]);
        sync_cube();
        let mut q = 0.0f32;
        let mut i = start + u;
        while i < end {
            let v = x[i] * scale;
            q += v * v;
            i += CUBE_DIM as usize;
        }
        sh[u] = q;
        sync_cube();
        fold_shared(&mut sh, u, false);
        if u == 0 {
            let norm = f32::sqrt(sh[0]) / scale;
            // Finite iff the exponent bits are not all ones.
            if (u32::reinterpret(norm) & 0x7f80_0000u32) == 0x7f80_0000u32 {
                norms[b] = 0.0f32;
            } else {
                norms[b] = norm;
            }
        }
        // Every unit must be done reading `sh` before the next block writes it.
        sync_cube();
        b += CUBE_COUNT;
    }
}

/// The signed level of element `i`, as the low 16 bits of a u32 (i16 two's
/// complement).
#[cube]
fn level_bits(v: f32, scale: f32, max_level: u32, i: u32, k0: u32, k1: u32) -> u32 {
    let bits = u32::reinterpret(v);
    let r = f32::reinterpret(bits & 0x7fff_ffffu32) * scale;
    let floor = f32::floor(r);
    let d = f32::cast_from(draw(i, k0, k1) >> 8u32) * (1.0f32 / 16_777_216.0f32);
    let mut level = u32::cast_from(floor);
    if d < r - floor {
        level += 1u32;
    }
    if level > max_level {
        level = max_level;
    }
    let mut out = level;
    if (bits >> 31u32) == 1u32 {
        out = (0u32 - level) & 0xffffu32;
    }
    out
}

/// Word `w` holds the levels of elements `2w` (low half) and `2w+1`.
#[cube(launch)]
fn quantize(x: &[f32], norms: &[f32], words: &mut [u32], block: u32, levels: u32, k0: u32, k1: u32) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut w = ABSOLUTE_POS;
    while w < words.len() {
        let mut word = 0u32;
        #[unroll]
        for j in 0..2u32 {
            let i = w * 2 + j as usize;
            if i < n {
                let norm = norms[i / block as usize];
                if norm > 0.0f32 {
                    // levels/norm as (·2^64)/(norm·2^64) for a tiny norm, so
                    // it stays finite: the CPU's `ratio_factors`.
                    let mut pre = 1.0f32;
                    if norm < 1.0f32 / 18_446_744_073_709_551_616.0f32 {
                        pre = 18_446_744_073_709_551_616.0f32;
                    }
                    let scale = f32::cast_from(levels) / (norm * pre);
                    word |= level_bits(x[i] * pre, scale, levels, i as u32, k0, k1) << (16u32 * j);
                }
            }
        }
        words[w] = word;
        w += stride;
    }
}

/// QSGD with the CPU compressor's options.
#[derive(Clone, Debug, Default)]
pub struct DeviceQsgd {
    pub config: QsgdConfig,
}

impl DeviceQsgd {
    pub fn new(config: QsgdConfig) -> Self {
        Self { config }
    }

    /// [`Message::Qsgd`] for `g`, drawing from `key`'s stream.
    pub fn compress(
        &self,
        client: &Client,
        g: &DeviceF32,
        key: &RngKey,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        // The CPU's clamps: levels in 1..=MAX_LEVELS, blocks of at least 1.
        let levels = self.config.levels.clamp(1, MAX_LEVELS);
        let block = self.config.block.clamp(1, u32::MAX as usize);
        let m = out.qsgd_mut();
        m.levels = levels;
        m.block = block as u32;
        m.norms.clear();
        m.codes.clear();
        if g.len == 0 {
            return Ok(());
        }
        let n_buckets = g.len.div_ceil(block);
        let norms = client.empty(n_buckets * 4);
        let (cubes, dim) = block_grid(n_buckets);
        block_norms::launch(client, cubes, dim, g.arg(), f32_arg(&norms, n_buckets), block as u32);
        let n_words = g.len.div_ceil(2);
        let words = client.empty(n_words * 4);
        let (k0, k1) = stream_words(key);
        let (cubes, dim) = grid(n_words, 1);
        quantize::launch(
            client,
            cubes,
            dim,
            g.arg(),
            f32_arg(&norms, n_buckets),
            u32_arg(&words, n_words),
            block as u32,
            levels,
            k0,
            k1,
        );
        m.norms = read_f32s(client, &norms, n_buckets)?;
        let bytes = read_prefix(client, &words, g.len * 2)?;
        m.codes.extend(bytes.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])));
        Ok(())
    }
}

/// The registry's line for `qsgd`.
pub(crate) fn form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Qsgd(c) = config else { return None };
    Some(Box::new(DeviceQsgd::new(c.clone())))
}

impl DeviceForm for DeviceQsgd {
    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        DeviceQsgd::compress(self, client, g, &ctx.key, out)
    }
}
