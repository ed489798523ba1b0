//! The examples, run: the user-model example's own loop reaches the accuracy
//! the built-in trainer reaches for the same model, data, seed and steps,
//! and the same loop runs under `mpirun -np 2`.

#[path = "../../../examples/custom_model.rs"]
#[allow(dead_code)]
mod custom_model;

use custom_model::{GlyphNet, BATCH, EPOCHS, LR, SEED};
use gradcomp_train::config::TrainConfig;
use gradcomp_train::data::TrainData;
use gradcomp_train::trainer::{self, RunOptions, Silent};

#[test]
fn the_user_model_example_matches_the_built_in_trainer() {
    let (example, example_bytes) = custom_model::run(4);
    let (train, test) = custom_model::make_data(SEED);
    let dir = std::env::temp_dir().join(format!("gradcomp-example-{}", std::process::id()));
    // The example's settings: burn's AdamW defaults (ε 1e-5, decoupled decay 1e-4), TernGrad.
    let cfg = TrainConfig::from_toml(
        &format!(
            "name = \"example\"\nrun_dir = \"{}\"\nworkers = 4\nseed = {SEED}\n\
             [data]\ndataset = \"synthetic-images\"\nbatch_size = {BATCH}\n\
             [optimizer]\nname = \"adamw\"\nlr = {LR}\neps = 1e-5\nweight_decay = 1e-4\n\
             [train]\nepochs = {EPOCHS}\ncheckpoint_every = 0\n[compressor]\nname = \"terngrad\"",
            dir.display()
        ),
        &[],
    )
    .unwrap();
    let data = TrainData::Images { train, test };
    let s = trainer::train_with(&cfg, &data, GlyphNet::new, RunOptions::default(), Box::new(Silent)).unwrap();
    let last = s.epochs.last().unwrap();
    let builtin = last.test_accuracy.unwrap();
    println!("example {:.2}%, built-in trainer {:.2}%", example * 100.0, builtin * 100.0);
    assert!(example > 0.8, "the example learned too little: {example}");
    assert!((example - builtin).abs() * 100.0 <= 0.3, "example {example} against the trainer's {builtin}");
    assert_eq!(example_bytes, last.bytes_sent, "both count the same bytes");
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(feature = "mpi")]
#[test]
fn the_user_model_example_runs_under_mpirun() {
    let text = run_example("custom_model", &["mpirun", "--oversubscribe", "-np", "2"]);
    assert!(printed_accuracy(&text, "MPI rank 0: test accuracy ") > 80.0, "{text}");
}

/// Runs an example binary built by `cargo test` beside this test's binary.
#[cfg(any(feature = "mpi", feature = "learner"))]
fn run_example(name: &str, launcher: &[&str]) -> String {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples").join(name);
    assert!(example.is_file(), "{} was not built", example.display());
    let out = std::process::Command::new("timeout")
        .arg("300")
        .args(launcher)
        .arg(&example)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("the example starts");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    text
}

/// The accuracy an example printed after `prefix`, in %.
#[cfg(any(feature = "mpi", feature = "learner"))]
fn printed_accuracy(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.split(prefix).nth(1)?.split('%').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` in {text}"))
}

#[cfg(feature = "learner")]
#[test]
fn the_learner_example_trains_through_burn_train_with_gradcomp() {
    let text = run_example("learner", &[]);
    assert!(printed_accuracy(&text, "test accuracy ") > 80.0, "{text}");
    let mb: f64 = text.split("bytes sent ").nth(1).and_then(|t| t.split(' ').next()?.parse().ok()).unwrap();
    assert!(mb > 0.0, "{text}");
}
