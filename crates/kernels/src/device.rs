//! Opening a device by name, for code that does not hold a burn tensor (the
//! benchmarks, the tests).

use cubecl::prelude::Client;

use crate::KernelError;

/// A cubecl client for `spec`: `wgpu` (the machine's best wgpu adapter,
/// lavapipe where there is no GPU), `cuda` or `cuda:N`. Each runtime needs
/// its cargo feature.
pub fn client(spec: &str) -> Result<Client, KernelError> {
    let unavailable =
        |e: &dyn std::fmt::Debug| KernelError::Input(format!("device {spec} is unavailable: {e:?}"));
    match spec {
        #[cfg(feature = "wgpu")]
        "wgpu" => cubecl::Device::wgpu(Default::default()).map(|d| d.client()).map_err(|e| unavailable(&e)),
        #[cfg(feature = "cuda")]
        s if s == "cuda" || s.starts_with("cuda:") => {
            let index = match s.strip_prefix("cuda:") {
                Some(i) => {
                    i.parse().map_err(|_| KernelError::Input(format!("bad GPU index in {s}: use cuda:N")))?
                }
                None => 0,
            };
            cubecl::Device::cuda(index).map(|d| d.client()).map_err(|e| unavailable(&e))
        }
        other => {
            let _ = unavailable;
            Err(KernelError::Input(format!(
                "device '{other}' is not in this build: the kernels run on `wgpu` (cargo feature wgpu) and `cuda`/`cuda:N` (feature cuda)"
            )))
        }
    }
}
