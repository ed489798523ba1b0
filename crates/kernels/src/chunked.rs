//! SparseLoCo's selection on the device (ALGORITHMS.md §9.8): a cube per
//! tile finds the key (magnitude bits) of the tile's k-th largest |x| by a
//! bitwise search (31 counting passes over the tile, each folded across the
//! cube), then every unit writes its contiguous share of the tile's kept
//! positions and values in ascending position, the ties at the threshold
//! going to the lowest positions. Keys order like the CPU's (`f32` bits with
//! the sign cleared, a NaN above infinity), so the kept set is the CPU's.
//! The kept values (a few percent of the unit) come back to the host, which
//! codes them with the CPU's own quantizer: the message is the CPU's bit for
//! bit. The DCT of `dct-topk` has no kernel: that method runs on the host.

use cubecl::prelude::*;
use gradcomp_compress::chunked::compressor::{finish_values, start_message, tiles_for, ChunkedOptions};
use gradcomp_compress::Message;

use crate::block_grid;
use crate::buffer::{f32_arg, read_f32s, read_u32s, u32_arg, DeviceF32, KernelError};
use crate::form::DeviceForm;
use crate::reduce::fold_shared;
use gradcomp_compress::{CompressorConfig, UnitContext};

/// Tile `t`'s first row, first column, height and width (the CPU's
/// `Tiles::tile`), `across` tiles to a row of them.
#[cube]
fn tile_of(
    t: u32,
    rows: u32,
    cols: u32,
    tile_rows: u32,
    tile_cols: u32,
    across: u32,
) -> (u32, u32, u32, u32) {
    let r0 = (t / across) * tile_rows;
    let c0 = (t % across) * tile_cols;
    (r0, c0, u32::min(tile_rows, rows - r0), u32::min(tile_cols, cols - c0))
}

/// The key of position `p` of the tile at (`r0`, `c0`), `w` wide.
#[cube]
fn key_at(x: &[f32], cols: u32, r0: u32, c0: u32, w: u32, p: u32) -> u32 {
    u32::reinterpret(x[((r0 + p / w) * cols + c0 + p % w) as usize]) & 0x7fff_ffffu32
}

/// The largest key with at least `kt` keys of the tile at or above it (the
/// kt-th largest), each unit counting positions `start..end` and the cube
/// folding the counts in `sh`, one bit at a time from the top.
#[cube]
fn kth_key(
    x: &[f32],
    at: (u32, u32, u32, u32),
    start: u32,
    end: u32,
    kt: u32,
    sh: &mut Shared<[f32]>,
    u: usize,
) -> u32 {
    let (cols, r0, c0, w) = at;
    let mut thr = 0u32;
    for b in 0..31u32 {
        let cand = thr | (1u32 << (30u32 - b));
        let mut c = 0u32;
        for p in start..end {
            if key_at(x, cols, r0, c0, w, p) >= cand {
                c += 1u32;
            }
        }
        sh[u] = f32::cast_from(c);
        sync_cube();
        fold_shared(sh, u, false);
        if u32::cast_from(sh[0]) >= kt {
            thr = cand;
        }
        sync_cube();
    }
    thr
}

/// Per tile `t` (tiles `rows × cols` of `tile_rows × tile_cols`): its
/// `min(k, size)` largest entries at `offsets[t]..` of `positions`/`values`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn tile_top_k(
    x: &[f32],
    offsets: &[u32],
    positions: &mut [u32],
    values: &mut [f32],
    rows: u32,
    cols: u32,
    tile_rows: u32,
    tile_cols: u32,
    across: u32,
    k: u32,
) {
    let u = UNIT_POS as usize;
    let units = CUBE_DIM;
    let mut sh = Shared::<[f32]>::new_slice(256usize);
    let mut gt = Shared::<[f32]>::new_slice(256usize);
    let mut eq = Shared::<[f32]>::new_slice(256usize);
    let tiles = offsets.len() as u32;
    let mut t = CUBE_POS as u32;
    while t < tiles {
        let (r0, c0, h, w) = tile_of(t, rows, cols, tile_rows, tile_cols, across);
        let size = h * w;
        let kt = u32::min(k, size);
        let mut seg = size / units;
        if size % units != 0u32 {
            seg += 1u32;
        }
        let start = u32::min(u as u32 * seg, size);
        let end = u32::min(start + seg, size);
        let thr = kth_key(x, (cols, r0, c0, w), start, end, kt, &mut sh, u);
        let mut g = 0u32;
        let mut e = 0u32;
        for p in start..end {
            let key = key_at(x, cols, r0, c0, w, p);
            if key > thr {
                g += 1u32;
            } else if key == thr {
                e += 1u32;
            }
        }
        gt[u] = f32::cast_from(g);
        eq[u] = f32::cast_from(e);
        sync_cube();
        // Counts before this unit's share, and in all (exact in f32 below 2^24).
        let mut g_before = 0u32;
        let mut e_before = 0u32;
        let mut g_all = 0u32;
        for j in 0..256usize {
            let gj = u32::cast_from(gt[j]);
            g_all += gj;
            if j < u {
                g_before += gj;
                e_before += u32::cast_from(eq[j]);
            }
        }
        let ties = kt - g_all;
        let mut take_ties = 0u32;
        if ties > e_before {
            take_ties = u32::min(ties - e_before, e);
        }
        let mut slot = offsets[t as usize] + g_before + u32::min(e_before, ties);
        for p in start..end {
            let v = x[((r0 + p / w) * cols + c0 + p % w) as usize];
            let key = u32::reinterpret(v) & 0x7fff_ffffu32;
            let mut keep = key > thr;
            if key == thr && take_ties > 0u32 {
                take_ties -= 1u32;
                keep = true;
            }
            if keep {
                positions[slot as usize] = p;
                values[slot as usize] = v;
                slot += 1u32;
            }
        }
        sync_cube();
        t += CUBE_COUNT as u32;
    }
}

/// [`Message::Chunked`] of `g` (a unit of `shape`) under `opts` (no DCT):
/// the CPU's `ChunkedTopK` message, bit for bit.
pub fn compress(
    client: &Client,
    g: &DeviceF32,
    shape: &[usize],
    opts: &ChunkedOptions,
    out: &mut Message,
) -> Result<(), KernelError> {
    debug_assert!(!opts.dct, "the DCT runs on the host");
    let tiles = tiles_for(shape, g.len, opts);
    let (m, k) = start_message(out, tiles, opts);
    let n = tiles.entries(k);
    if n == 0 {
        return Ok(());
    }
    let mut offsets = Vec::with_capacity(tiles.count());
    let mut at = 0u32;
    for t in 0..tiles.count() {
        offsets.push(at);
        at += tiles.k_of(t, k) as u32;
    }
    let offsets_h = client.create_from_slice(u32::as_bytes(&offsets));
    let (positions, values) = (client.empty(n * 4), client.empty(n * 4));
    let (cubes, dim) = block_grid(tiles.count());
    let dims = [tiles.rows, tiles.cols, tiles.tile_rows, tiles.tile_cols].map(|d| d as u32);
    tile_top_k::launch(
        client,
        cubes,
        dim,
        g.arg(),
        u32_arg(&offsets_h, offsets.len()),
        u32_arg(&positions, n),
        f32_arg(&values, n),
        dims[0],
        dims[1],
        dims[2],
        dims[3],
        tiles.grid().1 as u32,
        k as u32,
    );
    m.positions = read_u32s(client, &positions, n)?.into_iter().map(|p| p as u16).collect();
    let picked = read_f32s(client, &values, n)?;
    finish_values(m, opts.values, &picked);
    Ok(())
}

/// SparseLoCo's device form: its tiles and options for the unit's shape.
#[derive(Debug)]
struct SparseLocoForm {
    shape: Vec<usize>,
    options: ChunkedOptions,
}

/// The registry's line for `sparseloco`.
pub(crate) fn sparseloco_form(config: &CompressorConfig, shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Sparseloco(c) = config else { return None };
    Some(Box::new(SparseLocoForm { shape: shape.to_vec(), options: c.options() }))
}

impl DeviceForm for SparseLocoForm {
    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        _: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        compress(client, g, &self.shape, &self.options, out)
    }
}
