//! CELGC, DGC and eSGD in the loop, and the combinations refused.

use super::*;

#[test]
fn celgc_with_period_1_and_no_clipping_is_synchronous_sgd() {
    let plain = "[optimizer]\nmomentum = 0.0\n[train]\nmax_steps = 30";
    let (a, _da) = run(plain);
    let (b, _db) = run(&format!("{plain}\n[strategy]\nkind = \"celgc\"\nperiod = 1\ngamma = 0.0"));
    let worst = a
        .final_params
        .iter()
        .zip(&b.final_params)
        .map(|(x, y)| (x - y).abs() / x.abs().max(1e-2))
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-3, "largest relative difference {worst}");
}

#[test]
fn celgc_strategies_learn() {
    for extra in [
        "[strategy]\nkind = \"celgc\"\nperiod = 4\ngamma = 0.5",
        "[strategy]\nkind = \"celgc\"\nperiod = 2\ngamma = 0.5\nclip_norm = \"global-average\"",
        "[strategy]\nkind = \"celgc\"\nperiod = 2\ngamma = 0.5\nclip_norm = \"max\"\n[optimizer]\nmomentum = 0.0",
        "[strategy]\nkind = \"celgc\"\nperiod = 1\ngamma = 0.5\naverage = \"gradients\"",
        "[strategy]\nkind = \"celgc\"\nperiod = 3\ngamma = 0.5\ncompress_change = true\n[compressor]\nname = \"topk\"\ndensity = 0.1\n[comm]\ntopology = \"allgather\"",
        // DiLoCo's outer Nesterov, densely and through Top-k with error feedback.
        "[strategy]\nkind = \"celgc\"\nperiod = 4\ngamma = 0.0\nouter = { name = \"nesterov\" }",
        "[strategy]\nkind = \"celgc\"\nperiod = 4\ngamma = 0.0\ncompress_change = true\nouter = { name = \"nesterov\", lr = 0.5 }\n[compressor]\nname = \"topk\"\ndensity = 0.1\n[comm]\ntopology = \"allgather\"",
        // `kind = "local"`: DiLoCo by name; Streaming with fragments, delay and mix.
        "[strategy]\nkind = \"local\"\nperiod = 4",
        "[strategy]\nkind = \"local\"\nperiod = 4\nfragments = 2\ndelay = 1",
        "[strategy]\nkind = \"local\"\nperiod = 4\nfragments = 3\ndelay = 2\nmix = 0.25\ncompress_change = true\n[compressor]\nname = \"topk\"\ndensity = 0.1\n[comm]\ntopology = \"allgather\"",
        // The change's compressors (issue #37) on the change, SparseLoCo as Templar runs it
        // (averaging, outer lr 1), DeMo's DCT top-k, and 4-bit floats in Streaming.
        "[strategy]\nkind = \"local\"\nperiod = 4\nouter = { name = \"sgd\" }\ncompress_change = true\n[compressor]\nname = \"sparseloco\"\nk = 16\n[comm]\ntopology = \"allgather\"",
        "[strategy]\nkind = \"local\"\nperiod = 4\nouter = { name = \"sgd\" }\ncompress_change = true\n[compressor]\nname = \"dct-topk\"\n[comm]\ntopology = \"parameter-server\"",
        "[strategy]\nkind = \"local\"\nperiod = 4\nfragments = 2\ndelay = 1\ncompress_change = true\n[compressor]\nname = \"fp4\"\n[comm]\ntopology = \"allgather\"",
    ] {
        let (s, d) = run(extra);
        let acc = s.epochs[1].test_accuracy.unwrap();
        assert!(acc > 0.5, "{extra}: accuracy {acc}");
        let steps = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap();
        assert!(steps.contains("\"eta_eff\""), "{extra}");
        let rounds = steps.lines().filter(|l| l.contains("\"communicated\":1.0")).count();
        let period: usize = extra.split("period = ").nth(1).unwrap()[..1].parse().unwrap();
        if !extra.contains("gradients") && !extra.contains("fragments") {
            assert_eq!(rounds, 50usize.div_ceil(period), "{extra}: I× fewer rounds");
        }
    }
}

#[test]
fn outer_nesterov_resumes_bit_exactly() {
    let (full, rest) = interrupted_and_resumed(
        "[strategy]\nkind = \"celgc\"\nperiod = 3\ngamma = 0.0\nouter = { name = \"nesterov\" }",
        31,
    );
    assert_eq!(rest.final_params, full.final_params);
}

#[test]
fn streaming_resumes_bit_exactly_from_inside_an_overlap() {
    // H 4, P 2, τ 2: a round is in flight (started, not merged) at half the steps.
    for at in [31, 30] {
        let (full, rest) = interrupted_and_resumed(
            "[strategy]\nkind = \"local\"\nperiod = 4\nfragments = 2\ndelay = 2\ncompress_change = true\n[compressor]\nname = \"topk\"\ndensity = 0.1\n[comm]\ntopology = \"allgather\"",
            at,
        );
        assert_eq!(rest.final_params, full.final_params, "interrupted after step {at}");
    }
    // SparseLoCo's decaying memory of the change resumes bit-exactly too.
    let (full, rest) = interrupted_and_resumed(
        "[strategy]\nkind = \"local\"\nperiod = 4\nfragments = 2\ndelay = 1\ncompress_change = true\n[compressor]\nname = \"sparseloco\"\nk = 16\n[comm]\ntopology = \"allgather\"",
        30,
    );
    assert_eq!(rest.final_params, full.final_params, "sparseloco");
}

#[test]
fn celgc_resumes_bit_exactly() {
    let (full, rest) = interrupted_and_resumed(
        "[strategy]\nkind = \"celgc\"\nperiod = 3\ngamma = 0.5\ncompress_change = true\n[compressor]\nname = \"topk\"\ndensity = 0.1\n[comm]\ntopology = \"allgather\"",
        31,
    );
    assert_eq!(rest.final_params, full.final_params);
}

#[test]
fn dgc_in_the_loop_learns() {
    let (s, _d) = run(
        "[compressor]\nname = \"dgck\"\ndensity = 0.01\n[compression]\nmemory = \"dgc-momentum\"\nwarmup = { kind = \"exp\", epochs = 1 }\nlocal_clip = 5.0\nexclude = { biases = true }\n[optimizer]\nmomentum = 0.0\n[comm]\ntopology = \"allgather\"",
    );
    assert!(s.epochs[1].test_accuracy.unwrap() > 0.5);
}

#[test]
fn invalid_strategy_combinations_are_config_errors() {
    let d = tempdir::Dir::new();
    for (extra, key) in [
        ("[compressor]\nname = \"esgd\"\n[comm]\ntopology = \"allreduce\"", "comm.topology"),
        ("[compressor]\nname = \"esgd\"\n[compression]\ngranularity = \"layer\"", "compression.granularity"),
        ("[strategy]\nkind = \"celgc\"\nperiod = 0", "strategy.period"),
        ("[strategy]\nkind = \"celgc\"\ngamma = -1.0", "strategy.gamma"),
        ("[compressor]\nname = \"esgd\"\nbeta = 1.0", "compressor.beta"),
        ("[strategy]\nkind = \"celgc\"\nperiod = 2\naverage = \"gradients\"", "strategy.average"),
        ("[strategy]\nkind = \"celgc\"\n[compressor]\nname = \"topk\"", "strategy.compress_change"),
        (
            "[strategy]\nkind = \"celgc\"\nouter = { name = \"nesterov\", momentum = 1.5 }",
            "strategy.outer.momentum",
        ),
        ("[strategy]\nouter = { name = \"nesterov\" }", "strategy.outer"),
        ("[strategy]\nkind = \"local\"\nperiod = 4\ndelay = 4", "strategy.delay"),
        ("[strategy]\nkind = \"local\"\nperiod = 4\nmix = -0.5", "strategy.mix"),
        ("[strategy]\nkind = \"local\"\nperiod = 4\nfragments = 5", "strategy.fragments"),
    ] {
        let base = format!("name = \"x\"\nrun_dir = \"{}\"\n", d.path().display());
        let e = TrainConfig::from_toml(&format!("{base}{extra}"), &[]).unwrap_err();
        assert_eq!(e.key, key, "{extra}: {e}");
    }
}

/// With `residual = "lr-scaled"` only error feedback folds the learning rate
/// into its residual; everything else must still step at the configured lr.
/// The old trainer handed the optimizer lr = 1.0 for the whole buffer, so
/// memory-less compressors and DGC momentum stepped 20× too far here.
#[test]
fn lr_scaled_residual_leaves_units_without_error_feedback_at_the_configured_lr() {
    for compressor in [
        "[compressor]\nname = \"dense\"",
        "[compressor]\nname = \"terngrad\"",
        "[compressor]\nname = \"dgck\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"",
    ] {
        let base = format!("{compressor}\n[optimizer]\nlr = 0.05\n[train]\nmax_steps = 12");
        let (raw, _a) = train(&format!("{base}\n[compression]\nresidual = \"raw\""));
        let (scaled, _b) = train(&format!("{base}\n[compression]\nresidual = \"lr-scaled\""));
        assert_eq!(
            raw.final_params, scaled.final_params,
            "{compressor}: the residual form changed a memory without error feedback"
        );
    }
    // With error feedback the forms differ, but the lr-scaled one is in the
    // same units: at a constant lr the two stay close.
    let topk = "[compressor]\nname = \"topk\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"\n[compression.exclude]\nlast_layer = true\n[optimizer]\nlr = 0.05\nmomentum = 0.0\n[train]\nmax_steps = 12";
    let (raw, _a) = train(&format!("{topk}\n[compression]\nresidual = \"raw\""));
    let (scaled, _b) = train(&format!("{topk}\n[compression]\nresidual = \"lr-scaled\""));
    let worst =
        raw.final_params.iter().zip(&scaled.final_params).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "largest difference {worst}");
}

/// Issue #13: the authors' CELGC scripts also average the models at every
/// epoch end. With a period longer than the run, the only rounds are step
/// 0's and the end of epoch 1 (the last epoch end is not a round), so twice
/// the bytes of a run without them; a run stopped at the epoch end resumes
/// bit-exactly (the round's step is in the checkpoint, so it is not repeated).
#[test]
fn celgc_averages_at_epoch_ends_when_asked() {
    let base = "[strategy]\nkind = \"celgc\"\nperiod = 1000\ngamma = 0.5";
    let (without, _a) = train(base);
    let with_ends = format!("{base}\naverage_at_epoch_end = true");
    let (with, _b) = train(&with_ends);
    let bytes = |s: &gradcomp_train::trainer::RunSummary| s.epochs.last().unwrap().bytes_sent;
    assert!(bytes(&without) > 0);
    assert_eq!(bytes(&with), 2 * bytes(&without));
    assert_ne!(with.final_params, without.final_params);
    for stop_at in [25, 31] {
        let (full, rest) = interrupted_and_resumed(&with_ends, stop_at);
        assert_eq!(rest.final_params, full.final_params, "stopped at {stop_at}");
    }
}

/// QSR's period rule, resolved from the run's `[schedule]` before the
/// workers start (lr 0.05 in epoch 0, 0.025 in epoch 1 of 25 steps, α = 0.2:
/// H = 16, then a period cut at the run's end) and written to the run's
/// `config.toml`; the rounds fall at its boundaries.
#[test]
fn a_qsr_period_follows_the_schedule() {
    let (_, d) =
        run("[strategy]\nkind = \"local\"\nperiod = 4\nperiod_rule = { name = \"qsr\", alpha = 0.2 }\n\
                      [schedule]\nkind = \"step\"\nstep_epochs = 1\ngamma = 0.5");
    let saved = std::fs::read_to_string(d.path().join("config.toml")).unwrap();
    let saved = TrainConfig::from_toml(&saved, &[]).unwrap();
    let want = gradcomp_dp::config::PeriodRule::Qsr { alpha: 0.2, periods: vec![[0, 16], [32, 19]] };
    assert_eq!(saved.strategy.period_rule, want);
    let steps = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap();
    let rounds: Vec<u64> = steps
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.to_string().contains("\"communicated\":1.0"))
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds, vec![0, 16, 32]);
}
