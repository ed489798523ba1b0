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
use gradcomp_exchange::config::{OuterConfig, OuterKind, Overlap, StrategyConfig};
use gradcomp_exchange::strategy::{LocalUpdates, Strategy};
use gradcomp_exchange::{DataParallelConfig, GradientLayout};
use serde_json::Value;

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("an array of numbers").iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// A recorded model, its tensors in `names` order, flat.
fn flat(model: &Value, names: &[String]) -> Vec<f32> {
    names.iter().flat_map(|n| floats(&model[n])).collect()
}

/// Replays case `case`; `resume_after`: the strategy is saved after that
/// step and a fresh one restored from it.
fn check(case: &str, resume_after: Option<u64>) {
    let path = format!("{}/tests/vectors/eager-{case}.json", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let c = &v["config"];
    let names: Vec<String> =
        v["param_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    let layout = GradientLayout::new(names.iter().map(|n| {
        let shape = v["shapes"][n].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        (n.clone(), shape)
    }));
    let outer = OuterConfig {
        name: Some(if c["outer_nesterov"].as_bool().unwrap() { OuterKind::Nesterov } else { OuterKind::Sgd }),
        lr: c["outer_lr"].as_f64(),
        momentum: c["outer_momentum"].as_f64(),
        ..OuterConfig::default()
    };
    let overlap = match c["form"].as_str().unwrap() {
        "eager" => Overlap::Eager,
        "delayed" => Overlap::Delayed,
        other => panic!("form {other}"),
    };
    let st = StrategyConfig::local(c["H"].as_u64().unwrap()).with_outer(outer).with_overlap(overlap);
    let cfg = DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st);
    cfg.validate().unwrap();
    let workers = c["workers"].as_u64().unwrap() as usize;
    let init = flat(&v["init"], &names);
    let steps = c["inner_steps"].as_u64().unwrap();
    let mismatches = InProcessGroup::new(workers)
        .run(|mut comm| {
            let rank = comm.rank();
            let recorded = v["steps"][rank.to_string()].as_array().unwrap();
            let mut strategy = LocalUpdates::new(&cfg, &layout, workers).unwrap();
            let mut params = init.clone();
            strategy.averaging_mut().unwrap().average(0, &mut params, &mut comm).unwrap();
            let mut bad = Vec::new();
            for t in 1..=steps {
                let rec = &recorded[t as usize - 1];
                params = flat(&rec["before"], &names);
                let rounds = strategy.averaging_mut().unwrap();
                if rounds.due(t) {
                    rounds.average(t, &mut params, &mut comm).unwrap();
                }
                let want = flat(&rec["after"], &names);
                if params.iter().zip(&want).any(|(a, b)| a.to_bits() != b.to_bits()) {
                    let worst = params.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                    bad.push(format!("rank {rank} step {t}: off by up to {worst:e}"));
                }
                if Some(t) == resume_after {
                    let saved = strategy.state().unwrap();
                    strategy = LocalUpdates::new(&cfg, &layout, workers).unwrap();
                    strategy.restore(&saved).unwrap();
                }
            }
            // The worker's own outer model and momentum at the end.
            let state = strategy.state().unwrap();
            if state["outer.anchor"] != flat(&v["outer_models"][rank.to_string()], &names) {
                bad.push(format!("rank {rank}: the outer model at the end"));
            }
            if let Some(m) = v["momentum"][rank.to_string()].as_object() {
                // gradcomp keeps −m (the sign of the model change).
                let want: Vec<f32> = names.iter().flat_map(|n| floats(&m[n])).map(|x| -x).collect();
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
