//! The gradient in device memory, cut into compression units: the cubecl
//! buffers the device kernels read, handed over by a front with no copy to
//! the host.

use gradcomp_kernels::{Client, DeviceF32};

/// One worker's gradient on its device: a buffer per compression unit, in
/// unit order, each holding exactly the unit's elements in layout order. A
/// front builds it from its framework's tensors (the burn front:
/// `gradcomp_dp::device_grad::from_burn`).
pub struct DeviceGrad {
    pub client: Client,
    pub units: Vec<DeviceF32>,
}

impl DeviceGrad {
    /// The whole gradient on the host, in layout order (measured steps and
    /// error reports only: this is the copy the device path otherwise avoids).
    pub fn read(&self, out: &mut Vec<f32>) -> Result<(), gradcomp_kernels::KernelError> {
        out.clear();
        for u in &self.units {
            out.extend(u.read(&self.client)?);
        }
        Ok(())
    }

    /// Whether every element is finite: one scaled-sum pass per unit on the
    /// device (`gradcomp_kernels::reduce::all_finite`), nothing read back.
    pub fn all_finite(&self) -> Result<bool, gradcomp_kernels::KernelError> {
        for u in &self.units {
            if !gradcomp_kernels::reduce::all_finite(&self.client, u)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
