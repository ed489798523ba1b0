use super::*;

#[test]
fn sizes_past_the_machine_and_bad_schedule_powers_are_refused() {
    let bad = |sets: &[(&str, &str)]| {
        let ov: Vec<(String, String)> = sets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        TrainConfig::from_toml("", &ov).and_then(|c| c.validate()).unwrap_err()
    };
    let e = bad(&[("data.dataset", "\"synthetic-images\""), ("data.synthetic_size", "1000000000000")]);
    assert_eq!(e.key, "data.synthetic_size", "{e}");
    assert!(e.problem.contains("GB"), "{e}");
    let e = bad(&[
        ("data.synthetic_shape", "[100000, 100000, 100000]"),
        ("data.dataset", "\"synthetic-images\""),
    ]);
    assert_eq!(e.key, "data.synthetic_size", "{e}");
    let e = bad(&[("workers", "100000")]);
    assert!(e.key == "workers" && e.problem.contains("mpi"), "{e}");
    for power in ["nan", "-1.0", "inf"] {
        let e = bad(&[("schedule.power", power)]);
        assert_eq!(e.key, "schedule.power", "{power}: {e}");
    }
}

#[test]
fn defaults_validate_and_round_trip() {
    let c = TrainConfig::default();
    c.validate().unwrap();
    let back = TrainConfig::from_toml(&c.to_toml(), &[]).unwrap();
    assert_eq!(back, c);
}

#[test]
fn overrides_and_errors_name_the_key() {
    let text = "name = \"t\"\nworkers = 4\n[compressor]\nname = \"topk\"\n[comm]\ntopology = \"allgather\"\n";
    let c = TrainConfig::from_toml(text, &[("compressor.density".into(), "0.01".into())]).unwrap();
    assert_eq!(c.compressor.density(), Some(0.01));
    assert_eq!(c.workers, 4);
    let e = TrainConfig::from_toml(text, &[("compressor.densty".into(), "0.01".into())]).unwrap_err();
    assert!(e.to_string().contains("densty"), "{e}");
    let e = TrainConfig::from_toml(text, &[("comm.topology".into(), "allreduce".into())]).unwrap_err();
    assert_eq!(e.key, "comm.topology");
    let e = TrainConfig::from_toml(text, &[("workers".into(), "0".into())]).unwrap_err();
    assert_eq!(e.key, "workers");
    let e = TrainConfig::from_toml(text, &[("compressor.density".into(), "2".into())]).unwrap_err();
    assert_eq!(e.key, "compressor.density");
    let e = TrainConfig::from_toml("[optimizer]\nlr = -1\n", &[]).unwrap_err();
    assert_eq!(e.key, "optimizer.lr");
    let e = TrainConfig::from_toml("bogus = 1\n", &[]).unwrap_err();
    assert_eq!(e.key, "bogus");
    let e = TrainConfig::from_toml("[model]\nname = \"lstm\"\n", &[]).unwrap_err();
    assert_eq!(e.key, "model.name");
}

#[test]
fn gpt_sizes_and_segments_are_checked_naming_the_key() {
    let gpt = [("data.dataset", "\"synthetic-tokens\""), ("model.name", "\"gpt\"")];
    let check = |sets: &[(&str, &str)]| {
        let ov: Vec<(String, String)> =
            gpt.iter().chain(sets).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        TrainConfig::from_toml("", &ov).and_then(|c| c.validate())
    };
    check(&[]).unwrap();
    check(&[("model.gpt", "{ embed = 96, heads = 3, mlp = 100, tie = false }"), ("data.bptt", "128")])
        .unwrap();
    for (sets, key) in [
        (vec![("model.gpt", "{ heads = 3 }")], "model.gpt.heads"),
        (vec![("model.gpt", "{ heads = 0 }")], "model.gpt.heads"),
        (vec![("model.gpt", "{ layers = 0 }")], "model.gpt.layers"),
        (vec![("model.gpt", "{ embed = 0 }")], "model.gpt.embed"),
        (vec![("model.gpt", "{ mlp = 0 }")], "model.gpt.mlp"),
        (vec![("model.gpt", "{ context = 0 }")], "model.gpt.context"),
        (vec![("model.gpt", "{ vocab = 0 }")], "model.gpt.vocab"),
        (vec![("model.gpt", "{ dropout = 1.0 }")], "model.gpt.dropout"),
        (vec![("model.gpt", "{ dropout = nan }")], "model.gpt.dropout"),
        (vec![("model.gpt", "{ context = 64 }"), ("data.bptt", "65")], "data.bptt"),
        (vec![("data.variable_bptt", "true")], "data.variable_bptt"),
        (vec![("model.gpt", "{ layer = 2 }")], "layer"),
        (vec![("data.dataset", "\"synthetic-images\"")], "model.name"),
    ] {
        let e = check(&sets).unwrap_err();
        assert!(e.key.contains(key), "{sets:?}: {e}");
    }
    // The LSTM's segments are not the GPT's business.
    let lstm = [("data.dataset", "\"synthetic-tokens\""), ("model.name", "\"lstm\""), ("data.bptt", "200")];
    let ov: Vec<(String, String)> = lstm.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    TrainConfig::from_toml("", &ov).and_then(|c| c.validate()).unwrap();
}

#[test]
fn keys_renamed_in_round_six_still_read() {
    // `strategy.compress_delta` is `compress_change` now; files and --set of before read as they did.
    let text =
        "[strategy]\nkind = \"local\"\nperiod = 8\ncompress_delta = true\n[compressor]\nname = \"fp4\"\n";
    let c = TrainConfig::from_toml(text, &[]).unwrap();
    assert!(c.strategy.compress_change);
    let set = [("strategy.compress_delta".to_string(), "true".to_string())];
    let c = TrainConfig::from_toml("[strategy]\nkind = \"local\"\nperiod = 8\n", &set).unwrap();
    assert!(c.strategy.compress_change);
    assert!(c.to_toml().contains("compress_change = true"), "written under the new name");
}
