//! Reading the reference vectors' JSON (tests/vectors/*.json, written by
//! `scripts/diloco-vectors.py` and `scripts/eager-vectors.py` in one
//! format), shared by the tests that replay them.

use gradcomp_exchange::config::{OuterConfig, OuterKind};
use gradcomp_exchange::GradientLayout;
use serde_json::Value;

/// A recorded case: its JSON, its tensors' names in order and their layout.
pub struct Case {
    pub v: Value,
    pub names: Vec<String>,
    pub layout: GradientLayout,
}

impl Case {
    /// tests/vectors/`file`.
    pub fn read(file: &str) -> Self {
        let path = format!("{}/tests/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let names: Vec<String> =
            v["param_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
        let layout = GradientLayout::new(names.iter().map(|n| {
            let shape =
                v["shapes"][n].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
            (n.clone(), shape)
        }));
        Self { v, names, layout }
    }

    /// A recorded model, its tensors in name order, flat.
    pub fn flat(&self, model: &Value) -> Vec<f32> {
        self.names.iter().flat_map(|n| floats(&model[n])).collect()
    }

    /// The outer optimizer of the case's `config` (torch's SGD settings).
    pub fn outer(&self) -> OuterConfig {
        let c = &self.v["config"];
        OuterConfig {
            name: Some(if c["outer_nesterov"].as_bool().unwrap() {
                OuterKind::Nesterov
            } else {
                OuterKind::Sgd
            }),
            lr: c["outer_lr"].as_f64(),
            momentum: c["outer_momentum"].as_f64(),
            ..OuterConfig::default()
        }
    }
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("an array of numbers").iter().map(|x| x.as_f64().unwrap() as f32).collect()
}
