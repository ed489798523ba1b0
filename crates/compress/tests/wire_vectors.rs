//! The wire bytes every single-message compressor makes from fixed
//! gradients, and their combined result, pinned in tests/vectors/wire.json:
//! the file the Python package's tests read to check that bytes made in
//! Python decode in Rust and the reverse (crates/py/tests/test_bytes.py).
//!
//! A worker's step is the protocol of `compressor.rs`: the memory
//! compensates, the compressor compresses, the memory records, and the
//! message is encoded with the configuration's `message_tag` as its unit
//! (what the bytes API does); the seed 1, the worker's rank and the step
//! key its random stream. `GRADCOMP_WRITE_VECTORS=1` rewrites the file
//! (then commit it, and say why the bytes changed).

use gradcomp_compress::aggregate::combine_encoded;
use gradcomp_compress::memory::{MemoryKind, ResidualForm};
use gradcomp_compress::{codec, CompressorConfig, Message, RngKey, UnitContext};
use serde_json::{json, Value};

const WORKERS: usize = 2;
const STEPS: u64 = 3;
const SHAPE: [usize; 2] = [8, 12];
const SEED: u64 = 1;

/// The compressors with one message per worker, and their options.
fn cases() -> Vec<Value> {
    vec![
        json!({"name": "dense"}),
        json!({"name": "fp16"}),
        json!({"name": "terngrad"}),
        json!({"name": "qsgd"}),
        json!({"name": "onebit"}),
        json!({"name": "topk", "density": 0.1}),
        json!({"name": "randk", "density": 0.1}),
        json!({"name": "dgck", "density": 0.1}),
        json!({"name": "signsgd"}),
        json!({"name": "efsignsgd"}),
        json!({"name": "natural"}),
        json!({"name": "eightbit"}),
    ]
}

/// A fixed gradient: a scrambled ramp, the same on every platform.
fn gradient(worker: usize, step: u64) -> Vec<f32> {
    let d: usize = SHAPE.iter().product();
    (0..d)
        .map(|i| {
            let h = (i as u64 * 2654435761 + worker as u64 * 40503 + step * 97) % 1000;
            (h as f32 - 500.0) / 250.0
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One case through `STEPS` steps of `WORKERS` workers.
fn run(table: &Value) -> Value {
    let cfg: CompressorConfig = serde_json::from_value(table.clone()).unwrap();
    let memory = cfg.resolve_memory(MemoryKind::Auto);
    let mut workers: Vec<_> = (0..WORKERS)
        .map(|_| (cfg.build_for(&SHAPE), memory.build(ResidualForm::Raw, 0.9, cfg.method().memory_decay())))
        .collect();
    let combine = workers[0].0.combine();
    let (mut inputs, mut messages, mut combined) = (vec![], vec![], vec![]);
    for step in 0..STEPS {
        let mut wires = Vec::new();
        for (rank, (c, m)) in workers.iter_mut().enumerate() {
            let g = gradient(rank, step);
            let ctx = UnitContext { key: RngKey::new(SEED, rank as u32, step, 0), loss: None };
            let mut msg = Message::default();
            c.compress(m.compensate(&g, 1.0), &ctx, &mut msg);
            m.update(&msg);
            let mut wire = Vec::new();
            codec::encode(&msg, cfg.message_tag(&SHAPE), &mut wire);
            inputs.push(g);
            wires.push(wire);
        }
        let mut out = vec![0.0; gradient(0, 0).len()];
        combine_encoded(wires.iter().map(|w| &w[..]), combine, &mut out).unwrap();
        messages.push(wires.iter().map(|w| hex(w)).collect::<Vec<_>>());
        combined.push(out);
    }
    json!({"compressor": table, "inputs": inputs, "messages": messages, "combined": combined})
}

fn vectors() -> Value {
    json!({
        "about": "gradcomp wire bytes; crates/compress/tests/wire_vectors.rs writes and checks them",
        "workers": WORKERS, "steps": STEPS, "shape": SHAPE, "seed": SEED,
        "cases": cases().iter().map(run).collect::<Vec<_>>(),
    })
}

/// Nested arrays of numbers, flattened, as f32 (JSON holds them as decimals).
fn f32s(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(a) => a.iter().flat_map(f32s).collect(),
        x => vec![x.as_f64().expect("a number") as f32],
    }
}

#[test]
fn the_committed_wire_vectors_are_what_the_compressors_make() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/wire.json");
    let now = vectors();
    if std::env::var_os("GRADCOMP_WRITE_VECTORS").is_some() {
        std::fs::write(path, serde_json::to_string(&now).unwrap() + "\n").unwrap();
    }
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (c, n) = (committed["cases"].as_array().unwrap(), now["cases"].as_array().unwrap());
    assert_eq!(c.len(), n.len(), "the cases changed");
    for (c, n) in c.iter().zip(n) {
        let name = &n["compressor"]["name"];
        assert_eq!(c["compressor"], n["compressor"]);
        assert_eq!(f32s(&c["inputs"]), f32s(&n["inputs"]), "{name}: the inputs changed");
        assert_eq!(c["messages"], n["messages"], "{name}: the bytes changed");
        assert_eq!(f32s(&c["combined"]), f32s(&n["combined"]), "{name}: the combined result changed");
    }
}
