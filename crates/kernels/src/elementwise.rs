//! Element-wise device operations the exchange needs around the compressors.

use cubecl::prelude::*;

use crate::buffer::{DeviceF32, KernelError};
use crate::grid;

#[cube(launch)]
fn scale_into(out: &mut [f32], x: &[f32], s: f32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < out.len() {
        out[i] = s * x[i];
        i += stride;
    }
}

/// `s·x` in a new buffer (DGC's local clipping scales a gradient that burn
/// may still hold, so it is never scaled in place). The product is one f32
/// rounding, as the CPU's `g *= s`.
pub fn scaled(client: &Client, x: &DeviceF32, s: f32) -> Result<DeviceF32, KernelError> {
    let out = DeviceF32::from_handle(client.empty(x.len.max(1) * 4), x.len);
    if x.len > 0 {
        let (cubes, dim) = grid(x.len, 1);
        scale_into::launch(client, cubes, dim, out.arg(), x.arg(), s);
    }
    Ok(out)
}
