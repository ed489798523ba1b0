use super::{
    selection_time_figure, time_to_accuracy_table, validation_table, EpochRecord, Run, StepRecord,
    TrainConfig,
};

#[test]
fn validation_table_splits_the_step_into_communication_and_compute() {
    // Two ranks; rank 1 is the slowest locally (4 + 1 + 0 + 1 = 6 ms).
    let step = StepRecord {
        wall_seconds: 0.020,
        predicted_seconds: [("100000000".to_string(), 0.022)].into(),
        compute_seconds: vec![0.003, 0.004],
        compress_seconds: vec![0.001, 0.001],
        decode_seconds: vec![0.0, 0.0],
        optimizer_seconds: vec![0.001, 0.001],
        communicate_seconds: vec![0.014, 0.012],
        ..Default::default()
    };
    let run = Run {
        name: "r".into(),
        config: TrainConfig { workers: 2, ..Default::default() },
        manifest: None,
        epochs: Vec::new(),
        evals: Vec::new(),
        steps: vec![step; 8],
    };
    let t = validation_table(&[run]);
    let row = t.lines().last().unwrap();
    assert_eq!(row, "| r | 2 | 100 Mbit/s | 0.0200 | 0.0220 | +10% | 14.0 | 16.0 | 4.0 |", "{t}");
}

#[test]
fn time_to_accuracy_is_the_first_evaluation_at_the_target() {
    let eval = |steps: u64, acc: f64, wall: f64| EpochRecord {
        steps,
        test_accuracy: Some(acc),
        wall_seconds: wall,
        bytes_sent: steps * 1_000_000,
        predicted_wall_seconds: [("100000000".to_string(), wall * 2.0)].into(),
        ..Default::default()
    };
    let mut config = TrainConfig::default();
    config.train.target_accuracy = Some(0.9);
    let run = |name: &str, evals| Run {
        name: name.into(),
        config: config.clone(),
        manifest: None,
        epochs: Vec::new(),
        evals,
        steps: Vec::new(),
    };
    let t = time_to_accuracy_table(&[
        run("fast", vec![eval(25, 0.5, 1.0), eval(50, 0.91, 2.0), eval(75, 0.95, 3.0)]),
        run("slow", vec![eval(25, 0.5, 1.0), eval(50, 0.8, 2.0)]),
    ]);
    let rows: Vec<&str> = t.lines().collect();
    assert_eq!(rows[0], "| run | target | steps | measured s | predicted s @ 100 Mbit/s | MB sent |");
    assert_eq!(rows[2], "| fast | 90.0% | 50 | 2.0 | 4.0 | 50.0 |");
    assert!(rows[3].starts_with("| slow | 90.0% | not reached (best 80.00% in 50 steps) |"), "{t}");
    // A language model's target is a perplexity, reached from above.
    let ppl = |steps: u64, p: f64| EpochRecord {
        test_accuracy: None,
        test_perplexity: Some(p),
        ..eval(steps, 0.0, steps as f64)
    };
    let mut lm_config = config.clone();
    lm_config.train.target_accuracy = None;
    lm_config.train.target_perplexity = Some(150.0);
    let lm = |name: &str, evals| Run { config: lm_config.clone(), ..run(name, evals) };
    let t = time_to_accuracy_table(&[
        lm("lm", vec![ppl(25, 400.0), ppl(50, 149.0), ppl(75, 120.0)]),
        lm("lm-slow", vec![ppl(25, 400.0), ppl(50, 180.0)]),
    ]);
    let rows: Vec<&str> = t.lines().collect();
    assert_eq!(rows[2], "| lm | ppl ≤ 150 | 50 | 50.0 | 100.0 | 50.0 |", "{t}");
    assert!(rows[3].starts_with("| lm-slow | ppl ≤ 150 | not reached (best 180.0 in 50 steps) |"), "{t}");
}

#[test]
fn selection_time_figure_reads_bench_lines() {
    let dir = std::env::temp_dir().join(format!("gradcomp-seltime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bench = dir.join("bench.jsonl");
    let line = |c: &str, op: &str, d: usize, rho: Option<f64>, t: f64| {
        let row = crate::bench::compress_cases::Row {
            compressor: c.into(),
            op: op.into(),
            elements: d,
            density: rho,
            seconds: t,
            gbytes_per_s: 1.0,
            ratio_to_read_pass: 1.0,
            selected: 1,
            wire_bytes: 1,
        };
        serde_json::to_string(&row).unwrap()
    };
    let mut text = line("read_pass", "sum", 1024, None, 1e-7);
    for (d, t) in [(1024, 1e-6), (65536, 1e-4), (1048576, 2e-3)] {
        text.push('\n');
        text.push_str(&line("topk", "compress", d, Some(0.001), t));
    }
    std::fs::write(&bench, text).unwrap();
    let (stem, _) = selection_time_figure(&bench, &dir).unwrap();
    assert!(std::fs::metadata(dir.join(format!("{stem}.png"))).unwrap().len() > 1000);

    // A file without sparsifier lines, or not JSON, is an error that names it.
    std::fs::write(&bench, line("read_pass", "sum", 1024, None, 1e-7)).unwrap();
    let e = selection_time_figure(&bench, &dir).unwrap_err().to_string();
    assert!(e.contains("bench compress --json"), "{e}");
    std::fs::write(&bench, "not json").unwrap();
    let e = format!("{:#}", selection_time_figure(&bench, &dir).unwrap_err());
    assert!(e.contains("bench.jsonl:1") && e.contains("bench compress --json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
