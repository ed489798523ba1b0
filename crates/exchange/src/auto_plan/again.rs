//! `plan = "auto"` deciding again while the run goes (ALGORITHMS.md §2.5),
//! the same for both fronts: at a period's end rank 0 takes the median of
//! the inner steps measured since the last decision; where it moved from the
//! step the plan was chosen for by more than [`DRIFT_MARGIN`], the rule
//! decides H again ([`replan_period`]: route, fragments and τ kept) and
//! every rank learns the new H in one 16-byte broadcast, so all take it from
//! the same boundary.

use gradcomp_comm::{Collective, CommError};

use super::{drifted, replan_period, PlanCosts, PlanInputs, DRIFT_MARGIN};
use crate::{DataParallelConfig, ExchangeError, Topology};

/// The fewest inner steps measured before a decision: fewer say too little
/// about the step (its first steps warm caches up).
pub const MIN_SAMPLES: usize = 4;

/// A running `auto` plan: the inputs it was chosen for, the step moving
/// with each decision, and the codecs' costs on the model, measured on rank
/// 0 at its first decision and kept (they do not move with the step; timing
/// them at every decision kept the other workers waiting at the broadcast).
pub struct Replan {
    pub inputs: PlanInputs,
    costs: Option<PlanCosts>,
}

/// What a decision gave every rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decided {
    /// The new period, where it changed (the same on every rank).
    pub period: Option<u64>,
    /// Rank 0's line saying why (a decision taken, whether H changed or
    /// not); `None` on the other ranks and where nothing was decided.
    pub line: Option<String>,
}

impl Replan {
    pub fn new(inputs: PlanInputs) -> Self {
        Replan { inputs, costs: None }
    }

    /// At the period's end at inner step `boundary`: every rank calls it at
    /// the same boundary (it broadcasts) with its own inner steps' seconds
    /// since the last decision (`times`: the time between steps, the
    /// rounds' own waits left out); rank 0's decide. `cfg` is the running
    /// configuration, its period `period`. The caller applies a changed
    /// period from `boundary` (`LocalUpdates::set_period_from`).
    pub fn decide(
        &mut self,
        boundary: u64,
        times: &[f64],
        period: u64,
        cfg: &DataParallelConfig,
        comm: &mut dyn Collective,
    ) -> Result<Decided, ExchangeError> {
        let mut decided = Decided::default();
        let mut wire = Vec::new();
        if comm.rank() == 0 && times.len() >= MIN_SAMPLES {
            let measured = crate::predict::median(times.to_vec());
            if drifted(self.inputs.step_seconds, measured) {
                let planned = self.inputs.step_seconds;
                let inputs = PlanInputs { step_seconds: measured, ..self.inputs.clone() };
                let topology = cfg.topology.unwrap_or(Topology::Allgather);
                let costs = self.costs.get_or_insert_with(|| PlanCosts::measure(&inputs.shapes));
                let (h, why) = replan_period(&inputs, costs, &cfg.strategy, topology);
                decided.line = Some(format!(
                    "at inner step {boundary} the step measured {:.1} ms against the plan's {:.1} ms (more than \
                     {:.0}% apart): {why}",
                    measured * 1e3,
                    planned * 1e3,
                    DRIFT_MARGIN * 100.0
                ));
                wire.extend_from_slice(&(if h != period { h } else { 0 }).to_le_bytes());
                wire.extend_from_slice(&measured.to_le_bytes());
            }
        }
        comm.broadcast(&mut wire, 0)?;
        match wire.len() {
            0 => {}
            16 => {
                let h = u64::from_le_bytes(wire[..8].try_into().expect("8 bytes"));
                self.inputs.step_seconds = f64::from_le_bytes(wire[8..].try_into().expect("8 bytes"));
                decided.period = (h > 0).then_some(h);
            }
            n => {
                let detail = format!("rank 0's decision on the period came as {n} bytes, not 16");
                return Err(ExchangeError::Comm(CommError::Mismatch { detail }));
            }
        }
        Ok(decided)
    }
}

#[cfg(test)]
mod tests {
    use gradcomp_comm::{InProcessGroup, NetworkModel};

    use super::*;
    use crate::config::StrategyConfig;

    fn inputs(step: f64) -> PlanInputs {
        PlanInputs {
            step_seconds: step,
            link: NetworkModel::from_bits_per_second(1e8, 1e-4),
            workers: 3,
            // The LSTM's embedding and its decoder (4 MB of f32 values a round).
            shapes: vec![vec![10_000, 200], vec![800, 200], vec![800], vec![10_000]],
            total_steps: 4000,
        }
    }

    /// A plan for 1 s steps whose steps take 1 ms: rank 0 decides again and
    /// every rank learns one longer period; steps as planned, or too few
    /// measured, decide nothing.
    #[test]
    fn a_drifted_step_gives_every_rank_rank_0s_period() {
        let cfg = DataParallelConfig { strategy: StrategyConfig::local(16), ..Default::default() };
        let out = InProcessGroup::new(3)
            .run(|mut c| {
                let mut replan = Replan::new(inputs(1.0));
                // Each rank measures its own steps; only rank 0's count.
                let own = vec![0.001 * (1 + c.rank()) as f64; 8];
                let fast = replan.decide(32, &own, 16, &cfg, &mut c).unwrap();
                let step_after = replan.inputs.step_seconds;
                let steady = replan.decide(48, &[0.001; 8], fast.period.unwrap_or(16), &cfg, &mut c).unwrap();
                let few = Replan::new(inputs(1.0)).decide(64, &[0.001; 3], 16, &cfg, &mut c).unwrap();
                (fast, step_after, steady, few)
            })
            .unwrap();
        let (first, ..) = out[0].as_ref().unwrap();
        let h =
            first.period.unwrap_or_else(|| panic!("a step 1000× faster takes a longer period: {first:?}"));
        assert!(h > 16, "{first:?}");
        assert!(
            first.line.as_ref().unwrap().contains("at inner step 32 the step measured 1.0 ms"),
            "{first:?}"
        );
        for (r, o) in out.iter().enumerate() {
            let (fast, step_after, steady, few) = o.as_ref().unwrap();
            assert_eq!(fast.period, Some(h), "rank {r}");
            assert_eq!(fast.line.is_some(), r == 0, "rank {r}: rank 0 says why");
            assert_eq!(*step_after, 0.001, "rank {r}: the plan's step is rank 0's measured one");
            assert_eq!(*steady, Decided::default(), "rank {r}: within the margin, nothing decided");
            assert_eq!(*few, Decided::default(), "rank {r}: fewer than {MIN_SAMPLES} steps measured");
        }
    }
}
