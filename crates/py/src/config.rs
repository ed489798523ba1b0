//! The configuration Python hands over, as JSON: a [`DataParallelConfig`]
//! with the keys of gradcomp's TOML (`compressor`, `compression`,
//! `topology`, `seed`, ...), checked as the trainer checks it, plus what a
//! DDP hook cannot do.

use gradcomp_compress::CompressorConfig;
use gradcomp_exchange::config::StrategyKind;
use gradcomp_exchange::route::Runner;
use gradcomp_exchange::DataParallelConfig;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("gradcomp: {e}"))
}

/// A `[compressor]` table. serde reports a bad option inside the tagged
/// table without its key, so on an error the options are tried one at a
/// time after `name`, and the first that fails is named.
pub fn parse_compressor(table: &Value) -> Result<CompressorConfig, PyErr> {
    let expanded = expand_variant(table);
    let table = expanded.as_ref().unwrap_or(table);
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

/// A table named after a method's variant (`gaussiank-refined`): the
/// variant's own options under its method's name, then the table's.
fn expand_variant(table: &Value) -> Option<Value> {
    let name = table.get("name")?.as_str()?;
    let Ok(Value::Object(mut own)) = serde_json::to_value(CompressorConfig::named(name)?) else {
        return None;
    };
    if own.get("name").and_then(Value::as_str) == Some(name) {
        return None;
    }
    for (k, v) in table.as_object()?.iter().filter(|(k, _)| *k != "name") {
        own.insert(k.clone(), v.clone());
    }
    Some(Value::Object(own))
}

/// Parses and checks `json`. Each DDP bucket is one gradcomp bucket, moved
/// on the calling thread and compressed on the host: the hook's caller owns
/// bucketing, overlap and the device.
pub fn parse(json: &str) -> Result<DataParallelConfig, PyErr> {
    let cfg = parse_for_python(json)?;
    if cfg.strategy.kind != StrategyKind::Synchronous {
        return Err(PyValueError::new_err(
            "gradcomp: strategy: a DDP hook exchanges every step; for local steps with outer rounds use gradcomp.torch.LocalUpdates",
        ));
    }
    refuse_topology(&cfg, Runner::DdpHook)?;
    Ok(cfg)
}

/// Parses and checks `json` for local updates (`LocalUpdates`): the
/// core's outer rounds with an outer optimizer, the inner steps the
/// caller's own.
pub fn parse_local(json: &str) -> Result<DataParallelConfig, PyErr> {
    let cfg = parse_for_python(json)?;
    let st = &cfg.strategy;
    if !st.kind.steps_locally() || st.average != gradcomp_exchange::config::Average::Models {
        return Err(value_error(
            "strategy: local updates average models (kind = \"local\", average = \"models\")",
        ));
    }
    if st.gamma != 0.0 {
        return Err(value_error(
            "gamma: CELGC's clipping needs each inner gradient; clip in your own inner step (torch.nn.utils.clip_grad_norm_)",
        ));
    }
    Ok(cfg)
}

/// The route table's word on `cfg`'s topology under `runner`.
fn refuse_topology(cfg: &DataParallelConfig, runner: Runner) -> Result<(), PyErr> {
    match cfg.topology().refused_by(runner) {
        Some(why) => Err(PyValueError::new_err(format!("gradcomp: topology: {why}"))),
        None => Ok(()),
    }
}

/// The checks every Python entry point shares: the configuration as the
/// trainer checks it, less what only gradcomp's own loop can do.
fn parse_for_python(json: &str) -> Result<DataParallelConfig, PyErr> {
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
    refuse_topology(&cfg, Runner::TorchRounds)?;
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

/// A Python option's value as JSON, or ValueError naming `key` (a path
/// such as `exclude.names[0]` inside tables and lists). Booleans stay
/// booleans, so `density=True` is refused where a number is wanted; a
/// float must be finite.
pub fn to_json(key: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Value::String(s.extract::<String>()?));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, item) in d.iter() {
            let k: String =
                k.extract().map_err(|_| value_error(format!("{key}: a table's keys are strings")))?;
            let value = to_json(&format!("{key}.{k}"), &item)?;
            map.insert(k, value);
        }
        return Ok(Value::Object(map));
    }
    if v.cast::<PyList>().is_ok() || v.cast::<PyTuple>().is_ok() {
        let items = v.try_iter()?.enumerate().map(|(i, item)| to_json(&format!("{key}[{i}]"), &item?));
        return items.collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    if let Ok(i) = v.extract::<i64>() {
        return Ok(i.into());
    }
    if let Ok(u) = v.extract::<u64>() {
        return Ok(u.into());
    }
    if let Ok(f) = v.extract::<f64>() {
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| value_error(format!("{key}: {f} is not a finite number")));
    }
    Err(value_error(format!("{key}: {} is not a number, string, list or table", v.repr()?)))
}

/// The keys of a configuration section, read from its serialized default:
/// a new field is routed without a list to keep.
fn keys_of<T: serde::Serialize>(section: &T) -> Vec<String> {
    match serde_json::to_value(section) {
        Ok(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Keyword options, routed as gradcomp's TOML holds them: a key of the
/// `[compression]` section there, a top-level key of the configuration at
/// the top, and every other key the compressor's own.
pub struct Routed {
    pub compressor: Map<String, Value>,
    pub compression: Map<String, Value>,
    pub top: Map<String, Value>,
}

impl Routed {
    pub fn new(name: &Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let name: String = name.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "gradcomp: the compressor name must be a string, got {}",
                name.get_type().name().map_or("?".into(), |n| n.to_string())
            ))
        })?;
        let compression_keys = keys_of(&gradcomp_exchange::config::CompressionConfig::default());
        let top_keys: Vec<String> = keys_of(&DataParallelConfig::default())
            .into_iter()
            .filter(|k| k != "compressor" && k != "compression")
            .collect();
        let mut r = Routed { compressor: Map::new(), compression: Map::new(), top: Map::new() };
        r.compressor.insert("name".into(), Value::String(name));
        for (k, v) in options.into_iter().flat_map(|d| d.iter()) {
            let key: String = k.extract()?;
            let value = to_json(&key, &v)?;
            let section = if compression_keys.contains(&key) {
                &mut r.compression
            } else if top_keys.contains(&key) {
                &mut r.top
            } else {
                &mut r.compressor
            };
            section.insert(key, value);
        }
        Ok(r)
    }

    /// Every option given, by its key in its section.
    pub fn given(&self) -> Vec<&str> {
        let own = self.compressor.keys().filter(|k| *k != "name");
        own.chain(self.compression.keys()).chain(self.top.keys()).map(String::as_str).collect()
    }

    /// Refuses an option given that changes nothing in `cfg`.
    pub fn refuse_inert(&self, cfg: &DataParallelConfig) -> PyResult<()> {
        match cfg.inert_option(&self.given()) {
            Some(e) => Err(PyValueError::new_err(format!("gradcomp: {}: {}", e.key, e.problem))),
            None => Ok(()),
        }
    }

    /// The configuration's JSON (with `strategy` when given), checked by
    /// `parse` and for inert options.
    fn config_json(
        &self,
        strategy: Option<Value>,
        parse: fn(&str) -> PyResult<DataParallelConfig>,
    ) -> PyResult<String> {
        let mut cfg = self.top.clone();
        cfg.insert("compressor".into(), Value::Object(self.compressor.clone()));
        cfg.insert("compression".into(), Value::Object(self.compression.clone()));
        cfg.extend(strategy.map(|s| ("strategy".to_string(), s)));
        // No parameter checksums: each front keeps its replicas, and gradcomp
        // never sees them between its own calls.
        cfg.insert("checksum_every".into(), Value::from(0));
        let json = Value::Object(cfg).to_string();
        self.refuse_inert(&parse(&json)?)?;
        Ok(json)
    }

    /// Refuses the first of `keys` (key, why) that was given.
    pub fn refuse(&self, keys: &[(&str, &str)]) -> PyResult<()> {
        for (key, why) in keys {
            if self.compression.contains_key(*key) || self.top.contains_key(*key) {
                return Err(value_error(format!("{key}: {why}")));
            }
        }
        Ok(())
    }
}

/// What the hook sets itself, and why an option cannot change it.
const SET_BY_THE_HOOK: [(&str, &str); 6] = [
    ("bucket_mb", "DDP cuts the buckets: pass bucket_cap_mb to DistributedDataParallel"),
    ("pipeline", "the hook's exchanges run on its own thread, overlapping DDP's backward pass"),
    ("on_device", "the hook compresses on the host (a CUDA bucket is copied to pinned memory and back)"),
    ("checksum_every", "DDP keeps the replicas, and the hook never sees the parameters"),
    ("base_lr", "CELGC's local steps need gradcomp's own loop; the hook exchanges every step"),
    ("server", "torch.distributed has no parameter server"),
];

/// `_core.hook_config(name, options)`: the JSON configuration of a DDP
/// hook for compressor `name` with keyword `options` (docs/CONFIG.md's
/// keys), checked; ValueError names the option that is wrong or that the
/// hook cannot honour.
#[pyfunction]
#[pyo3(signature = (name, options=None))]
pub fn hook_config(name: &Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
    let r = Routed::new(name, options)?;
    r.refuse(&SET_BY_THE_HOOK)?;
    r.config_json(None, parse)
}

/// `_core.local_config(name, strategy, options)`: the JSON configuration
/// of local updates (`kind = "local"`): `strategy` holds `period`, `outer`
/// (`{"name", "lr", "momentum"}`) and Streaming's `fragments`, `delay` and
/// `mix` (a key left out takes its default); the model change is sent
/// through compressor `name` with `options` (dense: averaged as it is; any
/// other: with its error feedback, `compress_change`). `lrs`, the inner
/// learning rate at steps 0, 1, … of the run (`LocalUpdates(lr_at=…)`),
/// resolves a QSR period rule's periods.
#[pyfunction]
#[pyo3(signature = (name, strategy, options=None, lrs=None))]
pub fn local_config(
    name: &Bound<'_, PyAny>,
    strategy: &Bound<'_, PyDict>,
    options: Option<&Bound<'_, PyDict>>,
    lrs: Option<Vec<f64>>,
) -> PyResult<String> {
    let r = Routed::new(name, options)?;
    r.refuse(&SET_BY_THE_HOOK)?;
    if r.top.contains_key("strategy") {
        return Err(value_error(
            "strategy: LocalUpdates sets it from its own arguments (period, outer, fragments, delay, mix)",
        ));
    }
    let spec: gradcomp_exchange::CompressorSpec =
        parse_compressor(&Value::Object(r.compressor.clone()))?.into();
    let Value::Object(mut table) = to_json("strategy", strategy.as_any())? else {
        return Err(value_error("strategy: not a table"));
    };
    table.insert("kind".into(), "local".into());
    table.insert("compress_change".into(), (!spec.sends_values_as_they_are()).into());
    if let Some(Value::Object(sync)) = table.get_mut("sync") {
        if let Some(c) = sync.get_mut("compressor") {
            *c = sync_compressor(c)?;
        }
    }
    if let Some(lrs) = lrs {
        resolve_period_rule(&mut table, &lrs)?;
    }
    r.config_json(Some(Value::Object(table)), parse_local)
}

/// QSR's periods, from the learning rates `lrs` of the run's steps (the
/// core's rule, `PeriodRule::resolve`; past the last step, its rate).
fn resolve_period_rule(table: &mut Map<String, Value>, lrs: &[f64]) -> PyResult<()> {
    if lrs.is_empty() || lrs.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(value_error("lr_at: the learning rate at each of total_steps steps, finite and ≥ 0"));
    }
    let st: gradcomp_exchange::config::StrategyConfig =
        serde_json::from_value(Value::Object(table.clone())).map_err(value_error)?;
    let lr = |t: u64| lrs[(t as usize).min(lrs.len() - 1)];
    let rule = st.period_rule.resolve(st.period, st.sync_steps(), lrs.len() as u64, &lr);
    table.insert("period_rule".into(), serde_json::to_value(rule).map_err(value_error)?);
    Ok(())
}

/// The synchronous phase's compressor table (`sync_compressor` and
/// `sync_options`), checked as `[compressor]` is, its errors named after
/// the arguments that set it.
fn sync_compressor(table: &Value) -> PyResult<Value> {
    let parsed = parse_compressor(table).map_err(|e| {
        let text = Python::attach(|py| e.value(py).to_string());
        value_error(text.replacen("gradcomp: compressor", "sync_compressor", 1))
    })?;
    serde_json::to_value(parsed).map_err(value_error)
}

/// `_core.compressor_options(name)`: the compressor's own options with
/// their defaults, as its `[compressor]` table (`name` included).
#[pyfunction]
pub fn compressor_options(name: &str) -> PyResult<String> {
    let cfg = CompressorConfig::named(name).ok_or_else(|| {
        value_error(format!("compressor: {name:?} is none of {}", CompressorConfig::NAMES.join(", ")))
    })?;
    serde_json::to_string(&cfg).map_err(value_error)
}

/// `_core.outer_optimizers()`: every outer optimizer's name
/// (`strategy.outer.name`), registered once in the core.
#[pyfunction]
pub fn outer_optimizers() -> Vec<&'static str> {
    gradcomp_exchange::config::OuterKind::ALL.iter().map(|k| k.name()).collect()
}

/// `_core.methods()`: every built-in compressor's name.
#[pyfunction]
pub fn methods() -> Vec<&'static str> {
    CompressorConfig::NAMES.to_vec()
}
