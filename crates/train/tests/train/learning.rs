//! Runs that learn: every strategy, language models, evaluations, staged
//! backward passes, progress and refusals before any work.

use super::*;

#[test]
fn every_strategy_learns_and_keeps_replicas_identical() {
    let cases = [
        "[compressor]\nname = \"dense\"",
        "[compressor]\nname = \"fp16\"",
        "[compressor]\nname = \"terngrad\"",
        "[compressor]\nname = \"terngrad\"\n[comm]\ntopology = \"parameter-server\"",
        "[compressor]\nname = \"terngrad\"\nshare_scaler = false\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"topk\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"gaussiank\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"\n[compression]\ngranularity = \"global\"",
        "[compressor]\nname = \"dgck\"\ndensity = 0.05\n[comm]\ntopology = \"parameter-server\"",
        "[compressor]\nname = \"trimmedk\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"randk\"\ndensity = 0.2\nsame_seed = true",
        "[compressor]\nname = \"threshold\"\nthreshold = 0.01\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"qsgd\"\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"onebit\"\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"topk\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"\n[compression]\nresidual = \"lr-scaled\"",
        "[compressor]\nname = \"dgck\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"\n[compression]\nmemory = \"dgc-momentum\"\nwarmup = { kind = \"exp\", epochs = 1 }",
        "[compressor]\nname = \"powersgd\"\nrank = 2\nstart_iter = 10",
        "[compressor]\nname = \"signsgd\"\n[optimizer]\nlr = 0.0005\nmomentum = 0.0",
        "[compressor]\nname = \"signsgd\"\n[comm]\ntopology = \"parameter-server\"\n[optimizer]\nlr = 0.0005\nmomentum = 0.0",
        "[compressor]\nname = \"signum\"\n[optimizer]\nlr = 0.0005\nmomentum = 0.0",
        "[compressor]\nname = \"efsignsgd\"",
        "[compressor]\nname = \"efsignsgd\"\n[comm]\ntopology = \"parameter-server\"",
        "[compressor]\nname = \"signum\"\n[comm]\ntopology = \"parameter-server\"\n[optimizer]\nlr = 0.0005\nmomentum = 0.0",
        "[compressor]\nname = \"eightbit\"\n[comm]\ntopology = \"parameter-server\"",
        "[compressor]\nname = \"natural\"",
        "[compressor]\nname = \"natural\"\n[comm]\ntopology = \"parameter-server\"",
        "[compressor]\nname = \"eightbit\"",
        "[compressor]\nname = \"fp4\"\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"fp4\"\nformat = \"e2m1\"\nrounding = \"stochastic\"\n[comm]\ntopology = \"parameter-server\"",
        "[compressor]\nname = \"sparseloco\"\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"sparseloco\"\nk = 16\n[comm]\ntopology = \"parameter-server\"",
        "[compressor]\nname = \"dct-topk\"\n[comm]\ntopology = \"allgather\"",
        "[compressor]\nname = \"dct-topk\"\nvalues = \"f32\"\n[comm]\ntopology = \"parameter-server\"",
        "[optimizer]\nweight_decay = 5e-4\nnesterov = true\nno_decay_on_biases = true\n[schedule]\nkind = \"poly\"\nwarmup_epochs = 0.5",
        "[optimizer]\nname = \"adam\"\nlr = 0.002\nmomentum = 0.0\n[schedule]\nkind = \"step\"\nstep_epochs = 1\ngamma = 0.5",
    ];
    for extra in cases {
        let (s, d) = train(extra);
        let e = &s.epochs;
        assert_eq!(e.len(), 2, "{extra}");
        let acc = e[1].test_accuracy.unwrap();
        assert!(acc > 0.5, "{extra}: accuracy {acc}");
        assert!(e[1].train_loss < 2.0, "{extra}: loss {}", e[1].train_loss);
        assert!(e[1].bytes_sent > 0, "{extra}");
        let steps = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap();
        assert_eq!(steps.lines().count() as u64, s.steps, "{extra}");
    }
}

/// The progress line's "sent" is all workers' bytes through the previous
/// step, so it never exceeds the run's total and trails it by one step (it
/// once multiplied rank 0's bytes, a parameter server's downloads included,
/// by N).
#[test]
fn progress_bytes_trail_the_records_and_never_exceed_them() {
    use std::sync::{Arc, Mutex};
    struct Last(Arc<Mutex<Vec<u64>>>);
    impl trainer::Observer for Last {
        fn step(&mut self, p: &trainer::Progress) {
            self.0.lock().unwrap().push(p.bytes_sent);
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let d = tempdir::Dir::new();
    let cfg = config(
        d.path(),
        "[compressor]\nname = \"terngrad\"\n[comm]\ntopology = \"parameter-server\"\n[train]\nmax_steps = 6",
    );
    let s = trainer::train(&cfg, RunOptions::default(), Box::new(Last(Arc::clone(&seen)))).unwrap();
    let total = s.epochs.last().unwrap().bytes_sent;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 6);
    let last = *seen.last().unwrap();
    // Five of six equal steps: the step's agreement learns a step's bytes at the next.
    assert!(
        last <= total && last as f64 >= total as f64 * 5.0 / 6.0 * 0.999,
        "progress {last}, total {total}"
    );
}

/// A run whose workers' model state cannot fit in memory is refused before
/// any thread starts (1000 ResNet-18 workers: at least 300 GB), naming the need.
#[test]
fn workers_that_cannot_fit_in_memory_are_refused_before_they_start() {
    let d = tempdir::Dir::new();
    let cfg = config(
        d.path(),
        "workers = 1000\n[data]\nsynthetic_shape = [3, 32, 32]\nsynthetic_size = 64\n[model]\nname = \"resnet18\"",
    );
    let t = std::time::Instant::now();
    let e = trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap_err().to_string();
    assert!(e.contains("workers") && e.contains("GB") && e.contains("11173962 parameters"), "{e}");
    assert!(!d.path().join("config.toml").exists(), "the run started");
    assert!(t.elapsed().as_secs() < 30, "took {:?}", t.elapsed());
}

#[test]
fn a_diverging_run_stops_naming_step_worker_and_tensor_or_skips() {
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), "[compressor]\nname = \"dense\"\n[optimizer]\nlr = 1e30\nmomentum = 0.0");
    let e = trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap_err().to_string();
    assert!(e.contains("non-finite") && e.contains("step") && e.contains("worker"), "{e}");
    assert!(e.contains("tensor"), "{e}");
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), "[compressor]\nname = \"dense\"\n[optimizer]\nlr = 1e30\nmomentum = 0.0\n[train]\non_nonfinite = \"skip\"\nmax_steps = 10");
    let s = trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
    let steps = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap();
    assert!(steps.contains("\"skipped\":true"), "expected skipped steps");
    assert_eq!(s.steps, 10);
}

/// A small LSTM on 6,000 generated tokens (vocabulary 50), 2 workers,
/// Adam; `rest` adds the `[train]` keys and any tables after them.
fn small_lm(dir: &std::path::Path, rest: &str) -> TrainConfig {
    let text = format!(
        "name = \"lm\"\nrun_dir = \"{}\"\nworkers = 2\n[data]\ndataset = \"synthetic-tokens\"\nsynthetic_size = 6000\nbatch_size = 4\nbptt = 10\n[model]\nname = \"lstm\"\nlstm = {{ vocab = 50, embed = 32, hidden = 32 }}\n[optimizer]\nname = \"adam\"\nlr = 0.01\nmomentum = 0.0\n[train]\n{rest}",
        dir.display()
    );
    TrainConfig::from_toml(&text, &[]).unwrap()
}

#[test]
fn the_language_model_learns_synthetic_text() {
    let d = tempdir::Dir::new();
    let cfg = small_lm(
        d.path(),
        "epochs = 2\n[compressor]\nname = \"topk\"\ndensity = 0.1\n[comm]\ntopology = \"allgather\"",
    );
    let s = trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
    let p = s.epochs.last().unwrap().test_perplexity.unwrap();
    assert!(p < 20.0, "perplexity {p} (vocabulary 50)");
}

/// A language model's time to accuracy: the run stops at the first
/// evaluation whose perplexity is at or below `train.target_perplexity`.
#[test]
fn a_language_model_stops_at_its_target_perplexity() {
    let run = |extra: &str| {
        let d = tempdir::Dir::new();
        let cfg = small_lm(d.path(), &format!("epochs = 1\neval_every = 10\n{extra}"));
        let s = trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
        let evals: Vec<(u64, f64)> = std::fs::read_to_string(d.path().join("evals.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|e| (e["steps"].as_u64().unwrap(), e["test_perplexity"].as_f64().unwrap()))
            .collect();
        (s, evals)
    };
    let (_, all) = run("");
    let best = all.iter().map(|e| e.1).fold(f64::INFINITY, f64::min);
    let target = (all[0].1 + best) / 2.0;
    let first = all.iter().position(|e| e.1 <= target).unwrap();
    assert!(first > 0, "{all:?}");
    let (s, stopped) = run(&format!("target_perplexity = {target}"));
    assert_eq!(s.reached_target, Some(all[first].0), "{all:?}");
    assert_eq!(stopped.len(), first + 1);
    // An image task cannot take it, nor a perplexity of 1 or less.
    let bad = |t: &str| TrainConfig::from_toml(t, &[]).unwrap_err().to_string();
    assert!(
        bad("[train]\ntarget_perplexity = 100.0").contains("needs train.eval = true and a language model")
    );
    let lm =
        "[data]\ndataset = \"synthetic-tokens\"\n[model]\nname = \"lstm\"\n[train]\ntarget_perplexity = 1.0";
    assert!(bad(lm).contains("must be a number > 1"), "{}", bad(lm));
}

#[test]
fn every_experiment_config_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            TrainConfig::load(&p, &[]).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 8);
}

#[test]
fn evaluations_every_few_steps_record_time_to_accuracy_and_stop_at_the_target() {
    let evals = |d: &tempdir::Dir| -> Vec<serde_json::Value> {
        std::fs::read_to_string(d.path().join("evals.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // 25 steps an epoch: evaluations at 5, 10, …, 50, epoch ends included once.
    let (s, d) = train("[train]\neval_every = 5\n");
    let all = evals(&d);
    let steps: Vec<u64> = all.iter().map(|e| e["steps"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=10).map(|i| i * 5).collect::<Vec<u64>>());
    let walls: Vec<f64> = all.iter().map(|e| e["wall_seconds"].as_f64().unwrap()).collect();
    assert!(walls.windows(2).all(|w| w[0] < w[1]), "{walls:?}");
    assert!(all.iter().all(|e| e["predicted_wall_seconds"].as_object().is_some_and(|p| !p.is_empty())));
    assert_eq!(s.reached_target, None);
    // The same run with a target between its first and best accuracy stops
    // at the first evaluation that reaches it, on every worker.
    let acc: Vec<f64> = all.iter().map(|e| e["test_accuracy"].as_f64().unwrap()).collect();
    let target = (acc[0] + acc.iter().copied().fold(0.0, f64::max)) / 2.0;
    let first = acc.iter().position(|&a| a >= target).unwrap();
    assert!(first > 0, "{acc:?}");
    let (s, d) = train(&format!("[train]\neval_every = 5\ntarget_accuracy = {target}\n"));
    assert_eq!(s.reached_target, Some(steps[first]));
    assert_eq!(s.steps, steps[first]);
    let stopped = evals(&d);
    assert_eq!(stopped.len(), first + 1);
    assert!(stopped.last().unwrap()["test_accuracy"].as_f64().unwrap() >= target);
}

#[test]
fn a_staged_backward_pass_trains_resnet18_bit_for_bit_as_the_whole_one() {
    // ResNet-18 cuts its forward pass after every block; with pipelining the
    // trainer backpropagates it stage by stage while buckets are on the wire.
    let run = |pipeline: bool| {
        train(&format!(
            "workers = 2\n[data]\nsynthetic_size = 64\nbatch_size = 8\n[model]\nname = \"resnet18\"\n\
             [compressor]\nname = \"topk\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"\n\
             [compression]\nbucket_mb = 0.5\npipeline = {pipeline}\n[train]\nepochs = 1\nmax_steps = 3\n\
             checksum_every = 1\neval = false"
        ))
    };
    let (staged, d) = run(true);
    let (whole, _) = run(false);
    assert_eq!(staged.steps, 3);
    assert_eq!(staged.final_params, whole.final_params, "the staged backward pass changed the model");
    // The staged run's records hold the backward stages run inside the exchange.
    let steps = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap();
    for line in steps.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        // The first step gathers its stages (where compression runs is decided
        // then); the others stream them: 10 stages, the stem's and 8 blocks' cuts.
        let expected = if r["step"] == 0 { 0 } else { 10 };
        assert_eq!(r["backward_stages"].as_u64().unwrap_or(0), expected, "{line}");
    }
}
