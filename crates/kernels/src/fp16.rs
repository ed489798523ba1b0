//! fp16 on the device: IEEE binary16 with round to nearest even, out-of-range
//! values to ±inf and NaN kept NaN, bit for bit what the `half` crate (and so
//! the CPU compressor) produces. Integer arithmetic only, so it runs where
//! the device has no f16 type (WebGPU without `shader-f16`, lavapipe).

use cubecl::prelude::*;
use gradcomp_compress::Message;

use crate::buffer::{read_prefix, u32_arg, DeviceF32, KernelError};
use crate::form::{stateless, DeviceForm};
use crate::grid;
use gradcomp_compress::quantize::Fp16Config;
use gradcomp_compress::CompressorConfig;

/// The binary16 bits of `v` in the low 16 bits.
#[cube]
pub(crate) fn f16_bits(v: f32) -> u32 {
    let x = u32::reinterpret(v);
    let sign = (x & 0x8000_0000u32) >> 16u32;
    let exp = x & 0x7f80_0000u32;
    let man = x & 0x007f_ffffu32;
    let mut out = sign;
    if exp == 0x7f80_0000u32 {
        // inf stays inf; NaN stays a quiet NaN with its top payload bits.
        let mut nan_bit = 0u32;
        if man != 0u32 {
            nan_bit = 0x0200u32;
        }
        out = sign | 0x7c00u32 | nan_bit | (man >> 13u32);
    } else {
        let half_exp = (exp >> 23u32) as i32 - 127i32 + 15i32;
        if half_exp >= 31i32 {
            out = sign | 0x7c00u32;
        } else if half_exp <= 0i32 {
            // Subnormal (or zero) in f16.
            if 14i32 - half_exp <= 24i32 {
                let m = man | 0x0080_0000u32;
                let shift = (14i32 - half_exp) as u32;
                let mut half_man = m >> shift;
                let round_bit = 1u32 << (shift - 1u32);
                if (m & round_bit) != 0u32 && (m & (3u32 * round_bit - 1u32)) != 0u32 {
                    half_man += 1u32;
                }
                out = sign | half_man;
            }
        } else {
            let base = sign | ((half_exp as u32) << 10u32) | (man >> 13u32);
            let round_bit = 0x1000u32;
            if (man & round_bit) != 0u32 && (man & (3u32 * round_bit - 1u32)) != 0u32 {
                out = base + 1u32;
            } else {
                out = base;
            }
        }
    }
    out
}

#[cube(launch)]
fn pack_halves(x: &[f32], words: &mut [u32]) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut w = ABSOLUTE_POS;
    while w < words.len() {
        let i = w * 2;
        let lo = f16_bits(x[i]);
        let mut hi = 0u32;
        if i + 1 < n {
            hi = f16_bits(x[i + 1]);
        }
        words[w] = lo | (hi << 16u32);
        w += stride;
    }
}

/// The fp16 compressor's message for `g`: [`Message::Half`].
pub fn compress(client: &Client, g: &DeviceF32, out: &mut Message) -> Result<(), KernelError> {
    let m = out.half_mut();
    m.values.clear();
    if g.len == 0 {
        return Ok(());
    }
    let n_words = g.len.div_ceil(2);
    let words = client.empty(n_words * 4);
    let (cubes, dim) = grid(n_words, 1);
    pack_halves::launch(client, cubes, dim, g.arg(), u32_arg(&words, n_words));
    let bytes = read_prefix(client, &words, g.len * 2)?;
    m.values.extend(bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])));
    Ok(())
}

/// The registry's line for `fp16`.
pub(crate) fn form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Fp16(c) = config else { return None };
    stateless(c, |client, g, _: &Fp16Config, _, out| compress(client, g, out))
}
