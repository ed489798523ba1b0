//! [`DataParallelConfig::validate`]: every check that can be made before
//! any work starts, one function per section.

use gradcomp_compress::memory::{DensitySchedule, MemoryKind};
use gradcomp_compress::Combine;

use super::{Average, ConfigError, DataParallelConfig, Granularity, Overlap};

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
        if self.server != gradcomp_comm::ServerPlacement::CoLocated {
            return Err(err(
                "comm.server",
                "a dedicated server rank is not supported: every rank trains, and rank 0 serves as well; use server = \"co-located\" (the default)",
            ));
        }
        let topology = self.topology();
        if let Some(why) = crate::route::refusal(self.combine(), topology) {
            let carriers = crate::route::topology_for(self.combine());
            return Err(err(
                "comm.topology",
                format!(
                    "compressor {} cannot travel by {}: {}; use topology = \"{}\"",
                    self.compressor_name(),
                    topology.name(),
                    why,
                    carriers.join("\" or \"")
                ),
            ));
        }
        if topology == super::Topology::ReduceScatter && self.compressor.declares(|m| m.needs_loss()) {
            return Err(err(
                "comm.topology",
                format!(
                    "compressor {} keeps per-value state across steps, and the reduce-scatter compresses each unit in shards; use topology = \"allgather\"",
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
        let name = self.compressor_name();
        if self.compressor.declares(|m| m.whole_model()) && self.granularity() != Granularity::Global {
            return Err(err(
                "compression.granularity",
                format!("{name} numbers coordinates across all layers; set granularity = \"global\" (or \"auto\")"),
            ));
        }
        if self.compressor.declares(|m| m.own_residual())
            && !matches!(c.memory, MemoryKind::Auto | MemoryKind::None)
        {
            return Err(err(
                "compression.memory",
                format!("{name} carries its own momentum residual; use \"auto\" or \"none\""),
            ));
        }
        Ok(())
    }

    /// Streaming DiLoCo's keys: fragments, delay and mix.
    fn validate_streaming(&self) -> Result<(), ConfigError> {
        let st = &self.strategy;
        let rounds = st.kind.steps_locally() && st.average == Average::Models;
        let streaming = st.fragments != 1 || st.delay != 0 || st.mix.is_some();
        if streaming && !rounds {
            let key = if st.fragments != 1 {
                "strategy.fragments"
            } else if st.delay != 0 {
                "strategy.delay"
            } else {
                "strategy.mix"
            };
            return Err(err(
                key,
                "streaming acts on the outer rounds of local steps (kind = \"local\" or \"celgc\", average = \"models\")",
            ));
        }
        if st.fragments == 0 {
            return Err(err("strategy.fragments", "must be at least 1 (1: the whole model in every round)"));
        }
        if st.fragments > st.period {
            return Err(err(
                "strategy.fragments",
                format!(
                    "{} fragments need a period of at least {} steps (fragment p has its round at step p·H/P of every period; period = {})",
                    st.fragments, st.fragments, st.period
                ),
            ));
        }
        if st.delay >= st.period {
            return Err(err(
                "strategy.delay",
                format!(
                    "a round overlapping {} steps would still be open at the fragment's next round; delay must be below the period ({})",
                    st.delay, st.period
                ),
            ));
        }
        if let Some(a) = st.mix.filter(|a| !(0.0..=1.0).contains(a)) {
            return Err(err("strategy.mix", format!("{a} is not in [0, 1] (α·θ_local + (1 − α)·θ_outer)")));
        }
        self.validate_overlap(rounds)
    }

    /// Eager and delayed outer steps (ALGORITHMS.md §2.3): a round through
    /// the whole next period, of the whole model, whose result is adopted.
    fn validate_overlap(&self, rounds: bool) -> Result<(), ConfigError> {
        let st = &self.strategy;
        if !st.overlap.whole_period() {
            return Ok(());
        }
        let name = st.overlap.name();
        let eager_per_fragment = st.overlap == Overlap::Eager && st.delay > 0;
        let why = if !rounds {
            "acts on the outer rounds of local steps (kind = \"local\" or \"celgc\", average = \"models\")"
                .to_string()
        } else if st.fragments > 1 && st.delay == 0 {
            format!("{name} rounds overlap the whole period, so with {} fragments every fragment's round would be in flight through the others'; use one fragment, or `delay` τ ≥ 1 for eager rounds per fragment (\"eager\" only)", st.fragments)
        } else if st.delay > 0 && !eager_per_fragment {
            format!("{name} rounds overlap the whole period already; leave `delay` at 0 (\"eager\" with a delay is eager per fragment)")
        } else if st.mix() != 0.0 {
            format!("{name} rounds adopt the worker's outer model; leave `mix` unset or 0")
        } else {
            return Ok(());
        };
        Err(err("strategy.overlap", format!("\"{name}\" {why}")))
    }

    /// The warm-ups of local updates: synchronous steps first, the outer
    /// step's warm-up and decay, the buffers' averaging.
    fn validate_warmups(&self, rounds: bool) -> Result<(), ConfigError> {
        let st = &self.strategy;
        let outer = st.outer();
        let model_rounds =
            "acts on the outer rounds of local steps (kind = \"local\" or \"celgc\", average = \"models\")";
        for (key, set) in [
            ("strategy.warmup_steps", st.warmup_steps > 0),
            ("strategy.sync.steps", st.sync.steps > 0),
            ("strategy.period_rule", st.period_rule != super::PeriodRule::Fixed),
            ("strategy.average_buffers", st.average_buffers),
            ("strategy.inner_state_every", st.inner_state_every > 0),
            ("strategy.outer.warmup_rounds", outer.warmup_rounds > 0),
            ("strategy.outer.decay_rounds", outer.decay_rounds > 0),
        ] {
            if set && !rounds {
                return Err(err(key, model_rounds));
            }
        }
        self.validate_phases()?;
        match (outer.decay_rounds, outer.rounds) {
            (0, Some(_)) => {
                Err(err("strategy.outer.rounds", "sets where `decay_rounds` ends; set decay_rounds too"))
            }
            (d, None) if d > 0 => Err(err(
                "strategy.outer.decay_rounds",
                "the decay covers the last rounds of the run: set `rounds`, the run's outer rounds",
            )),
            (d, Some(r)) if d > r => Err(err(
                "strategy.outer.decay_rounds",
                format!("{d} rounds of decay in a run of {r} rounds (`rounds`)"),
            )),
            _ => Ok(()),
        }
    }

    /// The plan of phases: the synchronous phase's configuration, checked
    /// as a run of `kind = "sync"` (its keys named under `strategy.sync`),
    /// and the period rule.
    fn validate_phases(&self) -> Result<(), ConfigError> {
        let st = &self.strategy;
        if st.warmup_steps > 0 && st.sync.steps > 0 {
            return Err(err(
                "strategy.warmup_steps",
                "is the older key of sync.steps (a dense phase); set one of them",
            ));
        }
        if st.sync.steps == 0 && st.sync != super::SyncPhase::default() {
            return Err(err(
                "strategy.sync.steps",
                "is 0: set the phase's steps, or leave [strategy.sync] out",
            ));
        }
        if let Some(sync) = self.sync_phase_config() {
            sync.validate().map_err(|e| {
                let key = match e.key.as_str() {
                    "compression.memory" => "strategy.sync.memory".to_string(),
                    "comm.topology" => "strategy.sync.topology".to_string(),
                    k => format!("strategy.sync.{k}"),
                };
                err(&key, e.problem)
            })?;
        }
        if let super::PeriodRule::Qsr { alpha, periods } = &st.period_rule {
            if !(alpha.is_finite() && *alpha > 0.0) {
                return Err(err("strategy.period_rule.alpha", format!("{alpha}: QSR's α must be positive")));
            }
            let first = periods.first().map(|&[b, _]| b);
            // Each segment begins at a boundary of the one before: a whole number of its periods on.
            let ascending = periods
                .windows(2)
                .all(|w| w[1][0] > w[0][0] && w[0][1] > 0 && (w[1][0] - w[0][0]).is_multiple_of(w[0][1]));
            if first.is_some_and(|b| b != st.sync_steps())
                || !ascending
                || periods.iter().any(|&[_, h]| h == 0)
            {
                return Err(err(
                    "strategy.period_rule.periods",
                    format!(
                        "{periods:?}: [boundary, period] segments, the first at step {} (the rounds' start), \
                         each a whole number of the last's periods on, periods ≥ 1; leave it out and let the \
                         trainer or LocalUpdates(lr_at=…) resolve it",
                        st.sync_steps()
                    ),
                ));
            }
        }
        if let super::PeriodRule::Doubling { at } = &st.period_rule {
            if at.is_empty() || at.windows(2).any(|w| w[0] > w[1]) {
                return Err(err(
                    "strategy.period_rule.at",
                    format!("{at:?}: the steps at which the period doubles, ascending, at least one"),
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
        let rounds = st.kind.steps_locally() && st.average == Average::Models;
        if st.average_at_epoch_end && !rounds {
            return Err(err(
                "strategy.average_at_epoch_end",
                "applies to the outer rounds of local steps (kind = \"celgc\" or \"local\", average = \"models\")",
            ));
        }
        let outer = st.outer();
        if !(outer.lr() > 0.0 && outer.lr().is_finite()) {
            return Err(err("strategy.outer.lr", format!("{} is not a positive learning rate", outer.lr())));
        }
        if !(0.0..1.0).contains(&outer.momentum()) {
            return Err(err("strategy.outer.momentum", format!("{} is not in [0, 1)", outer.momentum())));
        }
        if !(outer.averages() || rounds) {
            return Err(err(
                "strategy.outer",
                "an outer optimizer acts on the outer rounds of local steps (kind = \"local\" or \"celgc\", average = \"models\")",
            ));
        }
        self.validate_streaming()?;
        self.validate_warmups(rounds)?;
        if !st.kind.steps_locally() {
            return Ok(());
        }
        if st.average == Average::Gradients && st.period != 1 {
            return Err(err(
                "strategy.average",
                "averaging gradients (naive parallel clipping) needs period = 1",
            ));
        }
        if st.average == Average::Gradients && st.compress_change {
            return Err(err("strategy.compress_change", "applies to model averaging only"));
        }
        if !st.compress_change && !self.compressor.sends_values_as_they_are() {
            return Err(err(
                "strategy.compress_change",
                format!(
                    "local steps average models densely; to send the model change through compressor {} with error feedback, turn compress_change on (TOML: strategy.compress_change = true)",
                    self.compressor_name()
                ),
            ));
        }
        if st.average == Average::Models && self.combine() == Combine::MajorityVote {
            return Err(err(
                "compressor.name",
                format!(
                    "{} combines by majority vote, one sign per coordinate for every worker: no average of the model changes for a round to apply; pick a compressor that averages (topk, terngrad, qsgd, ...)",
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
    use gradcomp_compress::CompressorConfig;

    use super::*;
    use crate::config::Topology;

    /// Every compressor's default topology validates; a topology its
    /// messages cannot use is refused, naming `comm.topology` and the ones
    /// that work.
    #[test]
    fn a_topology_the_messages_cannot_use_is_refused() {
        for name in CompressorConfig::NAMES {
            let cfg = DataParallelConfig::new(CompressorConfig::named(name).unwrap());
            cfg.validate().unwrap_or_else(|e| panic!("{name}'s defaults: {e}"));
            let gathers = cfg.combine().per_worker();
            let agrees = cfg.combine() == Combine::InRounds;
            // The reduce-scatter takes averaged messages and dense values,
            // and refuses the compressors that select by their loss (eSGD).
            let scatters = matches!(cfg.combine(), Combine::Gather | Combine::DenseSum)
                && !cfg.compressor.declares(|m| m.needs_loss());
            for topology in
                [Topology::Allreduce, Topology::Allgather, Topology::ParameterServer, Topology::ReduceScatter]
            {
                let refused = (gathers && topology == Topology::Allreduce)
                    || (agrees && topology != Topology::Allreduce)
                    || (!scatters && topology == Topology::ReduceScatter);
                match cfg.clone().with_topology(topology).validate() {
                    Err(e) if refused => {
                        let text = e.to_string();
                        assert!(text.contains("comm.topology"), "{name} over {topology:?}: {text}");
                        let hint = if agrees || cfg.combine() == Combine::HalfSum {
                            "\"allreduce\""
                        } else {
                            "\"allgather\""
                        };
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
            (
                OuterConfig { name: Some(OuterKind::Sgd), lr: Some(f64::NAN), ..OuterConfig::default() },
                "strategy.outer.lr",
            ),
        ];
        for (outer, key) in bad {
            let e = local(outer).validate().unwrap_err().to_string();
            assert!(e.contains(key), "{outer:?}: {e}");
        }
        let sync = DataParallelConfig::new(CompressorConfig::named("dense").unwrap())
            .with_strategy(StrategyConfig::default().with_outer(OuterConfig::nesterov()));
        assert!(sync.validate().unwrap_err().to_string().contains("strategy.outer"));
    }

    #[test]
    fn streaming_keys_that_cannot_work_are_named() {
        use crate::config::{Average, OuterConfig, Overlap, StrategyConfig};
        let with = |name: &str, st: StrategyConfig| {
            DataParallelConfig::new(CompressorConfig::named(name).unwrap()).with_strategy(st).validate()
        };
        with("dense", StrategyConfig::local(8).with_streaming(4, 2).with_mix(0.25)).unwrap();
        with("fp4", StrategyConfig::local(8).with_compress_change(true).with_overlap(Overlap::Eager))
            .unwrap();
        // Eager rounds per fragment: a delay τ ≥ 1, θ_m adopted (mix 0 unless set).
        with(
            "fp4",
            StrategyConfig::local(8)
                .with_streaming(2, 1)
                .with_overlap(Overlap::Eager)
                .with_compress_change(true),
        )
        .unwrap();
        let mixed = StrategyConfig::local(8).with_mix(1.5);
        let nan = StrategyConfig::local(8).with_mix(f64::NAN);
        let sync_mix = StrategyConfig { mix: Some(0.5), ..Default::default() };
        let bad = [
            (StrategyConfig::local(0), "strategy.period"),
            (StrategyConfig::local(8).with_streaming(0, 0), "strategy.fragments"),
            (StrategyConfig::local(4).with_streaming(8, 0), "strategy.fragments"),
            (StrategyConfig::local(8).with_streaming(2, 8), "strategy.delay"),
            (StrategyConfig::local(8).with_streaming(2, 9), "strategy.delay"),
            (mixed, "strategy.mix"),
            (nan, "strategy.mix"),
            (StrategyConfig::default().with_streaming(2, 0), "strategy.fragments"),
            (StrategyConfig::default().with_streaming(1, 1), "strategy.delay"),
            (sync_mix, "strategy.mix"),
            (StrategyConfig::default().with_overlap(Overlap::Eager), "strategy.overlap"),
            (StrategyConfig::local(8).with_streaming(2, 0).with_overlap(Overlap::Eager), "strategy.overlap"),
            (
                StrategyConfig::local(8).with_streaming(1, 2).with_overlap(Overlap::Delayed),
                "strategy.overlap",
            ),
            (StrategyConfig::local(8).with_mix(0.5).with_overlap(Overlap::Eager), "strategy.overlap"),
            (
                StrategyConfig::local(8).with_streaming(2, 1).with_overlap(Overlap::Eager).with_mix(0.5),
                "strategy.overlap",
            ),
            (StrategyConfig { warmup_steps: 10, ..Default::default() }, "strategy.warmup_steps"),
            (StrategyConfig { average_buffers: true, ..Default::default() }, "strategy.average_buffers"),
            (
                StrategyConfig::local(8)
                    .with_outer(OuterConfig { decay_rounds: 4, ..OuterConfig::nesterov() }),
                "strategy.outer.decay_rounds",
            ),
            (
                StrategyConfig::local(8).with_outer(OuterConfig {
                    decay_rounds: 4,
                    rounds: Some(3),
                    ..OuterConfig::nesterov()
                }),
                "strategy.outer.decay_rounds",
            ),
            (
                StrategyConfig::local(8)
                    .with_outer(OuterConfig { rounds: Some(3), ..OuterConfig::nesterov() }),
                "strategy.outer.rounds",
            ),
            (
                StrategyConfig::celgc(1, 0.0)
                    .with_average(Average::Gradients)
                    .with_streaming(1, 0)
                    .with_mix(0.0),
                "strategy.mix",
            ),
        ];
        for (st, key) in bad {
            let e = with("dense", st.clone()).unwrap_err();
            assert_eq!(e.key, key, "{st:?}: {e}");
        }
        let e = with("signsgd", StrategyConfig::local(8).with_compress_change(true)).unwrap_err();
        assert_eq!(e.key, "compressor.name", "{e}");
        assert!(e.to_string().contains("majority vote"), "{e}");
    }

    #[test]
    fn local_updates_default_to_nesterov_and_celgc_to_averaging() {
        use crate::config::{OuterKind, StrategyConfig};
        assert_eq!(StrategyConfig::local(8).outer().kind(), OuterKind::Nesterov);
        assert_eq!(StrategyConfig::celgc(8, 0.0).outer().kind(), OuterKind::Sgd);
        let mut sgd = StrategyConfig::local(8);
        sgd.outer.name = Some(OuterKind::Sgd);
        assert!(sgd.outer().averages(), "an explicit sgd stays sgd at lr 1");
        assert_eq!(StrategyConfig::local(8).mix(), 0.0, "blocking rounds adopt θ_outer");
        assert_eq!(StrategyConfig::local(8).with_streaming(2, 1).mix(), crate::config::STREAMING_MIX);
    }

    #[test]
    fn a_dedicated_server_is_refused_naming_the_key() {
        let cfg = DataParallelConfig::new(CompressorConfig::terngrad())
            .with_topology(Topology::ParameterServer)
            .with_server(gradcomp_comm::ServerPlacement::Dedicated);
        let e = cfg.validate().unwrap_err();
        assert_eq!(e.key, "comm.server", "{e}");
    }
}
