//! Compensation memories in device memory: error feedback (ALGORITHMS.md
//! §3.2, `acc = e + s·g` before compression, `e = acc − decompress(sent)`
//! after) and DGC's momentum correction (§3.4). The same arithmetic as the
//! CPU's `ErrorFeedback` and `DgcMomentum`, element for element, so a device
//! worker's state stays bit-identical to a CPU worker's where the backend
//! does not contract `a·b + c` into one rounding (CUDA may; see
//! ARCHITECTURE.md).

use cubecl::prelude::*;
use gradcomp_compress::memory::ResidualForm;
use gradcomp_compress::Message;

use crate::aggregate::TernaryCodes;
use crate::buffer::{f32_arg, u32_arg, DeviceF32, KernelError};
use crate::grid;

#[cube(launch)]
fn add_scaled(acc: &mut [f32], g: &[f32], scale: f32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < acc.len() {
        acc[i] += scale * g[i];
        i += stride;
    }
}

/// `acc = acc·decay + scale·g`, the decayed product rounded first (the CPU's
/// two roundings).
#[cube(launch)]
fn decay_add_scaled(acc: &mut [f32], g: &[f32], decay: f32, scale: f32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < acc.len() {
        let kept = acc[i] * decay;
        acc[i] = kept + scale * g[i];
        i += stride;
    }
}

/// `acc[i] −= v` for each sent pair, and `mask[i] = 0` when `clear_mask`.
#[cube(launch)]
fn subtract_at(
    acc: &mut [f32],
    mask: &mut [f32],
    indices: &[u32],
    values: &[f32],
    #[comptime] clear_mask: bool,
) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut j = ABSOLUTE_POS;
    while j < indices.len() {
        let i = indices[j] as usize;
        acc[i] -= values[j];
        if clear_mask {
            mask[i] = 0.0f32;
        }
        j += stride;
    }
}

/// DGC's velocity step: `u = m·u + g; v += u`.
#[cube(launch)]
fn accumulate_velocity(u: &mut [f32], v: &mut [f32], g: &[f32], momentum: f32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < u.len() {
        let ui = momentum * u[i] + g[i];
        u[i] = ui;
        v[i] += ui;
        i += stride;
    }
}

fn before_compensate() -> KernelError {
    KernelError::Input("update before compensate: the residual has no length yet".into())
}

/// The CPU's `remove_sent` on device buffers: `buf −= decompress(sent)`, and
/// for a sparse message `mask = 0` where sent (a quantizer sends everything,
/// so it zeroes all of `mask`).
fn remove_sent(
    client: &Client,
    buf: &mut DeviceF32,
    mask: Option<&mut DeviceF32>,
    sent: &Message,
) -> Result<(), KernelError> {
    match sent {
        Message::Sparse(m) if m.indices.is_empty() => Ok(()),
        Message::Sparse(m) => {
            if m.indices.iter().any(|&i| i as usize >= buf.len) {
                return Err(KernelError::Input(format!(
                    "a sent index is past the unit's {} elements",
                    buf.len
                )));
            }
            let idx = client.create_from_slice(u32::as_bytes(&m.indices));
            let val = DeviceF32::upload(client, &m.values);
            let clear = mask.is_some();
            // Without a mask the kernel never touches its binding; one float
            // stands in (binding `buf` twice would alias two writable bindings).
            let mask_arg = match &mask {
                Some(m) => m.arg(),
                None => f32_arg(&client.empty(4), 1),
            };
            let (cubes, dim) = grid(m.indices.len(), 1);
            subtract_at::launch(
                client,
                cubes,
                dim,
                buf.arg(),
                mask_arg,
                u32_arg(&idx, m.indices.len()),
                val.arg(),
                clear,
            );
            Ok(())
        }
        other => {
            match other {
                Message::Ternary(t) => TernaryCodes::upload(client, &[t])?.add_to(client, -1.0, buf)?,
                Message::LowRank(m) => crate::lowrank::add_low_rank(client, m, -1.0, buf)?,
                _ => {
                    let mut host = buf.read(client)?;
                    other.add_to(-1.0, &mut host);
                    *buf = DeviceF32::upload(client, &host);
                }
            }
            if let Some(mask) = mask {
                *mask = DeviceF32::zeros(client, mask.len);
            }
            Ok(())
        }
    }
}

/// The residual `e` of one compression unit, on the device.
pub struct DeviceErrorFeedback {
    form: ResidualForm,
    /// β of `e ← β·e + s·g` (the CPU's `ErrorFeedback::decay`).
    decay: f32,
    residual: Option<DeviceF32>,
}

impl DeviceErrorFeedback {
    pub fn new(form: ResidualForm) -> Self {
        Self::with_decay(form, 1.0)
    }

    pub fn with_decay(form: ResidualForm, decay: f32) -> Self {
        Self { form, decay, residual: None }
    }

    /// `e = β·e + s·g` (`s` = 1, or the learning rate for the lr-scaled form);
    /// returns `e`, the vector to compress. The residual starts at zero and is
    /// reset when the unit's length changes.
    pub fn compensate(&mut self, client: &Client, g: &DeviceF32, lr: f32) -> &DeviceF32 {
        if self.residual.as_ref().is_none_or(|e| e.len != g.len) {
            self.residual = Some(DeviceF32::zeros(client, g.len));
        }
        let e = self.residual.as_ref().expect("set just above");
        let scale = match self.form {
            ResidualForm::Raw => 1.0,
            ResidualForm::LrScaled => lr,
        };
        if g.len > 0 {
            let (cubes, dim) = grid(g.len, 1);
            if self.decay == 1.0 {
                add_scaled::launch(client, cubes, dim, e.arg(), g.arg(), scale);
            } else {
                decay_add_scaled::launch(client, cubes, dim, e.arg(), g.arg(), self.decay, scale);
            }
        }
        e
    }

    /// `e −= decompress(sent)`: a scatter of the k sent pairs for a sparse
    /// message, the ternary decoder for TernGrad's. Other messages take the
    /// CPU's decoder over a host copy of the residual (correct, not fast).
    pub fn update(&mut self, client: &Client, sent: &Message) -> Result<(), KernelError> {
        let Some(e) = self.residual.as_mut() else {
            return Err(before_compensate());
        };
        remove_sent(client, e, None, sent)
    }

    /// The residual, if any step has run.
    pub fn residual(&self) -> Option<&DeviceF32> {
        self.residual.as_ref()
    }

    /// Sets the residual to `e` (a checkpoint's, or a host memory's); empty
    /// means no step has run.
    pub fn restore(&mut self, client: &Client, e: &[f32]) {
        self.residual = (!e.is_empty()).then(|| DeviceF32::upload(client, e));
    }
}

/// DGC momentum correction with factor masking (ALGORITHMS.md §3.4), the
/// CPU's `DgcMomentum` with `u` and `v` in device memory: select on `v`,
/// then zero `v` (less the sent values) and `u` where sent.
pub struct DeviceDgcMomentum {
    momentum: f32,
    /// (u, v), allocated at the first step.
    state: Option<(DeviceF32, DeviceF32)>,
}

impl DeviceDgcMomentum {
    pub fn new(momentum: f32) -> Self {
        Self { momentum, state: None }
    }

    /// `u = m·u + g; v += u`; returns `v`, the vector to compress.
    pub fn compensate(&mut self, client: &Client, g: &DeviceF32) -> &DeviceF32 {
        if self.state.as_ref().is_none_or(|(u, _)| u.len != g.len) {
            self.state = Some((DeviceF32::zeros(client, g.len), DeviceF32::zeros(client, g.len)));
        }
        let (u, v) = self.state.as_ref().expect("set just above");
        if g.len > 0 {
            let (cubes, dim) = grid(g.len, 1);
            accumulate_velocity::launch(client, cubes, dim, u.arg(), v.arg(), g.arg(), self.momentum);
        }
        v
    }

    /// `v −= decompress(sent)` and `u = 0` where sent.
    pub fn update(&mut self, client: &Client, sent: &Message) -> Result<(), KernelError> {
        let Some((u, v)) = self.state.as_mut() else {
            return Err(before_compensate());
        };
        remove_sent(client, v, Some(u), sent)
    }

    /// `(u, v)`, if any step has run.
    pub fn state(&self) -> Option<(&DeviceF32, &DeviceF32)> {
        self.state.as_ref().map(|(u, v)| (u, v))
    }

    /// Sets `(u, v)` (a checkpoint's, or a host memory's); empty means no
    /// step has run.
    pub fn restore(&mut self, client: &Client, u: &[f32], v: &[f32]) -> Result<(), KernelError> {
        if u.len() != v.len() {
            return Err(KernelError::Input(format!(
                "DGC momentum's u and v differ in length ({} and {})",
                u.len(),
                v.len()
            )));
        }
        self.state = (!u.is_empty()).then(|| (DeviceF32::upload(client, u), DeviceF32::upload(client, v)));
        Ok(())
    }
}
