//! Blockwise quantization on the device, 8-bit (ALGORITHMS.md §9.5) and fp4
//! with nearest rounding (§9.7): a cube per block finds its largest
//! magnitude, the host turns each into the CPU's scale factors
//! (`ratio_factors`, finite for a subnormal maximum), and one pass rounds
//! every element to its nearest table value by binary search over the
//! table's midpoints, mapped to its code, one code a byte, four to a word.
//! Every operation is the CPU's (`BlockCodebook::nearest`), so the messages
//! are identical bit for bit.

use cubecl::prelude::*;
use gradcomp_compress::codebook::BlockCodebook;
use gradcomp_compress::quantize::ratio_factors;
use gradcomp_compress::Message;

use crate::buffer::{f32_arg, read_f32s, read_prefix, u32_arg, DeviceF32, KernelError};
use crate::form::{stateless, DeviceForm};
use crate::reduce::{fold_shared, strided_abs_max};
use crate::{block_grid, grid};
use gradcomp_compress::quantize::{EightBitConfig, Fp4Config, Rounding};
use gradcomp_compress::CompressorConfig;

/// `maxes[b]` = the largest |x| of block `b` (NaN ignored, as `f32::max`).
#[cube(launch)]
fn block_max(x: &[f32], maxes: &mut [f32], block: u32) {
    let n = x.len();
    let u = UNIT_POS as usize;
    let mut sh = Shared::<[f32]>::new_slice(256usize);
    let mut b = CUBE_POS;
    while b < maxes.len() {
        let start = b * block as usize;
        let mut end = start + block as usize;
        if end > n {
            end = n;
        }
        sh[u] = strided_abs_max(x, start, end, u);
        sync_cube();
        fold_shared(&mut sh, u, true);
        if u == 0 {
            maxes[b] = sh[0];
        }
        sync_cube();
        b += CUBE_COUNT;
    }
}

/// The number of `midpoints` below `v`, by binary search (the CPU's
/// `partition_point`).
#[cube]
fn nearest(midpoints: &[f32], v: f32) -> u32 {
    let mut first = 0u32;
    let mut count = midpoints.len() as u32;
    while count > 0u32 {
        let step = count / 2u32;
        let it = first + step;
        if midpoints[it as usize] < v {
            first = it + 1u32;
            count -= step + 1u32;
        } else {
            count = step;
        }
    }
    first
}

/// Word `w` holds the codes of elements `4w..4w+4`, element `i` in byte `i mod 4`.
/// `codes[i]` is the code of the i-th ascending table value.
#[cube(launch)]
fn pack_codes(
    x: &[f32],
    pre: &[f32],
    inv: &[f32],
    midpoints: &[f32],
    codes: &[u32],
    words: &mut [u32],
    block: u32,
) {
    let n = x.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut w = ABSOLUTE_POS;
    while w < words.len() {
        let mut word = 0u32;
        #[unroll]
        for j in 0..4u32 {
            let i = w * 4 + j as usize;
            if i < n {
                let b = i / block as usize;
                let v = f32::clamp((x[i] * pre[b]) * inv[b], -1.0f32, 1.0f32);
                word |= codes[nearest(midpoints, v) as usize] << (8u32 * j);
            }
        }
        words[w] = word;
        w += stride;
    }
}

/// [`Message::Blockwise`] for `g` in blocks of `block` with `codebook`,
/// rounded to nearest: the CPU's message for the same options.
pub fn compress(
    client: &Client,
    g: &DeviceF32,
    codebook: BlockCodebook,
    block: usize,
    out: &mut Message,
) -> Result<(), KernelError> {
    let block = block.clamp(1, u32::MAX as usize);
    let m = out.blockwise_mut();
    m.codebook = codebook;
    m.block = block as u32;
    m.absmax.clear();
    m.codes.clear();
    if g.len == 0 {
        return Ok(());
    }
    let n_blocks = g.len.div_ceil(block);
    let maxes = client.empty(n_blocks * 4);
    let (cubes, dim) = block_grid(n_blocks);
    block_max::launch(client, cubes, dim, g.arg(), f32_arg(&maxes, n_blocks), block as u32);
    m.absmax = read_f32s(client, &maxes, n_blocks)?;
    let (pre, inv): (Vec<f32>, Vec<f32>) =
        m.absmax.iter().map(|&a| if a > 0.0 { ratio_factors(1.0, a) } else { (1.0, 0.0) }).unzip();
    let (pre, inv) = (DeviceF32::upload(client, &pre), DeviceF32::upload(client, &inv));
    let (midpoints, codes) = codebook.search();
    let codes: Vec<u32> = match codes {
        Some(c) => c.iter().map(|&c| u32::from(c)).collect(),
        None => (0..=midpoints.len() as u32).collect(),
    };
    let n_codes = codes.len();
    let codes = client.create_from_slice(u32::as_bytes(&codes));
    let midpoints = DeviceF32::upload(client, midpoints);
    let n_words = g.len.div_ceil(4);
    let words = client.empty(n_words * 4);
    let (cubes, dim) = grid(n_words, 1);
    pack_codes::launch(
        client,
        cubes,
        dim,
        g.arg(),
        pre.arg(),
        inv.arg(),
        midpoints.arg(),
        u32_arg(&codes, n_codes),
        u32_arg(&words, n_words),
        block as u32,
    );
    m.codes = read_prefix(client, &words, g.len)?;
    Ok(())
}

/// The registry's line for `eightbit`: Dettmers' dynamic codebook.
pub(crate) fn eightbit_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Eightbit(c) = config else { return None };
    stateless(c, |client, g, c: &EightBitConfig, _, out| {
        compress(client, g, BlockCodebook::Dynamic, c.block, out)
    })
}

/// The registry's line for `fp4`, rounded to nearest: stochastic rounding
/// draws from the CPU's sequential stream, which a kernel cannot follow.
pub(crate) fn fp4_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Fp4(c) = config else { return None };
    if c.rounding != Rounding::Nearest {
        return None;
    }
    stateless(c, |client, g, c: &Fp4Config, _, out| compress(client, g, c.codebook(), c.block, out))
}
