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
use gradcomp_exchange::config::StrategyConfig;
use gradcomp_exchange::strategy::OuterRounds;
use gradcomp_exchange::DataParallelConfig;

mod vectors_json;
use vectors_json::Case;

fn check(case: &str) {
    let vectors = Case::read(&format!("diloco-{case}.json"));
    let (v, layout) = (&vectors.v, &vectors.layout);
    let c = &v["config"];
    let fragments = c["fragments"].as_array().unwrap().len() as u64;
    let outer = vectors.outer();
    let st = StrategyConfig::local(c["H"].as_u64().unwrap())
        .with_outer(outer)
        .with_streaming(fragments, c["fragment_sync_delay"].as_u64().unwrap())
        .with_mix(c["fragment_update_alpha"].as_f64().unwrap());
    let cfg = DataParallelConfig::new(CompressorConfig::named("dense").unwrap()).with_strategy(st);
    let init = vectors.flat(&v["init"]);
    let steps = c["inner_steps"].as_u64().unwrap();
    let mismatches = InProcessGroup::new(2)
        .run(|mut comm| {
            let rank = comm.rank();
            let recorded = v["steps"][rank.to_string()].as_array().unwrap();
            let mut rounds = OuterRounds::new(&cfg, layout, 2, false).unwrap();
            let mut params = init.clone();
            rounds.start(0, &params, &mut comm).unwrap();
            let mut bad = Vec::new();
            let mut events = 0;
            for t in 1..=steps {
                let rec = &recorded[t as usize - 1];
                params = vectors.flat(&rec["before"]);
                if rounds.schedule().due(t) {
                    events += 1;
                    rounds.start(t, &params, &mut comm).unwrap();
                    rounds.merge(t, &mut params);
                }
                let want = vectors.flat(&rec["after"]);
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
