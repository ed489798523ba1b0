//! [`DataParallelConfig::inert_option`]: the options a configuration
//! would accept and then ignore. A TOML file may spell out a section's
//! every key, so the trainer takes them; an API caller names only the
//! options it means, and one that changes nothing is an error there (the
//! Python front refuses it, naming it and why). The run-wide `seed` is the
//! exception: it seeds whatever randomness the method has, none for some.

use gradcomp_compress::memory::MemoryKind;
use gradcomp_compress::{Combine, CompressorConfig};

use super::{ConfigError, DataParallelConfig, Topology};
use crate::route::{topology_changes_nothing, Route};

impl DataParallelConfig {
    /// The first of `given` (keys of `[compressor]`, `[compression]` or the
    /// top level, as a caller set them) that changes nothing in this
    /// configuration, as an error that says why; `None` when each can.
    pub fn inert_option(&self, given: &[&str]) -> Option<ConfigError> {
        let c = self.compressor.builtin()?;
        let name = c.name();
        let memory = c.resolve_memory(self.compression.memory);
        let combine = self.combine();
        let elementwise_sum = matches!(combine, Combine::DenseSum | Combine::HalfSum);
        let why = |key: &str| -> Option<String> {
            match key {
                "dgc_momentum" if memory != MemoryKind::DgcMomentum => Some(format!(
                    "only memory = \"dgc-momentum\" reads it; {name}'s memory is {}",
                    memory_name(memory)
                )),
                "residual" if memory != MemoryKind::ErrorFeedback => Some(format!(
                    "only error feedback (memory = \"error-feedback\") reads it; {name}'s memory is {}",
                    memory_name(memory)
                )),
                "topology"
                    if topology_changes_nothing(combine) && self.topology() != Topology::ParameterServer =>
                {
                    Some(format!(
                        "{name}'s messages take one route whatever the topology, {:?} (the route table; only the \
                         parameter server changes that)",
                        Route::of(false, self.topology(), combine).expect("a validated topology carries them")
                    ))
                }
                "granularity" if elementwise_sum => {
                    Some(format!("{name} treats every value alike, so how the model is cut into units changes nothing"))
                }
                "memory" | "exclude" if combine == Combine::DenseSum && matches!(c, CompressorConfig::Dense(_)) => {
                    Some("dense sends every value exactly: there is nothing to remember or to exclude".into())
                }
                "packing" if Route::of(false, self.topology(), combine) == Some(Route::SumCodes) => Some(
                    "TernGrad's codes are summed in an allreduce of small integers, unpacked (route SumCodes); packing applies where they are gathered or uploaded (topology = \"allgather\" or the parameter server)"
                        .into(),
                ),
                _ => None,
            }
        };
        given.iter().find_map(|key| {
            let problem = why(key)?;
            let section = match *key {
                "topology" => "",
                "dgc_momentum" | "residual" | "granularity" | "memory" | "exclude" => "compression.",
                _ => "compressor.",
            };
            Some(ConfigError::new(&format!("{section}{key}"), format!("changes nothing here: {problem}")))
        })
    }
}

fn memory_name(m: MemoryKind) -> String {
    serde_json::to_value(m)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| format!("{m:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inert(name: &str, given: &[&str]) -> Option<String> {
        let cfg = DataParallelConfig::new(CompressorConfig::named(name).unwrap());
        cfg.inert_option(given).map(|e| e.to_string())
    }

    #[test]
    fn an_option_the_configuration_ignores_is_named_with_the_reason() {
        let e = inert("topk", &["density", "dgc_momentum"]).unwrap();
        assert!(e.contains("compression.dgc_momentum") && e.contains("error-feedback"), "{e}");
        assert!(inert("dgck", &["dgc_momentum"]).is_none(), "DGC-k's memory reads it");
        assert!(inert("qsgd", &["residual"]).unwrap().contains("none"));
        assert!(inert("topk", &["seed"]).is_none(), "a run-wide seed seeds what randomness there is");
        assert!(inert("dense", &["topology"]).is_some() && inert("terngrad", &["topology"]).is_none());
        assert!(inert("fp16", &["topology"]).unwrap().contains("SumF16"), "from the route table");
        assert!(inert("powersgd", &["topology"]).is_none() && inert("fp4", &["topology"]).is_none());
        assert!(inert("fp16", &["granularity"]).is_some() && inert("topk", &["granularity"]).is_none());
        assert!(inert("dense", &["exclude"]).is_some() && inert("fp16", &["exclude"]).is_none());
        assert!(inert("terngrad", &["packing"]).is_some());
        let mut gathered = DataParallelConfig::new(CompressorConfig::named("terngrad").unwrap());
        gathered.topology = Some(Topology::Allgather);
        assert!(gathered.inert_option(&["packing"]).is_none(), "allgathered codes are packed");
    }
}
