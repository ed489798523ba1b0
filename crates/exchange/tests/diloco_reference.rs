//! gradcomp's local-update rounds against torchft's `DiLoCo`, step by step,
//! on the vectors `scripts/diloco-vectors.py` recorded (tests/vectors/
//! diloco-*.json: torchft's own class with its real Manager and lighthouse,
//! two replica groups over gloo on the CPU; versions in each file's
//! `reference`). Cases: DiLoCo with Nesterov and with plain averaging,
//! Streaming with two fragments at delays 0, 1 and 2 and mixing 0 and 0.5,
//! and one fragment with a delay.
//!
//! Each step hands both workers' recorded models (after the inner step,
//! before torchft's hook) to the core's rounds on two in-process workers,
//! and the models they leave must be torchft's, bit for bit: the outer step
//! and the mix use torch's fused multiply-adds (strategy/outer.rs), the
//! average is the sum divided by N as torchft's Manager takes it. The
//! fragments are gradcomp's own cut by size, which the vectors' model makes
//! the same as torchft's ({a.weight, a.bias}, {b.w}).

use gradcomp_comm::{Collective, InProcessGroup};
use gradcomp_compress::CompressorConfig;
use gradcomp_exchange::config::{OuterConfig, OuterKind, StrategyConfig};
use gradcomp_exchange::strategy::OuterRounds;
use gradcomp_exchange::{DataParallelConfig, GradientLayout};
use serde_json::Value;

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("an array of numbers").iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// A recorded model, its tensors in `names` order, flat.
fn flat(model: &Value, names: &[String]) -> Vec<f32> {
    names.iter().flat_map(|n| floats(&model[n])).collect()
}

fn check(case: &str) {
    let path = format!("{}/tests/vectors/diloco-{case}.json", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let c = &v["config"];
    let names: Vec<String> =
        v["param_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    let layout = GradientLayout::new(names.iter().map(|n| {
        let shape = v["shapes"][n].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        (n.clone(), shape)
    }));
    let fragments = c["fragments"].as_array().unwrap().len() as u64;
    let outer = OuterConfig {
        name: Some(if c["outer_nesterov"].as_bool().unwrap() { OuterKind::Nesterov } else { OuterKind::Sgd }),
        lr: c["outer_lr"].as_f64(),
        momentum: c["outer_momentum"].as_f64(),
        ..OuterConfig::default()
    };
    let st = StrategyConfig::local(c["H"].as_u64().unwrap())
        .with_outer(outer)
        .with_streaming(fragments, c["fragment_sync_delay"].as_u64().unwrap())
        .with_mix(c["fragment_update_alpha"].as_f64().unwrap());
    let cfg = DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st);
    let init = flat(&v["init"], &names);
    let steps = c["inner_steps"].as_u64().unwrap();
    let mismatches = InProcessGroup::new(2)
        .run(|mut comm| {
            let rank = comm.rank();
            let recorded = v["steps"][rank.to_string()].as_array().unwrap();
            let mut rounds = OuterRounds::new(&cfg, &layout, 2, false).unwrap();
            let mut params = init.clone();
            rounds.start(0, &params, &mut comm).unwrap();
            let mut bad = Vec::new();
            let mut events = 0;
            for t in 1..=steps {
                let rec = &recorded[t as usize - 1];
                params = flat(&rec["before"], &names);
                if rounds.schedule().due(t) {
                    events += 1;
                    rounds.start(t, &params, &mut comm).unwrap();
                    rounds.merge(t, &mut params);
                }
                let want = flat(&rec["after"], &names);
                if params.iter().zip(&want).any(|(a, b)| a.to_bits() != b.to_bits()) {
                    let worst = params.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                    bad.push(format!("rank {rank} step {t}: off by up to {worst:e}"));
                }
            }
            // torchft's hook acted (prepared or performed) at these steps.
            let acted = v["sync_events"][rank.to_string()].as_array().unwrap();
            let mut torchft_steps: Vec<u64> =
                acted.iter().map(|e| e["inner_step"].as_u64().unwrap()).collect();
            torchft_steps.dedup();
            if torchft_steps.len() != events {
                bad.push(format!("rank {rank}: {events} steps with rounds, torchft's {torchft_steps:?}"));
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
fn diloco_nesterov_is_torchfts() {
    check("h4-nesterov");
}

#[test]
fn diloco_averaging_is_torchfts() {
    check("h4-avg");
}

#[test]
fn streaming_without_delay_is_torchfts() {
    check("stream-h4-d0-a0");
}

#[test]
fn streaming_with_a_delay_and_mixing_is_torchfts() {
    check("stream-h4-d1-a05");
}

#[test]
fn streaming_with_a_two_step_delay_is_torchfts() {
    check("stream-h6-d2-a0");
}

#[test]
fn one_fragment_with_a_delay_and_mixing_is_torchfts() {
    check("h4-d1-a05");
}
