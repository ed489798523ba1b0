//! [`DataParallelConfig::validate`]: every check that can be made before
//! any work starts, one function per section.

use gradcomp_compress::memory::{DensitySchedule, MemoryKind};
use gradcomp_compress::{Combine, CompressorConfig};

use super::{Average, ConfigError, DataParallelConfig, Granularity, StrategyKind, Topology};

fn err(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::new(key, problem)
}

impl DataParallelConfig {
    /// Every check that can be made before any work starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(c) = self.compressor.builtin() {
            c.validate().map_err(|e| err(&format!("compressor.{}", e.key), e.problem))?;
        }
        self.validate_compression()?;
        self.validate_strategy()?;
        if self.topology() != Topology::Allreduce && self.combine() == Combine::InRounds {
            return Err(err(
                "comm.topology",
                format!(
                    "compressor {} exchanges in allreduce rounds; use topology = \"allreduce\" (the default)",
                    self.compressor_name()
                ),
            ));
        }
        if self.topology() == Topology::Allreduce
            && matches!(self.combine(), Combine::Gather | Combine::MajorityVote)
        {
            return Err(err(
                "comm.topology",
                format!(
                    "compressor {} sends per-worker messages that allreduce cannot sum; use topology = \"allgather\" or \"parameter-server\"",
                    self.compressor_name()
                ),
            ));
        }
        Ok(())
    }

    fn validate_compression(&self) -> Result<(), ConfigError> {
        let c = &self.compression;
        if let DensitySchedule::List { densities } = &c.warmup {
            if let Some(d) = densities.iter().find(|d| !(**d > 0.0 && **d <= 1.0)) {
                return Err(err("compression.warmup.densities", format!("{d} is not in (0, 1]")));
            }
        }
        if !(c.dgc_momentum >= 0.0 && c.dgc_momentum < 1.0) {
            return Err(err("compression.dgc_momentum", "must be in [0, 1)"));
        }
        if c.exclude.min_size == 0 {
            return Err(err("compression.exclude.min_size", "must be at least 1 (1 excludes nothing)"));
        }
        if !(c.local_clip >= 0.0 && c.local_clip.is_finite()) {
            return Err(err("compression.local_clip", "must be ≥ 0 (0 turns it off)"));
        }
        if !(c.bucket_mb > 0.0 && c.bucket_mb <= 1e6) {
            return Err(err(
                "compression.bucket_mb",
                "must be > 0 and at most 1e6 MiB (25 is DDP's default; a value larger than the model sends one bucket)",
            ));
        }
        if self.compressor.is(|c| matches!(c, CompressorConfig::Esgd(_))) {
            if self.granularity() != Granularity::Global {
                return Err(err(
                    "compression.granularity",
                    "eSGD numbers coordinates across all layers; set granularity = \"global\" (or \"auto\")",
                ));
            }
            if !matches!(c.memory, MemoryKind::Auto | MemoryKind::None) {
                return Err(err(
                    "compression.memory",
                    "eSGD carries its own momentum residual; use \"auto\" or \"none\"",
                ));
            }
        }
        Ok(())
    }

    fn validate_strategy(&self) -> Result<(), ConfigError> {
        let st = &self.strategy;
        if st.period == 0 {
            return Err(err("strategy.period", "must be at least 1 (the communication period I)"));
        }
        if !(st.gamma >= 0.0 && st.gamma.is_finite()) {
            return Err(err("strategy.gamma", "must be ≥ 0 (0 turns clipping off)"));
        }
        if st.average_at_epoch_end && !(st.kind == StrategyKind::Celgc && st.average == Average::Models) {
            return Err(err(
                "strategy.average_at_epoch_end",
                "applies to CELGC's model averaging (kind = \"celgc\", average = \"models\")",
            ));
        }
        let outer = st.outer;
        if !(outer.lr() > 0.0 && outer.lr().is_finite()) {
            return Err(err("strategy.outer.lr", format!("{} is not a positive learning rate", outer.lr())));
        }
        if !(0.0..1.0).contains(&outer.momentum()) {
            return Err(err("strategy.outer.momentum", format!("{} is not in [0, 1)", outer.momentum())));
        }
        let has_rounds = st.kind == StrategyKind::Celgc && st.average == Average::Models;
        if !(outer.averages() || has_rounds) {
            return Err(err(
                "strategy.outer",
                "an outer optimizer acts on the model rounds of local steps (kind = \"celgc\", average = \"models\")",
            ));
        }
        if st.kind != StrategyKind::Celgc {
            return Ok(());
        }
        if st.average == Average::Gradients && st.period != 1 {
            return Err(err(
                "strategy.average",
                "averaging gradients (naive parallel clipping) needs period = 1",
            ));
        }
        if st.average == Average::Gradients && st.compress_delta {
            return Err(err("strategy.compress_delta", "applies to model averaging only"));
        }
        if !st.compress_delta && !self.compressor.sends_values_as_they_are() {
            return Err(err(
                "strategy.compress_delta",
                format!(
                    "CELGC averages models densely; to send the model change through compressor {} with error feedback, turn compress_delta on (TOML: strategy.compress_delta = true)",
                    self.compressor_name()
                ),
            ));
        }
        if st.gamma > 0.0 && !self.base_lr.is_some_and(|l| l > 0.0 && l.is_finite()) {
            return Err(err(
                "optimizer.lr",
                "CELGC's γ decays with the learning rate: give the base learning rate (with_base_lr)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every compressor's default topology validates; a topology its
    /// messages cannot use is refused, naming `comm.topology` and the ones
    /// that work.
    #[test]
    fn a_topology_the_messages_cannot_use_is_refused() {
        for name in CompressorConfig::NAMES {
            let cfg = DataParallelConfig::new(CompressorConfig::named(name).unwrap());
            cfg.validate().unwrap_or_else(|e| panic!("{name}'s defaults: {e}"));
            let gathers = matches!(cfg.combine(), Combine::Gather | Combine::MajorityVote);
            let agrees = cfg.combine() == Combine::InRounds;
            for topology in [Topology::Allreduce, Topology::Allgather, Topology::ParameterServer] {
                let refused = (gathers && topology == Topology::Allreduce)
                    || (agrees && topology != Topology::Allreduce);
                match cfg.clone().with_topology(topology).validate() {
                    Err(e) if refused => {
                        let text = e.to_string();
                        assert!(text.contains("comm.topology"), "{name} over {topology:?}: {text}");
                        let hint = if agrees { "\"allreduce\"" } else { "\"allgather\"" };
                        assert!(text.contains(hint), "{name} over {topology:?}: {text}");
                    }
                    Ok(()) if !refused => {}
                    other => panic!("{name} over {topology:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn an_outer_optimizer_out_of_range_or_without_rounds_is_named() {
        use crate::config::{OuterConfig, OuterKind, StrategyConfig};
        let local = |outer: OuterConfig| {
            DataParallelConfig::new(CompressorConfig::named("dense").unwrap())
                .with_strategy(StrategyConfig::celgc(8, 0.0).with_outer(outer))
        };
        local(OuterConfig::nesterov()).validate().unwrap();
        let bad = [
            (OuterConfig { lr: Some(0.0), ..OuterConfig::nesterov() }, "strategy.outer.lr"),
            (OuterConfig { momentum: Some(1.0), ..OuterConfig::nesterov() }, "strategy.outer.momentum"),
            (OuterConfig { name: OuterKind::Sgd, lr: Some(f64::NAN), momentum: None }, "strategy.outer.lr"),
        ];
        for (outer, key) in bad {
            let e = local(outer).validate().unwrap_err().to_string();
            assert!(e.contains(key), "{outer:?}: {e}");
        }
        let sync = DataParallelConfig::new(CompressorConfig::named("dense").unwrap())
            .with_strategy(StrategyConfig::default().with_outer(OuterConfig::nesterov()));
        assert!(sync.validate().unwrap_err().to_string().contains("strategy.outer"));
    }
}
