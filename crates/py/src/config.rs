//! The configuration Python hands over, as JSON: a [`DataParallelConfig`]
//! with the keys of gradcomp's TOML (`compressor`, `compression`,
//! `topology`, `seed`, ...), checked as the trainer checks it, plus what a
//! DDP hook cannot do.

use gradcomp_compress::CompressorConfig;
use gradcomp_exchange::config::{StrategyKind, Topology};
use gradcomp_exchange::DataParallelConfig;
use pyo3::exceptions::PyValueError;
use pyo3::PyErr;
use serde_json::{Map, Value};

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("gradcomp: {e}"))
}

/// A `[compressor]` table. serde reports a bad option inside the tagged
/// table without its key, so on an error the options are tried one at a
/// time after `name`, and the first that fails is named.
pub fn parse_compressor(table: &Value) -> Result<CompressorConfig, PyErr> {
    let whole = serde_json::from_value::<CompressorConfig>(table.clone());
    let err = match whole {
        Ok(c) => {
            c.validate().map_err(value_error)?;
            return Ok(c);
        }
        Err(e) => e,
    };
    let Some(obj) = table.as_object() else { return Err(value_error(format!("compressor: {err}"))) };
    let mut partial = Map::new();
    if let Some(name) = obj.get("name") {
        partial.insert("name".into(), name.clone());
        if let Err(e) = serde_json::from_value::<CompressorConfig>(Value::Object(partial.clone())) {
            return Err(value_error(format!("compressor.name: {e}")));
        }
    }
    for (k, v) in obj.iter().filter(|(k, _)| *k != "name") {
        partial.insert(k.clone(), v.clone());
        if let Err(e) = serde_json::from_value::<CompressorConfig>(Value::Object(partial.clone())) {
            return Err(value_error(format!("compressor.{k}: {e}")));
        }
    }
    Err(value_error(format!("compressor: {err}")))
}

/// Parses and checks `json`. Each DDP bucket is one gradcomp bucket, moved
/// on the calling thread and compressed on the host: the hook's caller owns
/// bucketing, overlap and the device.
pub fn parse(json: &str) -> Result<DataParallelConfig, PyErr> {
    let mut rest: Value = serde_json::from_str(json).map_err(value_error)?;
    let table = rest.as_object_mut().and_then(|o| o.remove("compressor")).unwrap_or(Value::Null);
    if table.get("rank").is_some() {
        return Err(PyValueError::new_err(
            "gradcomp: rank: in gradcomp's Python API `rank` is the worker's; PowerSGD's is matrix_approximation_rank (torch's name)",
        ));
    }
    let compressor = parse_compressor(&table)?;
    let mut cfg: DataParallelConfig = serde_path_to_error::deserialize(rest)
        .map_err(|e| value_error(format!("{}: {}", e.path(), e.inner())))?;
    cfg.compressor = compressor.into();
    cfg.compression.bucket_mb = 1e6;
    cfg.compression.pipeline = false;
    cfg.compression.on_device = false;
    cfg.validate().map_err(|e| PyValueError::new_err(format!("gradcomp: {}: {}", e.key, e.problem)))?;
    if cfg.topology() == Topology::ParameterServer {
        return Err(PyValueError::new_err(
            "gradcomp: topology: torch.distributed has no parameter server; use \"allreduce\" or \"allgather\"",
        ));
    }
    if cfg.strategy.kind != StrategyKind::Sync {
        return Err(PyValueError::new_err(
            "gradcomp: strategy: a DDP hook exchanges every step; CELGC's local steps need gradcomp's own loop",
        ));
    }
    // Both live in gradcomp's own step, around the exchange the hook calls.
    if cfg.compression.warmup != Default::default() {
        return Err(PyValueError::new_err(
            "gradcomp: warmup: the density warm-up is per epoch, and a DDP hook sees no epochs; set density directly (or change it between runs)",
        ));
    }
    if cfg.compression.local_clip != 0.0 {
        return Err(PyValueError::new_err(
            "gradcomp: local_clip: DGC's local clipping runs in gradcomp's own step, before the exchange a DDP hook calls; it is not available in the hook",
        ));
    }
    if cfg.compressor_name() == "esgd" {
        return Err(PyValueError::new_err(
            "gradcomp: compressor esgd selects by each worker's loss, which a DDP hook never sees; use gradcomp's own loop",
        ));
    }
    Ok(cfg)
}
