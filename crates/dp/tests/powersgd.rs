//! PowerSGD through the whole exchange (the plan's units, the two agreement
//! rounds over the allreduce, error feedback, the optimizer) against PyTorch's
//! `powerSGD_hook` on the vectors `scripts/powersgd-vectors.py` recorded: two
//! in-process workers whose model has the recorded parameters' shapes, fed
//! the recorded gradients, must apply the hook's outputs step by step. The
//! compressor-level check is `gradcomp-compress`'s `powersgd_reference`.

use burn::module::{Module, Param};
use burn::optim::SgdConfig;
use burn::tensor::{Device, Tensor};
use gradcomp_comm::InProcessGroup;
use gradcomp_compress::lowrank::PowerSgdConfig;
use gradcomp_compress::CompressorConfig;
use gradcomp_dp::{params, DataParallelConfig, InitDataParallel};
use serde_json::Value;

/// The recorded parameters, named as the vectors name them less the dots.
#[derive(Module, Debug)]
struct Recorded {
    fc_weight: Param<Tensor<2>>,
    fc_bias: Param<Tensor<1>>,
    conv_weight: Param<Tensor<4>>,
    tiny: Param<Tensor<2>>,
}

fn recorded(device: &Device) -> Recorded {
    Recorded {
        fc_weight: Param::from_tensor(Tensor::zeros([16, 12], device)),
        fc_bias: Param::from_tensor(Tensor::zeros([16], device)),
        conv_weight: Param::from_tensor(Tensor::zeros([6, 3, 3, 3], device)),
        tiny: Param::from_tensor(Tensor::zeros([2, 3], device)),
    }
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("an array of numbers").iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// The vectors' name of a unit (`fc_weight` → `fc.weight`).
fn vector_name(unit: &str) -> String {
    let leaf = unit.rsplit('.').next().unwrap_or(unit);
    leaf.replacen('_', ".", 1)
}

/// Each worker's applied updates, step by step, in the layout's order.
fn updates(doc: &Value) -> Vec<Vec<Vec<f32>>> {
    let cfg = PowerSgdConfig {
        rank: doc["rank"].as_u64().unwrap() as u32,
        start_iter: doc["start_iter"].as_u64().unwrap(),
        ..Default::default()
    };
    let device = gradcomp_dp::default_device();
    let model = recorded(&device);
    InProcessGroup::new(2)
        .run(|c| {
            let rank = gradcomp_comm::Collective::rank(&c);
            let dp_cfg =
                DataParallelConfig::new(CompressorConfig::Powersgd(cfg.clone())).with_checksum_every(0);
            let (mut dp, mut model) = dp_cfg.init(c, model.clone()).unwrap();
            // The hook's starting Q, where gradcomp would draw its own.
            let mut state = dp.state().unwrap();
            for unit in dp.units() {
                if let Some(q0) = doc["q0"].get(vector_name(&unit.name)) {
                    let key =
                        state.buffers.keys().find(|k| k.ends_with(&format!("compressor.{}.0", unit.id)));
                    state.buffers.insert(key.expect("PowerSGD's Q in the state").clone(), floats(q0));
                }
            }
            dp.restore(&state).unwrap();
            let names: Vec<String> = dp.layout().slots().iter().map(|s| vector_name(&s.name)).collect();
            let mut optim = SgdConfig::new().init();
            let mut applied = Vec::new();
            for entry in doc["steps"].as_array().unwrap() {
                let grad: Vec<f32> = names.iter().flat_map(|n| floats(&entry["inputs"][rank][n])).collect();
                let mut before = Vec::new();
                params::read_params(&model, &mut before);
                let grads = params::grads_params(&model, &grad);
                model = dp.step(model, (grads, 1.0), &mut optim, 1.0).unwrap();
                let mut after = Vec::new();
                params::read_params(&model, &mut after);
                applied.push(before.iter().zip(&after).map(|(b, a)| b - a).collect());
            }
            (names, applied)
        })
        .unwrap()
        .into_iter()
        .map(|r| {
            let (names, applied): (Vec<String>, Vec<Vec<f32>>) = r.unwrap();
            assert_eq!(names, ["fc.weight", "fc.bias", "conv.weight", "tiny"]);
            applied
        })
        .collect()
}

fn check(file: &str) {
    let path = format!("{}/../compress/tests/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let workers = updates(&doc);
    assert_eq!(workers[0], workers[1], "{file}: the replicas applied different updates");
    for (step, (got, entry)) in workers[0].iter().zip(doc["steps"].as_array().unwrap()).enumerate() {
        let want: Vec<f32> = ["fc.weight", "fc.bias", "conv.weight", "tiny"]
            .iter()
            .flat_map(|n| floats(&entry["outputs"][n]))
            .collect();
        assert_eq!(got.len(), want.len());
        // The hook's products and sums run in other orders, and the update is
        // read back as a difference of parameters.
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0.0, f32::max);
        assert!(
            worst <= 1e-5,
            "{file}: step {step}: the applied update is off the hook's by {worst} (relative)"
        );
    }
}

#[test]
fn rank_1_through_the_exchange_applies_pytorchs_outputs() {
    check("powersgd-rank1.json");
}

#[test]
fn rank_2_through_the_exchange_applies_pytorchs_outputs() {
    check("powersgd-rank2.json");
}
