//! Natural compression on the device (ALGORITHMS.md §9.4): each element's
//! byte code in one pass, four to a word. The rounding rule is the CPU's
//! (`quantize::natural`): up with probability mantissa/2^23, the range below
//! 2^−108 rounded to 0 or 2^−108, saturation at 2^18; the draws come from
//! the counter hash, so device and CPU messages agree in distribution.

use cubecl::prelude::*;
use gradcomp_compress::{Message, RngKey};

use crate::buffer::{read_prefix, u32_arg, DeviceF32, KernelError};
use crate::form::{stateless, DeviceForm};
use crate::grid;
use crate::hash::{draw, stream_words};
use gradcomp_compress::quantize::NaturalConfig;
use gradcomp_compress::CompressorConfig;

/// The code of `x` for the uniform word `d`: its low 23 bits decide the
/// rounding, its high 24 bits the range below 2^−108.
#[cube]
fn natural_code(x: f32, d: u32) -> u32 {
    let bits = u32::reinterpret(x);
    let abits = bits & 0x7fff_ffffu32;
    let mut k = 0u32;
    if abits == 0u32 || abits > 0x7f80_0000u32 {
        // Zero and NaN.
        k = 0u32;
    } else if abits >= 0x4880_0000u32 {
        // |x| ≥ 2^18 saturates.
        k = 127u32;
    } else if abits < 0x0980_0000u32 {
        // |x| < 2^−108: 2^−108 with probability |x|·2^108.
        let p = f32::reinterpret(abits) * f32::reinterpret(0x7580_0000u32);
        let u = f32::cast_from(d >> 8u32) * (1.0f32 / 16_777_216.0f32);
        if u < p {
            k = 1u32;
        }
    } else {
        // 2^e ≤ |x| < 2^(e+1): code e + 109, plus one w.p. mantissa/2^23.
        k = (abits >> 23u32) - 18u32;
        if (d & 0x7f_ffffu32) < (abits & 0x7f_ffffu32) {
            k += 1u32;
        }
    }
    let mut code = 0u32;
    if k > 0u32 {
        code = ((bits >> 31u32) << 7u32) | k;
    }
    code
}

/// Word `w` holds the codes of elements `4w..4w+4`, element `i` in byte `i mod 4`.
#[cube(launch)]
fn pack_natural(x: &[f32], words: &mut [u32], k0: u32, k1: u32) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut w = ABSOLUTE_POS;
    while w < words.len() {
        let mut word = 0u32;
        #[unroll]
        for j in 0..4u32 {
            let i = w * 4 + j as usize;
            if i < n {
                word |= natural_code(x[i], draw(i as u32, k0, k1)) << (8u32 * j);
            }
        }
        words[w] = word;
        w += stride;
    }
}

/// [`Message::Natural`] for `g`, drawing from `key`'s stream.
pub fn compress(client: &Client, g: &DeviceF32, key: &RngKey, out: &mut Message) -> Result<(), KernelError> {
    let m = out.natural_mut();
    m.codes.clear();
    if g.len == 0 {
        return Ok(());
    }
    let n_words = g.len.div_ceil(4);
    let words = client.empty(n_words * 4);
    let (k0, k1) = stream_words(key);
    let (cubes, dim) = grid(n_words, 1);
    pack_natural::launch(client, cubes, dim, g.arg(), u32_arg(&words, n_words), k0, k1);
    m.codes = read_prefix(client, &words, g.len)?;
    Ok(())
}

/// The registry's line for `natural`.
pub(crate) fn form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Natural(c) = config else { return None };
    stateless(c, |client, g, _: &NaturalConfig, ctx, out| compress(client, g, &ctx.key, out))
}
