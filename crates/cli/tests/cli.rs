//! The `gradcomp` binary: configuration mistakes are one-line errors with
//! exit code 2, before any work starts; a smoke run trains and writes its
//! records.

use std::process::Command;

fn gradcomp(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gradcomp")).args(args).output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn experiments(name: &str) -> String {
    format!("{}/../../experiments/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn config_mistakes_are_one_line_errors_with_exit_code_2() {
    let cfg = experiments("quick-synthetic.toml");
    for (set, needle) in [
        ("compressor.densty=0.1", "densty"),
        ("workers=0", "workers"),
        ("comm.topology=\"allreduce\"", "comm.topology"),
        ("optimizer.lr=-1", "optimizer.lr"),
        ("compressor.density=3", "compressor.density"),
        ("model.name=\"lstm\"", "model.name"),
    ] {
        let (code, _, err) = gradcomp(&["train", "--config", &cfg, "--set", set]);
        assert_eq!(code, 2, "{set}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{set}: {err}");
        assert!(err.contains(needle), "{set}: {err}");
    }
    if !cfg!(feature = "cuda") {
        let (code, _, err) = gradcomp(&["train", "--config", &cfg, "--device", "cuda"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("device") && err.contains("--features cuda"), "{err}");
    }
    let (code, _, err) = gradcomp(&["train", "--config", &cfg, "--device", "tpu"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cpu, ndarray, cuda, cuda:N or wgpu"), "{err}");
    let (code, _, err) = gradcomp(&["train", "--config", "/nonexistent.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn a_missing_dataset_is_a_user_error() {
    let (code, _, err) = gradcomp(&[
        "train",
        "--config",
        &experiments("mnist-lenet-dense-n4.toml"),
        "--data-dir",
        "/nonexistent-gradcomp-data",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("scripts/fetch-data.sh mnist"), "{err}");
}

#[test]
fn a_smoke_run_trains_and_writes_its_records() {
    let dir = std::env::temp_dir().join(format!("gradcomp-cli-{}", std::process::id()));
    let run_dir = format!("run_dir=\"{}\"", dir.display());
    let (code, out, err) = gradcomp(&[
        "train",
        "--quiet",
        "--config",
        &experiments("quick-synthetic.toml"),
        "--set",
        &run_dir,
        "--set",
        "train.epochs=1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test accuracy:"), "{out}");
    for f in ["config.toml", "manifest.json", "steps.jsonl", "epochs.jsonl", "checkpoints/latest"] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let (code, out, err) = gradcomp(&["eval", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test accuracy"), "{out}");

    // The report over that run: Markdown, PNG and SVG figures.
    let report = dir.join("report");
    let (code, _, err) =
        gradcomp(&["report", "--validation", "--out", report.to_str().unwrap(), dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("| quick-synthetic |") && md.contains("figures/metric_epochs.png"), "{md}");
    assert!(md.contains("measured s/step"), "{md}");
    assert!(md.contains("KB/step"), "traffic table missing: {md}");
    for f in [
        "loss_epochs",
        "metric_epochs",
        "metric_bytes",
        "metric_wall",
        "bytes_per_step",
        "contraction",
        "histograms",
    ] {
        let png = std::fs::metadata(report.join(format!("figures/{f}.png"))).unwrap();
        assert!(png.len() > 1000 && png.len() < 200_000, "{f}.png is {} bytes", png.len());
        assert!(report.join(format!("figures/{f}.svg")).exists());
    }
    let (code, _, err) = gradcomp(&["report", "/nonexistent-run"]);
    assert_ne!(code, 0);
    assert!(err.contains("not a run directory"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_model_predicts_and_dry_runs() {
    let cfg = experiments("quick-synthetic.toml");
    let (code, out, err) = gradcomp(&["model", "--config", &cfg, "--steps", "6", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Mbit/s") && out.contains("pays off"), "{out}");
    // Local updates are priced per inner step, with and without the round overlapped.
    let (code, out, err) = gradcomp(&[
        "model",
        "--config",
        &cfg,
        "--steps",
        "6",
        "--dry-run",
        "--set",
        "strategy={ kind = \"local\", period = 8, fragments = 2, delay = 1, compress_change = true }",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("local updates (nesterov, H = 8, P = 2, τ = 1") && out.contains("overlapped"),
        "{out}"
    );
    let (code, out, err) = gradcomp(&["model", "--config", &cfg, "--steps", "6", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // 16 methods (fp4, 8-bit and Top-k on the reduce-scatter among them) × 10
    // worker counts × 4 link speeds.
    assert_eq!(rows.len(), 16 * 10 * 4);
    assert!(rows.iter().any(|r| r["method"] == "fp4 (reduce-scatter)"), "{out}");
    let dense_1 = rows.iter().find(|r| r["compressor"] == "dense" && r["workers"] == 1).unwrap();
    assert!(dense_1["speedup_over_dense"].as_f64().unwrap() > 0.99);
    // The timeline: every bucket's three stages at each configured link, and what overlapped.
    let (code, out, err) = gradcomp(&[
        "model",
        "--config",
        &cfg,
        "--steps",
        "6",
        "--timeline",
        "--set",
        "compression.bucket_mb=0.01",
        "--set",
        "network.links_bps=[1e8, 1e9]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("hidden by the pipeline").count(), 2, "{out}");
    assert!(out.contains("pipelined") && out.contains("compute (forward, backward)"), "{out}");
    let buckets = out.lines().filter(|l| l.trim_start().starts_with(char::is_numeric)).count();
    assert!(buckets >= 4, "at least two buckets per link: {out}");
    // PowerSGD: its two allreduce rounds before the buckets, far fewer bytes than dense.
    let psgd = [
        "--set",
        "compressor={ name = \"powersgd\", rank = 2, start_iter = 2 }",
        "--set",
        "comm.topology=\"allreduce\"",
    ];
    let (code, out, err) =
        gradcomp(&[&["model", "--config", &cfg, "--steps", "6", "--timeline"][..], &psgd[..]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("exchange rounds (2)"), "{out}");
    let (code, out, err) =
        gradcomp(&[&["model", "--config", &cfg, "--steps", "6", "--dry-run"][..], &psgd[..]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("powersgd with") && out.contains("allreduce"), "{out}");
}

/// A fresh directory under the system's temp dir.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gradcomp-cli-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn your_own_images_of_any_shape_and_class_count_train_and_evaluate() {
    use gradcomp_train::data::{images_file, labels_file, synthetic};
    let dir = scratch("images");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    // 3 channels of 32×32 in 20 classes, in files with names of our own.
    let shape = [3, 32, 32];
    for (split, n, name) in [(0, 1600, "train"), (1, 400, "test")] {
        let d = synthetic::images(n, 7, split, shape, 20);
        std::fs::write(data.join(format!("{name}-x.idx")), images_file(&d.pixels, n, shape)).unwrap();
        std::fs::write(data.join(format!("{name}-y.idx")), labels_file(&d.labels)).unwrap();
    }
    let sets = |model: &str| {
        [
            format!("run_dir=\"{}\"", dir.join(model).display()),
            "data.dataset=\"images\"".into(),
            format!("data.dir=\"{}\"", data.display()),
            "data.train_images=\"train-x.idx\"".into(),
            "data.train_labels=\"train-y.idx\"".into(),
            "data.test_images=\"test-x.idx\"".into(),
            "data.test_labels=\"test-y.idx\"".into(),
            format!("model.name=\"{model}\""),
            "train.epochs=2".into(),
        ]
    };
    let cfg = experiments("quick-synthetic.toml");
    let args = |model: &str, cmd: &[&str]| -> Vec<String> {
        let mut a: Vec<String> =
            cmd.iter().map(|s| s.to_string()).chain(["--config".into(), cfg.clone()]).collect();
        for s in sets(model) {
            a.push("--set".into());
            a.push(s);
        }
        a
    };
    let run = |a: Vec<String>| gradcomp(&a.iter().map(String::as_str).collect::<Vec<_>>());

    let (code, out, err) = run(args("lenet5", &["data", "inspect"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("3 channel(s) of 32×32") && out.contains("classes: 20") && out.contains("fits"),
        "{out}"
    );

    for model in ["lenet5", "fashion-cnn", "fcn5"] {
        let (code, out, err) = run(args(model, &["train", "--quiet"]));
        assert_eq!(code, 0, "{model}: {err}");
        let acc: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("test accuracy: ")?.strip_suffix('%')?.parse().ok())
            .unwrap_or_else(|| panic!("{model}: {out}"));
        assert!(acc > 50.0, "{model}: {acc}% on 20 classes (chance is 5%)");
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(model).join("manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["data"]["image_shape"], serde_json::json!([3, 32, 32]), "{model}");
        assert_eq!(manifest["data"]["classes"], 20, "{model}");
    }
    let (code, out, err) = gradcomp(&["eval", dir.join("lenet5").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(400 examples)"), "{out}");

    images_too_small_for_the_model_are_refused(&dir, &cfg);
    std::fs::remove_dir_all(&dir).ok();
}

/// A model that cannot take the data says so before any work, with exit
/// code 2: 8×8 images (written under `dir`) for LeNet-5, which needs 16×16.
fn images_too_small_for_the_model_are_refused(dir: &std::path::Path, cfg: &str) {
    use gradcomp_train::data::{images_file, labels_file, synthetic};
    let small = dir.join("small");
    std::fs::create_dir_all(&small).unwrap();
    let d = synthetic::images(64, 1, 0, [1, 8, 8], 3);
    for name in ["train", "t10k"] {
        std::fs::write(
            small.join(format!("{name}-images-idx3-ubyte")),
            images_file(&d.pixels, 64, [1, 8, 8]),
        )
        .unwrap();
        std::fs::write(small.join(format!("{name}-labels-idx1-ubyte")), labels_file(&d.labels)).unwrap();
    }
    let (code, _, err) = gradcomp(&[
        "train",
        "--config",
        cfg,
        "--set",
        "data.dataset=\"images\"",
        "--set",
        &format!("data.dir=\"{}\"", small.display()),
        "--set",
        "model.name=\"lenet5\"",
        "--set",
        &format!("run_dir=\"{}\"", dir.join("never").display()),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 16×16") && err.contains("8×8"), "{err}");
}

#[test]
fn a_text_corpus_with_unseen_words_trains_and_counts_them() {
    let dir = scratch("text");
    let corpus = dir.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let sentence = |i: usize| format!("the cat number {} sat on mat {}\n", i % 7, i % 5);
    let text = |range: std::ops::Range<usize>| range.map(sentence).collect::<String>();
    std::fs::write(corpus.join("a.txt"), text(0..1500)).unwrap();
    std::fs::write(corpus.join("b.txt"), text(0..200)).unwrap();
    // Test text with two words training never saw, three times.
    std::fs::write(corpus.join("c.txt"), text(0..200) + "the zebra sat\nthe zebra flew\n").unwrap();
    let run_dir = dir.join("run");
    let (code, out, err) = gradcomp(&[
        "train",
        "--quiet",
        "--config",
        &experiments("quick-synthetic.toml"),
        "--set",
        &format!("run_dir=\"{}\"", run_dir.display()),
        "--set",
        "data.dataset=\"text\"",
        "--set",
        &format!("data.dir=\"{}\"", corpus.display()),
        "--set",
        "data.train_text=\"a.txt\"",
        "--set",
        "data.valid_text=\"b.txt\"",
        "--set",
        "data.test_text=\"c.txt\"",
        "--set",
        "data.batch_size=4",
        "--set",
        "data.bptt=8",
        "--set",
        "model.name=\"lstm\"",
        "--set",
        "model.lstm={ embed = 16, hidden = 16 }",
        "--set",
        "optimizer.name=\"adam\"",
        "--set",
        "optimizer.lr=0.01",
        "--set",
        "optimizer.momentum=0.0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test perplexity:"), "{out}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["data"]["unknown_words"]["test"], 3, "{manifest}");
    assert_eq!(manifest["data"]["unknown_words"]["valid"], 0, "{manifest}");
    let epochs = std::fs::read_to_string(run_dir.join("epochs.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(epochs.lines().last().unwrap()).unwrap();
    let (test, valid) =
        (last["test_perplexity"].as_f64().unwrap(), last["valid_perplexity"].as_f64().unwrap());
    // The vocabulary holds 17 words and <eos>, <unk>: a model that learned the
    // sentences is far below that; the test file's unseen words cost it a little.
    assert!(valid < 6.0 && test >= valid, "valid {valid}, test {test}");
    a_test_text_too_short_for_one_batch_is_refused(&dir, &corpus);
    std::fs::remove_dir_all(&dir).ok();
}

/// A test text too short for one evaluation batch (written into `corpus`)
/// is an error before any work, not a perplexity of 1.
fn a_test_text_too_short_for_one_batch_is_refused(dir: &std::path::Path, corpus: &std::path::Path) {
    std::fs::write(corpus.join("short.txt"), "the cat sat\n").unwrap();
    let (code, _, err) = gradcomp(&[
        "train",
        "--config",
        &experiments("quick-synthetic.toml"),
        "--set",
        &format!("run_dir=\"{}\"", dir.join("short-run").display()),
        "--set",
        "data.dataset=\"text\"",
        "--set",
        &format!("data.dir=\"{}\"", corpus.display()),
        "--set",
        "data.train_text=\"a.txt\"",
        "--set",
        "data.valid_text=\"\"",
        "--set",
        "data.test_text=\"short.txt\"",
        "--set",
        "model.name=\"lstm\"",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("test text (short.txt) holds 4 tokens") && err.contains("data.bptt"), "{err}");
}

/// SIGINT, SIGTERM, SIGHUP and SIGUSR1 stop a run the same way: the workers
/// agree on a step, write a checkpoint, and the process exits 128 + the
/// signal (130, 143, 129, 138), so a script or a scheduler can tell it from a finished run;
/// `--resume` then continues it.
#[test]
fn a_signal_checkpoints_the_run_and_exits_with_its_code() {
    for (signal, code) in [("TERM", 143), ("INT", 130), ("HUP", 129), ("USR1", 138)] {
        let dir = scratch(&format!("signal-{signal}"));
        let run_dir = format!("run_dir=\"{}\"", dir.display());
        let args = [
            "train",
            "--quiet",
            "--config",
            &experiments("quick-synthetic.toml"),
            "--set",
            &run_dir,
            "--set",
            "train.epochs=200",
        ];
        let child = Command::new(env!("CARGO_BIN_EXE_gradcomp"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until it trains (a step record exists), then signal it.
        let steps = dir.join("steps.jsonl");
        let start = std::time::Instant::now();
        while std::fs::metadata(&steps).map_or(true, |m| m.len() == 0) {
            assert!(start.elapsed().as_secs() < 120, "{signal}: the run never started");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let kill =
            Command::new("kill").args([format!("-{signal}"), child.id().to_string()]).status().unwrap();
        assert!(kill.success());
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(code), "{signal}: {stderr}");
        assert!(stdout.contains("interrupted; resume with --resume"), "{signal}: {stdout}");
        assert!(dir.join("checkpoints/latest").exists(), "{signal}: no checkpoint");
        if signal == "TERM" {
            // The checkpoint resumes to the end of a shorter run.
            let mut resumed = args.to_vec();
            resumed.extend(["--resume", "--allow-change", "--set", "train.max_steps=1"]);
            let (c, _, e) = gradcomp(&resumed);
            assert_eq!(c, 0, "{e}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// `bench compress` measures every compressor the library names (but dense
/// and eSGD), PowerSGD through its rounds, and `--model` steps a model's layers.
#[test]
fn bench_compress_covers_every_compressor_and_a_models_layers() {
    let (code, out, err) = gradcomp(&[
        "bench",
        "compress",
        "--elements",
        "4096",
        "--density",
        "0.01",
        "--min-time",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for name in gradcomp_compress::CompressorConfig::NAMES.iter().filter(|n| !matches!(**n, "dense" | "esgd"))
    {
        let ops: Vec<&str> =
            rows.iter().filter(|r| r["compressor"] == *name).map(|r| r["op"].as_str().unwrap()).collect();
        assert_eq!(ops, ["compress", "encode", "decode_aggregate"], "{name}");
    }
    // PowerSGD at rank 2 on the 64 × 64 matrix: P and Q, (64 + 64)·2 floats and a header.
    let psgd = rows.iter().find(|r| r["compressor"] == "powersgd").unwrap();
    let wire = psgd["wire_bytes"].as_u64().unwrap();
    assert!(wire > 1024 && wire < 1200, "{psgd}");
    let (code, out, err) = gradcomp(&[
        "bench",
        "compress",
        "--model",
        "lenet5",
        "--compressors",
        "powersgd",
        "--min-time",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let row: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(row["op"], "step_lenet5");
    assert!(row["wire_bytes"].as_u64().unwrap() < row["elements"].as_u64().unwrap(), "{row}");
}

/// Issue #26 point 5: `gradcomp model --peer-*` prices another system's
/// step, its compute plus its calls with gloo's ring: an allreduce of M bytes
/// among N is 2(N − 1) messages of M/N (α = 100 µs, 1 Gbit/s uncalibrated).
#[test]
fn model_prices_another_systems_step() {
    let cfg = experiments("quick-synthetic.toml");
    let args =
        ["model", "--config", &cfg, "--set", "network.links_bps=[1e9]", "--peer-compute-ms", "10", "--json"];
    let (code, out, err) = gradcomp(&[&args[..], &["--peer-call", "allreduce:1000000"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let ring = 6.0 * (1e-4 + 250_000.0 / 1.25e8);
    assert!((v["wire_seconds"].as_f64().unwrap() - ring).abs() < 1e-6 * ring.max(1.0), "{v}");
    assert!((v["step_seconds"].as_f64().unwrap() - (0.010 + ring)).abs() < 1e-6, "{v}");
    let (code, _, err) = gradcomp(&[&args[..], &["--peer-call", "broadcast:12"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("allreduce or allgather"), "{err}");
}

/// Issue #26 point 3: `gradcomp bench compute` times a configuration's
/// forward and backward pass and says so in JSON.
#[test]
fn bench_compute_times_the_forward_and_backward_pass() {
    let cfg = experiments("quick-synthetic.toml");
    let (code, out, err) = gradcomp(&["bench", "compute", "--config", &cfg, "--steps", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        (v["framework"].as_str(), v["backend"].as_str(), v["model"].as_str()),
        (Some("burn"), Some("flex"), Some("fcn5"))
    );
    let (f, b, s) = (
        v["forward_seconds"].as_f64().unwrap(),
        v["backward_seconds"].as_f64().unwrap(),
        v["step_seconds"].as_f64().unwrap(),
    );
    assert!(f > 0.0 && b > 0.0 && s >= f.max(b), "{v}");
}

/// `strategy.plan = "auto"`: `gradcomp model --plan` prints each decision
/// and the `--set` keys that freeze it; `gradcomp train` chooses the plan
/// (printing it), trains with it and writes it into config.toml as given
/// keys; a resume reads that frozen plan instead of choosing again.
#[test]
fn plan_auto_is_chosen_printed_frozen_and_resumed() {
    let cfg = experiments("quick-synthetic.toml");
    let (code, out, err) = gradcomp(&["model", "--config", &cfg, "--plan", "--link-gbps", "0.1"]);
    assert_eq!(code, 0, "{err}");
    for key in
        ["comm.topology =", "strategy.period =", "strategy.sync =", "strategy.outer =", "frozen: --set"]
    {
        assert!(out.contains(key), "{key} in {out}");
    }
    let dir = scratch("plan-auto");
    let run_dir = format!("run_dir=\"{}\"", dir.display());
    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--quiet", "--config", &cfg, "--set", &run_dir];
        args.extend(["--set", "strategy.plan=\"auto\"", "--set", "network.links_bps=[1e8]"]);
        args.extend(extra);
        gradcomp(&args)
    };
    let (code, _, err) = train(&["--set", "train.epochs=1"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("plan = \"auto\": step") && err.contains("strategy.sync ="), "{err}");
    let saved: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("config.toml")).unwrap()).unwrap();
    let st = &saved["strategy"];
    assert_eq!((st["plan"].as_str(), st["kind"].as_str()), (Some("given"), Some("local")), "{st}");
    assert_eq!(saved["compressor"]["name"].as_str(), Some("fp4"), "{saved}");
    assert!(
        st["period"].as_integer().unwrap() >= 16 && st["compress_change"].as_bool() == Some(true),
        "{st}"
    );
    let (code, _, err) = train(&["--set", "train.epochs=2", "--resume", "--allow-change"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("plan = \"auto\": step"), "a resume takes the frozen plan: {err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `gradcomp project` prices every method through the route table: its rows
/// are the committed projection's (docs/bench/scale/projection.md), and a
/// bad worker count is refused by name.
#[test]
fn project_prints_the_committed_projection_rows() {
    let dir = format!("{}/../../docs/bench/scale", env!("CARGO_MANIFEST_DIR"));
    let shapes = format!("lstm={dir}/shapes-lstm.json");
    let args = ["project", "--shapes", &shapes, "--links", "1e8"];
    let (code, out, err) = gradcomp(&args);
    assert_eq!(code, 0, "{err}");
    let committed = std::fs::read_to_string(format!("{dir}/projection.md")).unwrap();
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| lstm")).collect();
    assert_eq!(rows.len(), 4, "{out}");
    for row in rows {
        assert!(committed.lines().any(|l| l == row), "{row} is not in projection.md");
    }
    let (code, _, err) = gradcomp(&["project", "--shapes", &shapes, "--workers", "1"]);
    assert_ne!(code, 0);
    assert!(err.contains("--workers"), "{err}");
}
