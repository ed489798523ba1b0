//! The gradient in device memory, cut into compression units: from burn's
//! tensors to the cubecl buffers the device kernels read, with no copy to
//! the host.
//!
//! The route (burn 0.22.1): each unit's gradient tensors are concatenated
//! inside burn (a layer unit is one tensor, the global unit all of them), the
//! result's primitive is a cubecl tensor behind burn's fusion layer, and
//! `FusionClient::resolve_tensor_float` runs the pending fused work and hands
//! over the `CubeTensor`, whose `client` is the kernels' `Client` and whose
//! `handle` is the buffer. A gradient on any other backend (`flex`, the CPU)
//! resolves to `None`, and the caller keeps the host path.

use burn::module::Module;
use burn::tensor::{DType, Tensor};
use burn_cubecl::{Cube, CubeBackend};
use gradcomp_kernels::{Client, DeviceF32};

use crate::params::{self, GradSource};
use gradcomp_exchange::{DeviceGrad, Unit};

/// The gradients `grads` of `model`'s trainable parameters, cut by `units`
/// (which cover the layout in order, as the exchange builds them); `None`
/// when they do not live on a cubecl device in f32.
pub fn from_burn<M: Module, G: GradSource>(model: &M, grads: &G, units: &[Unit]) -> Option<DeviceGrad> {
    let mut tensors = params::grad_tensors(model, grads).into_iter().peekable();
    let mut client = None;
    let mut out = Vec::with_capacity(units.len());
    for unit in units {
        // The tensors of this unit: consecutive slots until its length is filled.
        let mut parts = Vec::new();
        let mut filled = 0;
        while filled < unit.len {
            let t = tensors.next()?;
            filled += t.dims()[0];
            parts.push(t);
        }
        if filled != unit.len {
            return None;
        }
        let flat = if parts.len() == 1 { parts.pop()? } else { Tensor::cat(parts, 0) };
        let (c, buf) = resolve(flat)?;
        client.get_or_insert(c);
        out.push(buf);
    }
    Some(DeviceGrad { client: client?, units: out })
}

/// A one-dimensional f32 tensor's device buffer, contiguous, if it lives on
/// a cubecl device.
fn resolve(t: Tensor<1>) -> Option<(Client, DeviceF32)> {
    if t.dtype() != DType::F32 {
        return None;
    }
    let len = t.dims()[0];
    let fused = t.try_into_primitive::<Cube>().ok()?;
    let client = fused.client.clone();
    let cube = client.resolve_tensor_float::<CubeBackend>(fused);
    let cube = burn_cubecl::kernel::into_contiguous(cube);
    Some((cube.client.clone(), DeviceF32::from_handle(cube.handle, len)))
}
