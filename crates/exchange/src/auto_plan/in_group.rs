//! `plan = "auto"` among a group's workers, for a front that holds a
//! [`Collective`] (the burn handle's users, before `DataParallel::init`):
//! the link probed over the group where none is given, the plan chosen on
//! rank 0 (its codec timings and its measured step) and handed to every rank
//! in one broadcast, so that all run one plan whatever each measured.

use gradcomp_comm::{Collective, CommError, NetworkModel};
use gradcomp_compress::CompressorConfig;
use serde::{Deserialize, Serialize};

use super::{choose_here, probe_link, AutoPlan, PlanInputs};
use crate::config::{StrategyConfig, Topology};
use crate::{DataParallelConfig, ExchangeError};

/// What rank 0 chose, as it travels: the plan's keys and its lines.
#[derive(Serialize, Deserialize)]
struct Chosen {
    strategy: StrategyConfig,
    compressor: CompressorConfig,
    topology: Topology,
    local_step_seconds: f64,
    lines: Vec<String>,
}

/// Resolves `cfg`'s `strategy.plan = "auto"` on every worker of `comm`
/// (all call it at the same point, as any collective): `link` where given,
/// else a probe round over `comm` ([`probe_link`]); rank 0 chooses from its
/// `step_seconds` (this worker's communication-free step), `shapes` (the
/// model's trainable tensors, in order) and `total_steps` (the run's inner
/// steps), and every rank applies rank 0's plan ([`AutoPlan::apply`]:
/// `strategy.plan` becomes `given`). Returns the lines that explain it (the
/// inputs, then each decision with its reason), the same on every rank.
/// Errors: the rule's inputs refused (`shapes` empty, `step_seconds` not
/// positive, `total_steps` 0, one worker), a probe that fits no link, or
/// the group's failure.
pub fn resolve_in_group(
    cfg: &mut DataParallelConfig,
    comm: &mut dyn Collective,
    shapes: &[Vec<usize>],
    step_seconds: f64,
    link: Option<NetworkModel>,
    total_steps: u64,
) -> Result<Vec<String>, ExchangeError> {
    if comm.world_size() < 2 || shapes.is_empty() || !(step_seconds > 0.0 && step_seconds.is_finite()) {
        return Err(ExchangeError::Usage(format!(
            "plan = \"auto\": needs 2 workers or more ({}), the model's tensors ({} given) and a positive \
             measured step ({step_seconds} s)",
            comm.world_size(),
            shapes.len()
        )));
    }
    if total_steps == 0 {
        return Err(ExchangeError::Usage(
            "plan = \"auto\": total_steps is 0; give the run's inner steps".into(),
        ));
    }
    let (link, probed) = match link {
        Some(l) => (l, false),
        None => (probe_link(comm)?, true),
    };
    let mut wire = Vec::new();
    if comm.rank() == 0 {
        let inputs = PlanInputs {
            step_seconds,
            link,
            workers: comm.world_size(),
            shapes: shapes.to_vec(),
            total_steps,
        };
        let plan = choose_here(&inputs);
        let lines = plan.explain(&inputs, "rank 0's, measured", if probed { " (probed)" } else { "" });
        let chosen = Chosen {
            strategy: plan.strategy,
            compressor: plan.compressor,
            topology: plan.topology,
            local_step_seconds: plan.local_step_seconds,
            lines,
        };
        wire = serde_json::to_vec(&chosen).expect("a plan serializes");
    }
    comm.broadcast(&mut wire, 0)?;
    let chosen: Chosen = serde_json::from_slice(&wire).map_err(|e| {
        ExchangeError::Comm(CommError::Mismatch { detail: format!("rank 0's plan did not decode: {e}") })
    })?;
    let plan = AutoPlan {
        strategy: chosen.strategy,
        compressor: chosen.compressor,
        topology: chosen.topology,
        decisions: Vec::new(),
        local_step_seconds: chosen.local_step_seconds,
    };
    plan.apply(cfg);
    Ok(chosen.lines)
}

#[cfg(test)]
mod tests {
    use gradcomp_comm::InProcessGroup;

    use super::*;
    use crate::config::PlanChoice;

    fn auto() -> DataParallelConfig {
        let strategy = StrategyConfig { plan: PlanChoice::Auto, ..StrategyConfig::local(16) };
        DataParallelConfig { strategy, ..Default::default() }
    }

    /// Each rank measures another step; all take rank 0's plan, whose
    /// keys replace `auto` so the handle can be built from it.
    #[test]
    fn every_worker_takes_rank_0s_plan_with_the_link_given_or_probed() {
        let shapes = vec![vec![64, 32], vec![32], vec![32, 10]];
        for link in [Some(NetworkModel::from_bits_per_second(1e8, 1e-4)), None] {
            let out = InProcessGroup::new(3)
                .run(|mut c| {
                    let mut cfg = auto();
                    let step = 0.01 * (c.rank() + 1) as f64;
                    let lines =
                        resolve_in_group(&mut cfg, &mut c, &shapes, step, link.clone(), 2000).unwrap();
                    (cfg, lines)
                })
                .unwrap();
            let (first, lines) = out[0].as_ref().unwrap();
            assert_eq!(first.strategy.plan, PlanChoice::Given);
            assert!(first.validate().is_ok(), "{:?}", first.validate());
            assert!(lines[0].contains("step 10.0 ms (rank 0's"), "{lines:?}");
            assert_eq!(lines[0].contains("(probed)"), link.is_none(), "{lines:?}");
            assert!(lines.len() > 2, "each decision on a line: {lines:?}");
            for r in &out {
                let (cfg, l) = r.as_ref().unwrap();
                assert_eq!((cfg, l), (first, lines), "one plan on every rank");
            }
        }
    }

    #[test]
    fn bad_inputs_are_refused_on_every_rank_before_any_collective() {
        let shapes = vec![vec![8]];
        let out = InProcessGroup::new(2)
            .run(|mut c| {
                let mut cfg = auto();
                [
                    resolve_in_group(&mut cfg, &mut c, &[], 0.01, None, 10),
                    resolve_in_group(&mut cfg, &mut c, &shapes, 0.0, None, 10),
                    resolve_in_group(&mut cfg, &mut c, &shapes, f64::NAN, None, 10),
                    resolve_in_group(&mut cfg, &mut c, &shapes, 0.01, None, 0),
                ]
                .map(|r| r.unwrap_err().to_string())
            })
            .unwrap();
        for errs in out {
            let errs = errs.unwrap();
            assert!(errs[0].contains("tensors (0 given)"), "{errs:?}");
            assert!(errs[1].contains("positive"), "{errs:?}");
            assert!(errs[2].contains("positive"), "{errs:?}");
            assert!(errs[3].contains("total_steps"), "{errs:?}");
        }
    }
}
