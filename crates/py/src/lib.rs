//! gradcomp for Python: the extension module `gradcomp._core`.
//!
//! Bindings only: every algorithm is gradcomp-compress's and every exchange
//! gradcomp-exchange's. The Python package (`python/gradcomp`) builds PyTorch DDP
//! comm hooks on [`Hook`](hook::Hook), whose collectives call back into
//! `torch.distributed` ([`collective`]).
//!
//! - [`exchange`]: the buckets' exchanges, their state following the tensor.
//! - [`hook`]: the hook's Rust half: exchanges and the non-finite agreement.
//! - [`records`]: what the hook reports per bucket and per step.
//! - [`local`]: the outer rounds of local updates (DiLoCo) for `LocalUpdates`.
//! - [`collective`]: gradcomp's `Collective` over `torch.distributed`.
//! - [`compressor`]: one tensor's compressor to and from wire bytes.
//! - [`replay`]: the same exchanges on the in-process collective (tests).
//! - [`predict`]: the network model.
//! - [`config`]: the JSON configuration Python hands over, checked.

use pyo3::prelude::*;

pub mod collective;
pub mod compressor;
pub mod config;
pub mod exchange;
pub mod hook;
pub mod local;
pub mod predict;
pub mod records;
pub mod replay;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<hook::Hook>()?;
    m.add_class::<local::PyLocalUpdates>()?;
    m.add_function(wrap_pyfunction!(config::local_config, m)?)?;
    m.add_class::<compressor::PyCompressor>()?;
    m.add_function(wrap_pyfunction!(replay::replay, m)?)?;
    m.add_function(wrap_pyfunction!(replay::replay_local, m)?)?;
    m.add_function(wrap_pyfunction!(predict::predict, m)?)?;
    m.add_function(wrap_pyfunction!(predict::plan, m)?)?;
    m.add_function(wrap_pyfunction!(predict::probe_link, m)?)?;
    m.add("PAYS_OFF_MARGIN", gradcomp_exchange::predict::PAYS_OFF)?;
    m.add_function(wrap_pyfunction!(check_config, m)?)?;
    m.add_function(wrap_pyfunction!(config::hook_config, m)?)?;
    m.add_function(wrap_pyfunction!(config::compressor_options, m)?)?;
    m.add_function(wrap_pyfunction!(config::methods, m)?)?;
    m.add_function(wrap_pyfunction!(config::outer_optimizers, m)?)?;
    m.add_function(wrap_pyfunction!(first_compressed_step, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Checks a configuration's JSON as the hook will use it; raises
/// ValueError naming the key that is wrong.
#[pyfunction]
fn check_config(config: &str) -> PyResult<String> {
    Ok(config::parse(config)?.compressor_name())
}

/// The first step on which the configuration's compressor compresses
/// (PowerSGD's `start_iter`; 0 for the others): before it, a plain allreduce.
#[pyfunction]
fn first_compressed_step(config: &str) -> PyResult<u64> {
    Ok(config::parse(config)?.compressor.builtin().map_or(0, |c| c.first_compressed_step()))
}
