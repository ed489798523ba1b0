//! Decoding and summing N workers' ternary codes on the device.
//!
//! With a shared scaler the sum is taken in integers and scaled once, exactly
//! as the CPU's `TernarySum` then `add_to` do, so the result is bit-identical
//! to the CPU path whatever the order of workers.

use cubecl::prelude::*;
use gradcomp_compress::message::TernaryMessage;

use crate::buffer::{u32_arg, DeviceF32, KernelError};
use crate::grid;

/// `out[i] += coef · Σ_r code_r(i)` over `workers` packed code vectors laid
/// end to end, `words_per` words each.
#[cube(launch)]
fn add_ternary_sum(words: &[u32], out: &mut [f32], workers: u32, words_per: u32, coef: f32) {
    let n = out.len();
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < n {
        let w = i / 16;
        let shift = 2u32 * (i % 16) as u32;
        let mut sum = 0i32;
        for r in 0..workers {
            let c = (words[r as usize * words_per as usize + w] >> shift) & 3u32;
            // 0b01 = +1, 0b10 = −1 (0b11 is rejected by the decoder upstream).
            sum += (c & 1u32) as i32 - (c >> 1u32) as i32;
        }
        out[i] += coef * f32::cast_from(sum);
        i += stride;
    }
}

/// N workers' packed codes in device memory, ready to sum.
pub struct TernaryCodes {
    words: cubecl::server::Handle,
    workers: usize,
    len: usize,
    scale: f32,
}

impl TernaryCodes {
    /// Uploads the codes of N messages that share one scaler (the CPU's
    /// `TernarySum` refuses any other mix, and so does this).
    pub fn upload(client: &Client, messages: &[&TernaryMessage]) -> Result<Self, KernelError> {
        let Some(first) = messages.first() else {
            return Err(KernelError::Input("no ternary messages to sum".into()));
        };
        if messages.iter().any(|m| m.len != first.len || m.scale != first.scale) {
            return Err(KernelError::Input(format!(
                "ternary messages must share one length ({}) and one scaler ({})",
                first.len, first.scale
            )));
        }
        let words_per = first.len.div_ceil(16);
        let mut all = vec![0u8; (words_per * 4 * messages.len()).max(4)];
        for (dst, m) in all.chunks_exact_mut(words_per * 4).zip(messages) {
            dst[..m.packed.len()].copy_from_slice(&m.packed);
        }
        Ok(Self {
            words: client.create_from_slice(&all),
            workers: messages.len(),
            len: first.len,
            scale: first.scale,
        })
    }

    /// `out += weight · scale · (1/N) Σ codes`: the CPU's `TernarySum`
    /// followed by `Message::add_to(weight)`, bit for bit.
    pub fn add_to(&self, client: &Client, weight: f32, out: &DeviceF32) -> Result<(), KernelError> {
        if out.len != self.len {
            return Err(KernelError::Input(format!(
                "codes of {} elements cannot add into {}",
                self.len, out.len
            )));
        }
        if self.len == 0 {
            return Ok(());
        }
        let words_per = self.len.div_ceil(16);
        let coef = weight * self.scale / self.workers as f32;
        let (cubes, dim) = grid(self.len, 1);
        add_ternary_sum::launch(
            client,
            cubes,
            dim,
            u32_arg(&self.words, words_per * self.workers),
            out.arg(),
            self.workers as u32,
            words_per as u32,
            coef,
        );
        Ok(())
    }
}

/// Uploads and adds in one call: `out += weight · scale · (1/N) Σ codes`.
pub fn add_shared_scale(
    client: &Client,
    messages: &[&TernaryMessage],
    weight: f32,
    out: &DeviceF32,
) -> Result<(), KernelError> {
    if messages.is_empty() {
        return Ok(());
    }
    TernaryCodes::upload(client, messages)?.add_to(client, weight, out)
}
