//! gradcomp's eager and delayed outer steps (ALGORITHMS.md §2.3) against
//! the paper's algorithm written in plain torch (`scripts/eager-vectors.py`,
//! committed before this implementation; tests/vectors/eager-*.json: three
//! workers, torch.optim.SGD as each worker's outer optimizer).
//!
//! Each step hands every worker's recorded model after its inner step to
//! the core's local updates on three in-process workers, whose rounds run
//! on the round thread (the in-process group has a second channel), and
//! the models they leave must be the reference's bit for bit: the eager
//! step is computed in the reference's order (ALGORITHMS.md §2.3), the
//! outer step with torch's fused multiply-adds. A second run saves the
//! strategy in the middle of a period, while a round is in flight, and
//! resumes a fresh one from it: the models must still be the reference's.

use gradcomp_comm::{Collective, InProcessGroup};
use gradcomp_compress::CompressorConfig;
use gradcomp_exchange::config::{Overlap, StrategyConfig};
use gradcomp_exchange::strategy::{LocalUpdates, Strategy};
use gradcomp_exchange::DataParallelConfig;

mod vectors_json;
use vectors_json::Case;

/// Replays case `case`; `resume_after`: the strategy is saved after that
/// step and a fresh one restored from it.
fn check(case: &str, resume_after: Option<u64>) {
    let vectors = Case::read(&format!("eager-{case}.json"));
    let (v, layout) = (&vectors.v, &vectors.layout);
    let c = &v["config"];
    let outer = vectors.outer();
    let overlap = match c["form"].as_str().unwrap() {
        "eager" => Overlap::Eager,
        "delayed" => Overlap::Delayed,
        other => panic!("form {other}"),
    };
    let st = StrategyConfig::local(c["H"].as_u64().unwrap()).with_outer(outer).with_overlap(overlap);
    let cfg = DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st);
    cfg.validate().unwrap();
    let workers = c["workers"].as_u64().unwrap() as usize;
    let init = vectors.flat(&v["init"]);
    let steps = c["inner_steps"].as_u64().unwrap();
    let mismatches = InProcessGroup::new(workers)
        .run(|mut comm| {
            let rank = comm.rank();
            let recorded = v["steps"][rank.to_string()].as_array().unwrap();
            let mut strategy = LocalUpdates::new(&cfg, layout, workers).unwrap();
            let mut params = init.clone();
            strategy.averaging_mut().unwrap().average(0, &mut params, &mut comm).unwrap();
            let mut bad = Vec::new();
            for t in 1..=steps {
                let rec = &recorded[t as usize - 1];
                params = vectors.flat(&rec["before"]);
                let rounds = strategy.averaging_mut().unwrap();
                if rounds.due(t) {
                    rounds.average(t, &mut params, &mut comm).unwrap();
                }
                let want = vectors.flat(&rec["after"]);
                if params.iter().zip(&want).any(|(a, b)| a.to_bits() != b.to_bits()) {
                    let worst = params.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                    bad.push(format!("rank {rank} step {t}: off by up to {worst:e}"));
                }
                if Some(t) == resume_after {
                    let saved = strategy.state().unwrap();
                    strategy = LocalUpdates::new(&cfg, layout, workers).unwrap();
                    strategy.restore(&saved).unwrap();
                }
            }
            // The worker's own outer model and momentum at the end.
            let state = strategy.state().unwrap();
            if state["outer.anchor"] != vectors.flat(&v["outer_models"][rank.to_string()]) {
                bad.push(format!("rank {rank}: the outer model at the end"));
            }
            let m = &v["momentum"][rank.to_string()];
            if m.is_object() {
                // gradcomp keeps −m (the sign of the model change).
                let want: Vec<f32> = vectors.flat(m).into_iter().map(|x| -x).collect();
                if state["outer.momentum"] != want {
                    bad.push(format!("rank {rank}: the outer momentum at the end"));
                }
            }
            bad
        })
        .unwrap()
        .into_iter()
        .flat_map(Result::unwrap)
        .collect::<Vec<_>>();
    assert!(mismatches.is_empty(), "{case} ({}):\n{}", v["reference"], mismatches.join("\n"));
}

#[test]
fn eager_outer_steps_with_nesterov_are_the_papers() {
    check("eager-nesterov", None);
}

#[test]
fn eager_outer_steps_with_averaging_are_the_papers() {
    check("eager-sgd", None);
}

#[test]
fn delayed_outer_steps_are_the_papers() {
    check("delayed-nesterov", None);
}

#[test]
fn a_resume_while_a_round_is_in_flight_continues_bit_for_bit() {
    // H 4: after step 6 the round started at step 4 is in flight (eager)
    // or its average pending (delayed) until step 8.
    check("eager-nesterov", Some(6));
    check("delayed-nesterov", Some(6));
    // Right at a round's step: the round just started is in flight.
    check("eager-nesterov", Some(8));
}
