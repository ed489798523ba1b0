//! Error feedback with its residual in device memory (ALGORITHMS.md §3.2):
//! `acc = e + s·g` before compression, `e = acc − decompress(sent)` after.
//! The same arithmetic as the CPU's `ErrorFeedback`, element for element, so
//! a device worker's residual stays bit-identical to a CPU worker's.

use cubecl::prelude::*;
use gradcomp_compress::memory::ResidualForm;
use gradcomp_compress::Message;

use crate::aggregate::TernaryCodes;
use crate::buffer::{u32_arg, DeviceF32, KernelError};
use crate::{cubes_for, CUBE_UNITS};

#[cube(launch)]
fn add_scaled(acc: &mut [f32], g: &[f32], scale: f32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i < acc.len() {
        acc[i] += scale * g[i];
        i += stride;
    }
}

#[cube(launch)]
fn subtract_at(acc: &mut [f32], indices: &[u32], values: &[f32]) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut j = ABSOLUTE_POS;
    while j < indices.len() {
        let i = indices[j] as usize;
        acc[i] -= values[j];
        j += stride;
    }
}

/// The residual `e` of one compression unit, on the device.
pub struct DeviceErrorFeedback {
    form: ResidualForm,
    residual: Option<DeviceF32>,
}

impl DeviceErrorFeedback {
    pub fn new(form: ResidualForm) -> Self {
        Self { form, residual: None }
    }

    /// `e += s·g` (`s` = 1, or the learning rate for the lr-scaled form);
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
            add_scaled::launch(
                client,
                CubeCount::Static(cubes_for(g.len, 1), 1, 1),
                CubeDim::new_1d(CUBE_UNITS),
                e.arg(),
                g.arg(),
                scale,
            );
        }
        e
    }

    /// `e −= decompress(sent)`: a scatter of the k sent pairs for a sparse
    /// message, the ternary decoder for TernGrad's. Other messages take the
    /// CPU's decoder over a host copy of the residual (correct, not fast).
    pub fn update(&mut self, client: &Client, sent: &Message) -> Result<(), KernelError> {
        let Some(e) = self.residual.as_mut() else {
            return Err(KernelError::Input(
                "update before compensate: the residual has no length yet".into(),
            ));
        };
        match sent {
            Message::Sparse(m) if m.indices.is_empty() => Ok(()),
            Message::Sparse(m) => {
                if m.indices.iter().any(|&i| i as usize >= e.len) {
                    return Err(KernelError::Input(format!(
                        "a sent index is past the unit's {} elements",
                        e.len
                    )));
                }
                let idx = client.create_from_slice(u32::as_bytes(&m.indices));
                let val = DeviceF32::upload(client, &m.values);
                subtract_at::launch(
                    client,
                    CubeCount::Static(cubes_for(m.indices.len(), 1), 1, 1),
                    CubeDim::new_1d(CUBE_UNITS),
                    e.arg(),
                    u32_arg(&idx, m.indices.len()),
                    val.arg(),
                );
                Ok(())
            }
            Message::Ternary(t) => TernaryCodes::upload(client, &[t])?.add_to(client, -1.0, e),
            other => {
                let mut host = e.read(client)?;
                other.add_to(-1.0, &mut host);
                *e = DeviceF32::upload(client, &host);
                Ok(())
            }
        }
    }

    /// The residual, if any step has run.
    pub fn residual(&self) -> Option<&DeviceF32> {
        self.residual.as_ref()
    }
}
