//! Where the trainer computes: the `device` option (`cpu`, `ndarray`, `cuda`,
//! `cuda:N`, `wgpu`). burn's device is a run-time value; backends other than
//! the default CPU one are compiled in by cargo features of the same names
//! (`openblas` gives `ndarray` a BLAS). The default build and the README's
//! commands use `cpu`, burn's `flex`: docs/BENCHMARKS.md "burn's CPU
//! backends" measured it against `ndarray` on this project's models.

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

/// A compute device as the configuration names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DeviceSpec {
    /// burn's pure-Rust CPU backend `flex`.
    #[default]
    Cpu,
    /// burn's `ndarray` backend (matrix products by OpenBLAS with the
    /// `openblas` feature, `matrixmultiply` without).
    NdArray,
    /// CUDA GPU `Some(i)`; `None`: in-process worker `r` takes GPU `r mod
    /// count`, an MPI rank its node-local rank's.
    Cuda(Option<usize>),
    /// wgpu's default adapter (Vulkan, Metal, DirectX; lavapipe in software).
    Wgpu,
}

impl TryFrom<String> for DeviceSpec {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<DeviceSpec> for String {
    fn from(d: DeviceSpec) -> String {
        match d {
            DeviceSpec::Cpu => "cpu".into(),
            DeviceSpec::NdArray => "ndarray".into(),
            DeviceSpec::Cuda(None) => "cuda".into(),
            DeviceSpec::Cuda(Some(i)) => format!("cuda:{i}"),
            DeviceSpec::Wgpu => "wgpu".into(),
        }
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" | "flex" => Ok(DeviceSpec::Cpu),
            "ndarray" => Ok(DeviceSpec::NdArray),
            "cuda" => Ok(DeviceSpec::Cuda(None)),
            "wgpu" => Ok(DeviceSpec::Wgpu),
            _ => match s.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(i)) => Ok(DeviceSpec::Cuda(Some(i))),
                _ => Err(format!("{s:?} is not a device: use cpu, ndarray, cuda, cuda:N or wgpu")),
            },
        }
    }
}

impl DeviceSpec {
    /// Whether this build can run on the device; the error says which feature to build with.
    pub fn check(self) -> Result<(), String> {
        let (built, feature) = match self {
            DeviceSpec::Cpu => return Ok(()),
            DeviceSpec::NdArray => (cfg!(feature = "ndarray"), "ndarray"),
            DeviceSpec::Cuda(_) => (cfg!(feature = "cuda"), "cuda"),
            DeviceSpec::Wgpu => (cfg!(feature = "wgpu"), "wgpu"),
        };
        if built {
            Ok(())
        } else {
            Err(format!(
                "this gradcomp was built without the {feature} backend; rebuild with `--features {feature}`{}",
                if feature == "ndarray" { "" } else { " (see scripts/install-gpu-deps.sh)" }
            ))
        }
    }

    /// The autodiff device worker `worker` (in-process) or this MPI rank trains on.
    /// Call [`DeviceSpec::check`] first.
    pub fn device(self, worker: usize) -> Device {
        let _ = worker; // only CUDA spreads workers over GPUs
        match self {
            DeviceSpec::Cpu => Device::flex().autodiff(),
            // burn 0.22 deprecates ndarray in favour of flex; it stays
            // here to be measured against it (docs/BENCHMARKS.md).
            #[cfg(feature = "ndarray")]
            #[allow(deprecated)]
            DeviceSpec::NdArray => Device::ndarray().autodiff(),
            #[cfg(feature = "cuda")]
            DeviceSpec::Cuda(index) => Device::cuda(index.unwrap_or_else(|| local_gpu(worker))).autodiff(),
            #[cfg(feature = "wgpu")]
            DeviceSpec::Wgpu => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice).autodiff(),
            #[allow(unreachable_patterns)]
            other => panic!("{other:?} is not compiled in: DeviceSpec::check reports it before any work"),
        }
    }
}

/// The GPU of in-process worker `worker`: an MPI rank takes its node-local
/// rank's, threads spread over `CUDA_VISIBLE_DEVICES`' count (or share GPU 0).
#[cfg(feature = "cuda")]
fn local_gpu(worker: usize) -> usize {
    let local = ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse::<usize>().ok());
    let count = std::env::var("CUDA_VISIBLE_DEVICES")
        .ok()
        .map(|v| v.split(',').filter(|s| !s.is_empty()).count())
        .filter(|&c| c > 0)
        .unwrap_or(1);
    local.unwrap_or(worker) % count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_round_trip() {
        for (s, d) in [
            ("cpu", DeviceSpec::Cpu),
            ("cuda", DeviceSpec::Cuda(None)),
            ("cuda:1", DeviceSpec::Cuda(Some(1))),
            ("wgpu", DeviceSpec::Wgpu),
            ("ndarray", DeviceSpec::NdArray),
        ] {
            assert_eq!(s.parse::<DeviceSpec>().unwrap(), d);
            assert_eq!(String::from(d), s);
        }
        assert!("gpu".parse::<DeviceSpec>().unwrap_err().contains("cpu, ndarray, cuda, cuda:N or wgpu"));
        assert!("cuda:x".parse::<DeviceSpec>().is_err());
        assert!(DeviceSpec::Cpu.check().is_ok());
        if !cfg!(feature = "cuda") {
            assert!(DeviceSpec::Cuda(None).check().unwrap_err().contains("--features cuda"));
        }
        if !cfg!(feature = "ndarray") {
            assert!(DeviceSpec::NdArray.check().unwrap_err().contains("--features ndarray"));
        }
    }
}
