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
    let (code, out, err) = gradcomp(&["model", "--config", &cfg, "--steps", "6", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // 9 methods × 10 worker counts × 4 link speeds.
    assert_eq!(rows.len(), 9 * 10 * 4);
    let dense_1 = rows.iter().find(|r| r["compressor"] == "dense" && r["workers"] == 1).unwrap();
    assert!(dense_1["speedup_over_dense"].as_f64().unwrap() > 0.99);
}
