//! The bytes a run records, against the codec's exact encodings.

use super::*;

#[test]
fn terngrad_parameter_server_bytes_match_the_codec() {
    let (_, d) = train(
        "[compressor]\nname = \"terngrad\"\n[comm]\ntopology = \"parameter-server\"\n[train]\nmax_steps = 3",
    );
    let r = first_step(&d);
    // Upload per worker: a 12-byte header, a 4-byte scaler and 2 bits per element, per tensor.
    let up: u64 = FCN5.iter().map(|&l| 12 + 4 + l.div_ceil(4) as u64).sum();
    // Download: header, scaler, worker count, and ceil(log2(2·3+1)) = 3 bits per element.
    let down: u64 = FCN5.iter().map(|&l| 12 + 8 + (l * 3).div_ceil(8) as u64).sum();
    assert_eq!(r["wire_bytes"], 3 * up);
    assert_eq!(r["bytes_up"]["ps_push"], 2 * up, "two remote workers upload");
    assert_eq!(r["bytes_down"]["ps_push"], 2 * up, "the server receives them");
    assert_eq!(r["bytes_up"]["ps_pull"], 2 * down, "the server sends the download to two workers");
    assert_eq!(r["bytes_down"]["ps_pull"], 2 * down);
    // One f32 scaler per tensor, max-reduced.
    assert_eq!(r["bytes_up"]["allreduce_max_f32"], 3 * 4 * 6);
}

#[test]
fn sparse_allgather_bytes_match_the_codec() {
    let (_, d) = train("[compressor]\nname = \"topk\"\ndensity = 0.01\n[comm]\ntopology = \"allgather\"\n[compression]\ngranularity = \"global\"\n[train]\nmax_steps = 2");
    let r = first_step(&d);
    let total: usize = FCN5.iter().sum();
    let k = (total as f64 * 0.01) as u64;
    let msg = 12 + 4 + 8 * k; // header, count, u32 index + f32 value each
    assert_eq!(r["wire_bytes"], 3 * msg);
    assert_eq!(r["bytes_up"]["allgatherv"], 3 * msg);
    assert_eq!(r["bytes_down"]["allgatherv"], 3 * 2 * msg);
    let c = r["contraction"].as_f64().unwrap();
    assert!(c > 0.0 && c <= r["bound_classic"].as_f64().unwrap(), "{r}");
}

#[test]
fn exclusions_keep_the_chosen_tensors_dense() {
    let (_, d) = train(
        "[compressor]\nname = \"terngrad\"\n[compression.exclude]\nlast_layer = true\nbiases = true\nmin_size = 1000\n[train]\nmax_steps = 2",
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("manifest.json")).unwrap()).unwrap();
    let dense: Vec<bool> =
        m["units"].as_array().unwrap().iter().map(|u| u["dense"].as_bool().unwrap()).collect();
    // fc1.weight compressed; every bias (1-D, and < 1000) and the output layer dense.
    assert_eq!(dense, [false, true, false, true, true, true]);
    let r = first_step(&d);
    // Two ternary units sum their codes in one i8 allreduce (3 workers: sums
    // in −3..=3); the dense ones travel in one f32 allreduce.
    let dense_elems: u64 = [200u64, 200, 2000, 10].iter().sum();
    assert_eq!(r["bytes_up"]["allreduce_sum_f32"], 3 * 4 * dense_elems);
    assert_eq!(r["bytes_up"]["allreduce_sum_i8"], 3 * (784 * 200 + 200 * 200));
}

#[test]
fn esgd_sends_exactly_k_coordinates_per_worker_per_step() {
    let (s, d) = run(
        // u32 indices (the default is varints), so the bytes count the coordinates.
        "[compressor]\nname = \"esgd\"\ndensity = 0.25\nwire = { indices = \"u32\" }\n[compression]\ngranularity = \"global\"\n[comm]\ntopology = \"parameter-server\"",
    );
    assert!(s.epochs[1].test_accuracy.unwrap() > 0.5);
    let total: u64 = FCN5.iter().sum::<usize>() as u64;
    let k = total / 4;
    let msg = 12 + 4 + 8 * k;
    let steps = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap();
    let mut replaced = 0.0;
    for l in steps.lines() {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(r["wire_bytes"], 3 * msg, "every worker sends exactly k = {k}");
        replaced += r["esgd_replacements"].as_f64().unwrap();
    }
    assert!(replaced > 0.0, "residuals replaced some coordinates");
}
