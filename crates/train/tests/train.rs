//! End-to-end training on synthetic data with every compressor and
//! topology: the loss falls, replicas agree (checksums are compared every
//! few steps; a mismatch fails the run), and bytes are counted.

use gradcomp_train::config::TrainConfig;
use gradcomp_train::trainer::{self, RunOptions, Silent};

fn config(dir: &std::path::Path, extra: &str) -> TrainConfig {
    let text = format!(
        r#"
name = "t"
run_dir = "{}"
workers = 3
seed = 5
[data]
dataset = "synthetic-images"
synthetic_size = 1200
batch_size = 16
[model]
name = "fcn5"
[optimizer]
lr = 0.05
momentum = 0.9
[train]
epochs = 2
checksum_every = 5
stats_every = 10
{extra}
"#,
        dir.display()
    );
    TrainConfig::from_toml(&text, &[]).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn train(extra: &str) -> (gradcomp_train::trainer::RunSummary, tempdir::Dir) {
    let d = tempdir::Dir::new();
    let cfg = config(d.path(), extra);
    let s = trainer::train(&cfg, RunOptions::default(), Box::new(Silent))
        .unwrap_or_else(|e| panic!("{extra}: {e}"));
    (s, d)
}

mod tempdir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Self {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "gradcomp-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }
}

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
