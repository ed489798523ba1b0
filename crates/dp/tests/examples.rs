//! The examples, run: the user-model example learns, the user's-own
//! compressor example trains and prints accuracy and bytes, the same loop
//! runs under `mpirun -np 2`, and burn-train's Learner trains through
//! gradcomp with every strategy, CELGC and lr-scaled error feedback included.

#[path = "../../../examples/custom_model.rs"]
#[allow(dead_code)]
mod custom_model;

#[test]
fn the_user_model_example_learns_with_terngrad() {
    let (accuracy, bytes) = custom_model::run(4, custom_model::terngrad());
    assert!(accuracy > 0.8, "the example learned too little: {accuracy}");
    assert!(bytes > 0);
}

#[test]
fn the_users_own_compressor_trains_and_sends_less_than_dense() {
    let text = run_example("custom_compressor", &[]);
    let line = |name: &str| {
        text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let mb = |l: &str| -> f64 {
        l.split("bytes sent ").nth(1).and_then(|t| t.split(' ').next()?.parse().ok()).unwrap()
    };
    let own = line("block top-k");
    assert!(printed_accuracy(own, "test accuracy ") > 80.0, "{text}");
    // 1/8 of the blocks, as u32 indices and f32 values: about a quarter of dense's bytes.
    let ratio = mb(own) / mb(line("dense"));
    assert!(ratio < 0.3, "block top-k sent {ratio} of dense's bytes\n{text}");
}

#[cfg(feature = "mpi")]
#[test]
fn the_user_model_example_runs_under_mpirun() {
    let text = run_example("custom_model", &["mpirun", "--oversubscribe", "-np", "2"]);
    assert!(printed_accuracy(&text, "MPI rank 0: test accuracy ") > 80.0, "{text}");
}

/// Runs an example binary built by `cargo test` beside this test's binary.
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

/// The accuracy printed after `prefix`, in %.
fn printed_accuracy(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.split(prefix).nth(1)?.split('%').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` in {text}"))
}

// The learner example includes custom_model.rs as a module of its own too.
#[cfg(feature = "learner")]
#[path = "../../../examples/learner.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod learner_example;

#[cfg(feature = "learner")]
mod learner {
    use super::learner_example as example;
    use burn::optim::{AdamWConfig, SgdConfig};
    use gradcomp_compress::memory::ResidualForm;
    use gradcomp_compress::CompressorConfig;
    use gradcomp_dp::DataParallelConfig;

    fn dir(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("gradcomp-learner-{name}-{}", std::process::id()))
    }

    #[test]
    fn the_learner_example_trains_through_burn_train_with_gradcomp() {
        let text = super::run_example("learner", &[]);
        assert!(super::printed_accuracy(&text, "test accuracy ") > 80.0, "{text}");
    }

    #[test]
    fn celgc_and_lr_scaled_error_feedback_train_under_burn_train() {
        // CELGC: local SGD steps, models averaged every 4 steps. Unclipped it
        // learns; clipped hard (γ tiny) each worker's step size is tiny, so
        // the same run barely moves: the clipped step reached the optimizer.
        let celgc = |gamma| DataParallelConfig::new(CompressorConfig::dense()).with_celgc(4, gamma, 0.5);
        let sgd = || SgdConfig::new().build();
        let (free, sent) = example::run(4, celgc(0.0), sgd(), 0.5, &dir("celgc")).unwrap();
        let (clipped, _) = example::run(4, celgc(1e-4), sgd(), 0.5, &dir("celgc-clipped")).unwrap();
        assert!(free > 0.8 && sent > 0, "CELGC under burn-train: accuracy {free}, bytes {sent}");
        assert!(clipped < free - 0.3, "clipping did not reach the optimizer: {clipped} against {free}");
        let ef = DataParallelConfig::new(CompressorConfig::topk(0.1)).with_residual(ResidualForm::LrScaled);
        let (acc, _) = example::run(4, ef, AdamWConfig::new().build(), 2e-3, &dir("ef")).unwrap();
        assert!(acc > 0.8, "lr-scaled error feedback under burn-train: accuracy {acc}");
    }
}
