//! gradcomp's PowerSGD against PyTorch's `powerSGD_hook`, step by step, on
//! the vectors `scripts/powersgd-vectors.py` recorded (tests/vectors/: two
//! workers, ranks 1 and 2, warm start and error feedback, the hook's own
//! starting Q; the torch version is in each file's `reference`). Two
//! PowerSGD instances stand for the two workers; their exchange rounds are
//! summed here as the allreduces would sum them, and gradcomp's own error
//! feedback memory carries each worker's residual. Tensors PowerSGD does not
//! compress are averaged, as the hook's allreduce averages them.

use gradcomp_compress::lowrank::{PowerSgd, PowerSgdConfig};
use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::{Compressor, Message, RngKey, UnitContext};
use serde_json::Value;

/// Float tolerance: the hook's matrix products and sums run in other orders.
fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 2e-5 * b.abs().max(1.0)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("an array of numbers").iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0.0f32, f32::max);
    assert!(got.iter().zip(want).all(|(&a, &b)| close(a, b)), "{what}: off by up to {worst} (relative)");
}

/// One compressed tensor on both workers: their PowerSGD and memories.
struct Compressed {
    workers: Vec<(PowerSgd, ErrorFeedback)>,
}

/// Sums the two workers' contributions to `round` and hands the sum back.
fn round(c: &mut Compressed, round: usize, acc: &[Vec<f32>], ctx: &UnitContext) {
    let mut sum: Option<Vec<f32>> = None;
    for ((p, _), x) in c.workers.iter_mut().zip(acc) {
        let mut part = Vec::new();
        if p.round_contribution(round, x, ctx, &mut part).is_some() {
            match &mut sum {
                None => sum = Some(part),
                Some(s) => s.iter_mut().zip(&part).for_each(|(s, v)| *s += v),
            }
        }
    }
    if let Some(sum) = sum {
        for (p, _) in &mut c.workers {
            p.round_result(round, &sum, 2);
        }
    }
}

fn check(file: &str) {
    let path = format!("{}/tests/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let rank = doc["rank"].as_u64().unwrap() as u32;
    let cfg = PowerSgdConfig { rank, start_iter: doc["start_iter"].as_u64().unwrap(), ..Default::default() };
    let compressed: Vec<&str> =
        doc["compressed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let shapes = doc["shapes"].as_object().unwrap();
    let mut states = std::collections::BTreeMap::new();
    for (name, shape) in shapes {
        let shape: Vec<usize> =
            shape.as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(
            cfg.compresses(&shape),
            compressed.contains(&name.as_str()),
            "{file}: {name}: which tensors compress"
        );
        if compressed.contains(&name.as_str()) {
            let q0 = floats(&doc["q0"][name]);
            let workers = (0..2)
                .map(|_| {
                    let mut p = PowerSgd::new(&cfg, &shape);
                    p.set_q(&q0);
                    (p, ErrorFeedback::new(ResidualForm::Raw))
                })
                .collect();
            states.insert(name.clone(), Compressed { workers });
        }
    }
    for (step, entry) in doc["steps"].as_array().unwrap().iter().enumerate() {
        let ctx = UnitContext { key: RngKey::new(0, 0, step as u64, 0), loss: None };
        for name in shapes.keys() {
            let inputs: Vec<Vec<f32>> = (0..2).map(|w| floats(&entry["inputs"][w][name])).collect();
            let want = floats(&entry["outputs"][name]);
            let what = format!("{file}: step {step}, {name}");
            let Some(c) = states.get_mut(name) else {
                let avg: Vec<f32> = inputs[0].iter().zip(&inputs[1]).map(|(a, b)| (a + b) / 2.0).collect();
                assert_close(&what, &avg, &want);
                continue;
            };
            let acc: Vec<Vec<f32>> = c
                .workers
                .iter_mut()
                .zip(&inputs)
                .map(|((_, ef), g)| ef.compensate(g, 1.0).to_vec())
                .collect();
            for r in 0..2 {
                round(c, r, &acc, &ctx);
            }
            let mut msgs = Vec::new();
            for ((p, ef), x) in c.workers.iter_mut().zip(&acc) {
                let mut msg = Message::default();
                p.compress(x, &ctx, &mut msg);
                ef.update(&msg);
                msgs.push(msg);
            }
            assert_eq!(msgs[0], msgs[1], "{what}: the workers' aggregates differ");
            let mut out = vec![0.0; want.len()];
            msgs[0].decompress_into(&mut out);
            assert_close(&format!("{what}: output"), &out, &want);
            if let Some(p) = entry.get("p") {
                let (got_p, got_q) = c.workers[0].0.factors();
                assert_close(&format!("{what}: P"), got_p, &floats(&p[name]));
                assert_close(&format!("{what}: Q"), got_q, &floats(&entry["q"][name]));
            }
        }
    }
}

#[test]
fn rank_1_agrees_with_pytorchs_hook_step_by_step() {
    check("powersgd-rank1.json");
}

#[test]
fn rank_2_agrees_with_pytorchs_hook_step_by_step() {
    check("powersgd-rank2.json");
}
