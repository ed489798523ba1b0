//! Checkpoints and resume: bit-exact continuation, refusals, pruning.

use super::*;

#[test]
fn an_interrupted_run_resumes_bit_exactly() {
    // Stop in the middle of the second epoch (25 steps per epoch).
    let (full, rest) = interrupted_and_resumed(
        "[compressor]\nname = \"gaussiank\"\ndensity = 0.05\n[comm]\ntopology = \"allgather\"\n[train]\ncheckpoint_every_epochs = 1",
        37,
    );
    assert_eq!(rest.params_checksum, full.params_checksum, "resumed run differs from the uninterrupted one");
    assert_eq!(rest.final_params, full.final_params);
    // The interrupted epoch's loss is the mean over all its steps, not only those after the resume.
    assert_eq!(rest.epochs.last().unwrap().train_loss, full.epochs.last().unwrap().train_loss);
    assert_eq!(rest.epochs.last().unwrap().bytes_sent, full.epochs.last().unwrap().bytes_sent);
}

/// The compressors that carry state of their own across steps resume
/// bit-exactly too: PowerSGD's warm-start Q beside its residuals (compressing
/// from step 5 so the interruption falls after it starts), Signum's momentum,
/// EF-SignSGD's and 8-bit's residuals; signSGD and natural compression (whose
/// random draws follow the step) resume alike.
#[test]
fn stateful_compressors_resume_bit_exactly() {
    for compressor in [
        "name = \"powersgd\"\nrank = 2\nstart_iter = 5",
        "name = \"signum\"\nmomentum = 0.9",
        "name = \"efsignsgd\"",
        "name = \"signsgd\"",
        "name = \"natural\"",
        "name = \"eightbit\"",
        "name = \"fp4\"\nrounding = \"stochastic\"",
        "name = \"sparseloco\"\n[comm]\ntopology = \"allgather\"",
        "name = \"dct-topk\"\n[comm]\ntopology = \"allgather\"",
    ] {
        let (full, rest) = interrupted_and_resumed(
            &format!("[compressor]\n{compressor}\n[train]\ncheckpoint_every_epochs = 1"),
            37,
        );
        assert_eq!(rest.final_params, full.final_params, "{compressor}: the resumed run differs");
        assert_eq!(rest.epochs.last().unwrap().bytes_sent, full.epochs.last().unwrap().bytes_sent);
    }
}

#[test]
fn resuming_with_another_model_is_a_clear_error() {
    let d = tempdir::Dir::new();
    let cfg = config(
        d.path(),
        "[train]
max_steps = 3",
    );
    trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
    let mut other = cfg.clone();
    other.model.name = gradcomp_train::config::ModelName::Lenet5;
    let e = trainer::train(&other, RunOptions { resume: true, ..Default::default() }, Box::new(Silent))
        .unwrap_err()
        .to_string();
    assert!(e.contains("another model"), "{e}");
}

#[test]
fn a_run_directory_is_never_overwritten_silently() {
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), "[train]\nmax_steps = 2");
    trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
    let e = trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap_err().to_string();
    assert!(e.contains("already holds a run") && e.contains("--overwrite") && e.contains("--resume"), "{e}");
    let again = RunOptions { overwrite: true, ..Default::default() };
    let s = trainer::train(&cfg, again, Box::new(Silent)).unwrap();
    assert_eq!(s.steps, 2);
    // The old records are gone, not appended to.
    let lines = std::fs::read_to_string(d.path().join("steps.jsonl")).unwrap().lines().count();
    assert_eq!(lines, 2);
}

#[test]
fn a_resume_refuses_changes_of_meaning_and_asks_before_safe_ones() {
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), "[train]\nmax_steps = 2");
    trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
    let resume = || RunOptions { resume: true, ..Default::default() };
    for (key, change) in [
        ("optimizer.lr", "[optimizer]\nlr = 0.5\n[train]\nmax_steps = 2"),
        ("seed", "seed = 99\n[train]\nmax_steps = 2"),
        ("compressor", "[compressor]\nname = \"fp16\"\n[train]\nmax_steps = 2"),
        ("data.batch_size", "[data]\nbatch_size = 8\n[train]\nmax_steps = 2"),
    ] {
        let other = config(d.path(), change);
        let allow = RunOptions { allow_changes: true, ..resume() };
        let e = trainer::train(&other, allow, Box::new(Silent)).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("change the run's meaning"), "{key}: {e}");
    }
    let longer = config(d.path(), "[train]\nmax_steps = 4");
    let e = trainer::train(&longer, resume(), Box::new(Silent)).unwrap_err().to_string();
    assert!(e.contains("train.max_steps") && e.contains("--allow-change"), "{e}");
    let s =
        trainer::train(&longer, RunOptions { allow_changes: true, ..resume() }, Box::new(Silent)).unwrap();
    assert_eq!(s.steps, 4);
}

#[test]
fn old_checkpoints_are_pruned_and_stale_temporaries_removed() {
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), "[train]\nepochs = 3\nkeep_checkpoints = 2");
    trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
    let step_dirs = || {
        let mut v: Vec<String> = std::fs::read_dir(d.path().join("checkpoints"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("step-"))
            .collect();
        v.sort();
        v
    };
    let kept = step_dirs();
    assert_eq!(kept.len(), 2, "{kept:?}");
    let latest = std::fs::read_to_string(d.path().join("checkpoints/latest")).unwrap();
    assert_eq!(kept.last().unwrap(), latest.trim());
    // A writer that died left its temporary files; a resume clears them.
    let stale = [
        d.path().join("steps.jsonl.tmp4242"),
        d.path().join("checkpoints").join(&kept[1]).join("state.tmp77"),
    ];
    for f in &stale {
        std::fs::write(f, b"partial").unwrap();
    }
    let resume = RunOptions { resume: true, ..Default::default() };
    trainer::train(&cfg, resume, Box::new(Silent)).unwrap();
    for f in &stale {
        assert!(!f.exists(), "{} was left", f.display());
    }
}

#[test]
fn a_damaged_or_diverged_checkpoint_is_refused() {
    use gradcomp_train::sections::{Sections, Values};
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), "[train]\nmax_steps = 2");
    trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
    let path = latest_state(d.path());
    let good = std::fs::read(&path).unwrap();
    let resume = || trainer::train(&cfg, RunOptions { resume: true, ..Default::default() }, Box::new(Silent));
    // A flipped bit in the parameters.
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x10;
    std::fs::write(&path, &bad).unwrap();
    let e = resume().unwrap_err().to_string();
    assert!(e.contains("fails its checksum"), "{e}");
    // Valid checksums over NaN parameters: a diverged model.
    let mut s = Sections::decode(&good, "x").unwrap();
    let Some(Values::F32(p)) = s.0.get_mut("params") else { panic!("params") };
    p[3] = f32::NAN;
    std::fs::write(&path, s.encode()).unwrap();
    let e = resume().unwrap_err().to_string();
    assert!(e.contains("parameter 3") && e.contains("NaN"), "{e}");
    // A step counter that disagrees with the checkpoint it is in.
    let mut s = Sections::decode(&good, "x").unwrap();
    let Some(Values::Bytes(c)) = s.0.get_mut("counters") else { panic!("counters") };
    let mut counters: serde_json::Value = serde_json::from_slice(c).unwrap();
    counters["step"] = serde_json::json!(u64::MAX);
    *c = serde_json::to_vec(&counters).unwrap();
    std::fs::write(&path, s.encode()).unwrap();
    let e = resume().unwrap_err().to_string();
    assert!(e.contains(&u64::MAX.to_string()), "{e}");
    // The intact file resumes.
    std::fs::write(&path, &good).unwrap();
    let longer = RunOptions { resume: true, ..Default::default() };
    assert_eq!(trainer::train(&cfg, longer, Box::new(Silent)).unwrap().steps, 2);
}

/// Issue #27: checkpoints every N steps, written in the background. A run
/// lost after step 37 or so (its own checkpoint there gone, as if the
/// process died before writing it) resumes from the background checkpoint
/// of step 30 and ends bit-exactly where the uninterrupted run does; the
/// records of the steps after 30, which run again, appear once.
#[test]
fn a_run_resumes_from_its_latest_step_checkpoint_bit_exactly() {
    let extra = "[compressor]\nname = \"topk\"\ndensity = 0.05\n[train]\ncheckpoint_every_epochs = 0\ncheckpoint_every_steps = 10\nkeep_checkpoints = 3\neval_every = 5";
    let (full, full_dir) = train(extra);
    let checkpoints = full_dir.path().join("checkpoints");
    let names = |dir: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("step-"))
            .collect();
        v.sort();
        v
    };
    // 50 steps: background ones at 10 … 40, the final one at 50; three kept.
    assert_eq!(names(&checkpoints), ["step-000000030", "step-000000040", "step-000000050"]);
    for n in names(&checkpoints) {
        for f in ["state.bin", "rank-0.bin", "rank-1.bin", "rank-2.bin"] {
            assert!(checkpoints.join(&n).join(f).is_file(), "{n}/{f}");
        }
    }

    let d = tempdir::Dir::new();
    let cfg = config(d.path(), extra);
    let part = stopped_at(&cfg, 37, false);
    // The stop lands at the step after the request.
    assert!((31..40).contains(&part.steps), "{}", part.steps);
    // Lose the checkpoint of the stop: `latest` names the background one of step 30.
    let checkpoints = d.path().join("checkpoints");
    std::fs::write(checkpoints.join("latest"), "step-000000030").unwrap();
    let rest =
        trainer::train(&cfg, RunOptions { resume: true, ..Default::default() }, Box::new(Silent)).unwrap();
    assert_eq!(rest.final_params, full.final_params, "the resumed run differs");
    let steps: Vec<u64> = std::fs::read_to_string(d.path().join("steps.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (0..50).collect::<Vec<_>>(), "every step recorded once, in order");
    let evals = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("evals.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["steps"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(evals(d.path()), evals(full_dir.path()), "every evaluation recorded once");
}

/// Issue #27: a run of 3 workers resumes with 2 (the lost worker's
/// residuals folded into the survivors', or dropped) or with 4, after asking
/// for `--allow-change`. The data is sharded anew (1200 examples: 25 steps
/// an epoch for 3 workers, 37 for 2, 18 for 4), the run ends its 2 epochs
/// from the same point of the same epoch, learns, and records the change.
#[test]
fn a_run_resumes_with_fewer_or_more_workers() {
    let mut finals = Vec::new();
    for (to, lost) in [(2usize, "fold"), (2, "drop"), (4, "fold")] {
        let extra = format!(
            "[compressor]\nname = \"topk\"\ndensity = 0.05\n[elastic]\nlost_state = \"{lost}\"\n[train]\ncheckpoint_every_epochs = 0"
        );
        let d = tempdir::Dir::new();
        let cfg = config(d.path(), &extra);
        let part = stopped_at(&cfg, 30, false);
        let at = part.steps;
        let resized = gradcomp_train::config::TrainConfig { workers: to, ..cfg.clone() };
        let e = trainer::train(&resized, RunOptions { resume: true, ..Default::default() }, Box::new(Silent))
            .unwrap_err()
            .to_string();
        assert!(e.contains("workers") && e.contains("--allow-change"), "{e}");
        let opts = RunOptions { resume: true, allow_changes: true, ..Default::default() };
        let rest = trainer::train(&resized, opts, Box::new(Silent)).unwrap();
        // `at` steps were 25 + (at - 25) of 25 into epoch 1; the rest of epoch 1 on the new shards.
        let per_epoch = 1200 / (to as u64 * 16);
        let position = per_epoch + ((at - 25) as f64 / 25.0 * per_epoch as f64).round() as u64;
        assert_eq!(rest.steps, at + 2 * per_epoch - position, "{to} workers");
        let m: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(d.path().join("membership.jsonl")).unwrap().trim())
                .unwrap();
        assert_eq!(
            (m["step"].as_u64(), m["from"].as_u64(), m["to"].as_u64()),
            (Some(at), Some(3), Some(to as u64))
        );
        assert_eq!(m["lost_state"], if to < 3 { lost } else { "none" });
        let epochs = &rest.epochs;
        let last = epochs.last().unwrap();
        assert!(
            last.train_loss.is_finite() && last.test_accuracy.unwrap() > 0.5,
            "{to} workers, {lost}: {last:?}"
        );
        finals.push(rest.final_params);
    }
    assert_ne!(finals[0], finals[1], "folding the lost residuals changes the run");
}

#[test]
fn a_resume_keeps_the_workers_where_they_are_part_of_the_meaning() {
    for (extra, why) in [
        ("[elastic]\nfixed_workers = true", "elastic.fixed_workers"),
        ("[strategy]\nkind = \"celgc\"\nperiod = 2\ngamma = 0.5", "CELGC"),
    ] {
        let d = tempdir::Dir::new();
        let cfg = config(d.path(), &format!("{extra}\n[train]\nmax_steps = 4"));
        trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
        let resized = gradcomp_train::config::TrainConfig { workers: 2, ..cfg.clone() };
        let opts = RunOptions { resume: true, allow_changes: true, ..Default::default() };
        let e = trainer::train(&resized, opts, Box::new(Silent)).unwrap_err().to_string();
        assert!(e.contains("3 workers") && e.contains("has 2") && e.contains(why), "{e}");
    }
}

/// Rank `rank`'s file of the latest checkpoint in run directory `d`.
fn latest_rank(d: &std::path::Path, rank: usize) -> gradcomp_train::sections::Sections {
    let dir = latest_state(d).parent().unwrap().to_path_buf();
    gradcomp_train::sections::Sections::read(&dir.join(format!("rank-{rank}.bin"))).unwrap()
}

/// The largest |value| of the memories (`dp.*memory.*`) in a rank's file.
fn largest_memory(s: &gradcomp_train::sections::Sections) -> f32 {
    let memories = s.f32_under("dp.");
    assert!(memories.keys().any(|k| k.contains("memory.")), "{:?}", memories.keys());
    memories
        .iter()
        .filter(|(k, _)| k.contains("memory."))
        .flat_map(|(_, v)| v)
        .fold(0.0f32, |m, v| m.max(v.abs()))
}

/// Issue #49 point 5: local updates (DiLoCo, `kind = "local"`, the change
/// through Top-k with error feedback) resume with another number of
/// workers. From a checkpoint of 3 taken mid-period (step 30, H = 4: the
/// workers' own models differ from θ_outer), a resume with 2 or 4 restarts
/// every worker from θ_outer: with no step to run, the workers' mean is
/// θ_outer (not the mean of the saved models); one step on, every rank's
/// memories are zero and θ_outer is the saved one; the change is recorded
/// (memories reset, 2 steps since the round); and the run goes on learning
/// to its end. A stop lands on an outer round (step 32, not 30) whose
/// result every worker holds.
#[test]
fn a_local_update_run_resumes_with_fewer_or_more_workers_from_the_outer_model() {
    use gradcomp_train::config::TrainConfig;
    let extra = "[strategy]\nkind = \"local\"\nperiod = 4\ncompress_change = true\n[compressor]\nname = \"topk\"\ndensity = 0.1\n[comm]\ntopology = \"allgather\"\n[train]\ncheckpoint_every_epochs = 0";
    let opts = || RunOptions { resume: true, allow_changes: true, ..Default::default() };
    for to in [2usize, 4] {
        let d = tempdir::Dir::new();
        let mut cfg = config(d.path(), extra);
        cfg.train.max_steps = 30;
        let first = trainer::train(&cfg, RunOptions::default(), Box::new(Silent)).unwrap();
        assert_eq!(first.steps, 30);
        let saved: Vec<_> = (0..3).map(|r| latest_rank(d.path(), r)).collect();
        let anchor = saved[0].f32("dp.outer.anchor").unwrap().to_vec();
        let mut mean = vec![0.0f64; anchor.len()];
        for s in &saved {
            assert_eq!(s.f32("dp.outer.anchor").unwrap(), &anchor[..], "θ_outer is shared");
            s.f32("params").unwrap().iter().zip(&mut mean).for_each(|(p, m)| *m += f64::from(*p) / 3.0);
        }
        assert!(largest_memory(&saved[0]) > 0.0, "the saved memories hold residuals");
        let off =
            |xs: &[f32], ys: &[f32]| xs.iter().zip(ys).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        let mean: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
        assert!(off(&mean, &anchor) > 1e-3, "mid-period the workers' models are not θ_outer");

        // No step to run: the summary's model is the workers' mean.
        let resized = TrainConfig { workers: to, ..cfg.clone() };
        let start = trainer::train(&resized, opts(), Box::new(Silent)).unwrap();
        assert_eq!(start.steps, 30);
        assert!(off(&start.final_params, &anchor) < 1e-6, "{to} workers start from θ_outer");
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(d.path().join("membership.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let m = &lines[0];
        assert_eq!(
            (m["step"].as_u64(), m["from"].as_u64(), m["to"].as_u64()),
            (Some(30), Some(3), Some(to as u64))
        );
        assert_eq!((m["model"].as_str(), m["memories"].as_str()), (Some("outer.anchor"), Some("reset")));
        assert_eq!(m["steps_since_round"].as_u64(), Some(2), "rounds start at 28 and 32");
        assert_eq!(m["fresh_optimizers"].as_u64(), Some(to.saturating_sub(3) as u64));

        // One step on (no round at step 30): every rank's memories are zero.
        let mut one = resized.clone();
        one.train.max_steps = 31;
        assert_eq!(trainer::train(&one, opts(), Box::new(Silent)).unwrap().steps, 31);
        for r in 0..to {
            let s = latest_rank(d.path(), r);
            assert_eq!(largest_memory(&s), 0.0, "{to} workers: rank {r}'s memories are reset");
            assert_eq!(s.f32("dp.outer.anchor").unwrap(), &anchor[..], "rank {r} holds the saved θ_outer");
        }

        // On to the end of 2 epochs with the new workers: it keeps learning.
        let mut rest_cfg = resized.clone();
        rest_cfg.train.max_steps = 0;
        let rest = trainer::train(&rest_cfg, opts(), Box::new(Silent)).unwrap();
        let last = rest.epochs.last().unwrap();
        let epochs = std::fs::read_to_string(d.path().join("epochs.jsonl")).unwrap();
        let first_loss = serde_json::from_str::<serde_json::Value>(epochs.lines().next().unwrap()).unwrap()
            ["train_loss"]
            .as_f64()
            .unwrap();
        assert!(last.train_loss < first_loss, "{to} workers: {} after {first_loss}", last.train_loss);
        assert!(last.test_accuracy.unwrap() > 0.5, "{to} workers: {last:?}");
    }

    // A stop asked after step 30 ends at the next round's start (32), after
    // that round: every worker's model is θ_outer.
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), extra);
    let part = stopped_at(&cfg, 30, false);
    assert_eq!(part.steps, 32);
    let anchor = latest_rank(d.path(), 0).f32("dp.outer.anchor").unwrap().to_vec();
    for r in 0..3 {
        assert_eq!(latest_rank(d.path(), r).f32("params").unwrap(), &anchor[..], "rank {r} holds θ_outer");
    }
}

/// Checkpoints of local updates are taken after the round due at their
/// step, and stops wait for the next round: a DiLoCo run (one fragment,
/// Nesterov, dense) and a Streaming one stopped and resumed with the same
/// workers still end bit-exactly where the uninterrupted run ends.
#[test]
fn a_local_update_run_stopped_at_a_round_resumes_bit_exactly() {
    for extra in [
        "[strategy]\nkind = \"local\"\nperiod = 4\n[train]\ncheckpoint_every_epochs = 1",
        "[strategy]\nkind = \"local\"\nperiod = 4\nfragments = 2\ndelay = 1\n[train]\ncheckpoint_every_epochs = 1\ncheckpoint_every_steps = 8",
    ] {
        let (full, rest) = interrupted_and_resumed(extra, 29);
        assert_eq!(rest.final_params, full.final_params, "{extra}");
    }
}

/// A resized run keeps its place in its epochs across a later resume with
/// the same workers (and its learning-rate factor): stopped again after the
/// resize and resumed, it ends bit-exactly where the resized run that was
/// not stopped again ends.
#[test]
fn a_resized_run_resumes_again_where_it_was() {
    let extra = "[compressor]\nname = \"topk\"\ndensity = 0.05\n[elastic]\nlr = \"linear\"\n[train]\ncheckpoint_every_epochs = 0";
    let resized = |stop_again: bool| {
        let d = tempdir::Dir::new();
        let cfg = config(d.path(), extra);
        stopped_at(&cfg, 30, false);
        let two = gradcomp_train::config::TrainConfig { workers: 2, ..cfg.clone() };
        if stop_again {
            let part = stopped_at(&two, 55, true);
            assert!(part.steps < 50, "{}", part.steps);
        }
        let opts = RunOptions { resume: true, allow_changes: true, ..Default::default() };
        trainer::train(&two, opts, Box::new(Silent)).unwrap()
    };
    let (once, twice) = (resized(false), resized(true));
    assert_eq!(twice.steps, once.steps);
    assert_eq!(twice.final_params, once.final_params);
}

/// Issue #27 point 4: an in-process worker lost mid-run (its thread panics
/// after step 33; a background checkpoint was written at step 30) ends the
/// run without `elastic.min_workers`; with it, the trainer goes on with the
/// 2 others from step 30 in the same call, records the restart, and learns.
#[test]
fn an_in_process_run_goes_on_without_a_lost_worker() {
    use gradcomp_train::trainer::Fault;
    let extra = "[compressor]\nname = \"topk\"\ndensity = 0.05\n[train]\ncheckpoint_every_epochs = 0\ncheckpoint_every_steps = 10";
    let lose =
        || RunOptions { fault: Some(Fault::LoseWorker { rank: 1, after_step: 33 }), ..Default::default() };
    let d = tempdir::Dir::new();
    let e = trainer::train(&config(d.path(), extra), lose(), Box::new(Silent)).unwrap_err().to_string();
    assert!(e.contains("worker 1") && e.contains("lost after step 33"), "{e}");

    let d = tempdir::Dir::new();
    let cfg = config(d.path(), &format!("{extra}\n[elastic]\nmin_workers = 2"));
    let s = trainer::train(&cfg, lose(), Box::new(Silent)).unwrap();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(d.path().join("membership.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["event"], "worker lost");
    assert_eq!((lines[0]["rank"].as_u64(), lines[0]["resume_from"].as_u64()), (Some(1), Some(30)));
    assert!(lines[0]["steps_lost"].as_u64().unwrap() >= 3, "{}", lines[0]);
    assert_eq!((lines[1]["from"].as_u64(), lines[1]["to"].as_u64()), (Some(3), Some(2)));
    // 30 steps of 3 workers are 30 of 25-step epochs; the rest of 2 epochs at 37 a step.
    assert_eq!(s.steps, 30 + 74 - (37 + (5.0f64 / 25.0 * 37.0).round() as u64));
    // The summary holds the epochs the last attempt ended: here epoch 2, learnt.
    let last = s.epochs.last().unwrap();
    assert!(last.train_loss.is_finite() && last.test_accuracy.unwrap() > 0.9, "{last:?}");
}
