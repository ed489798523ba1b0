//! The library's user-model example against the built-in trainer: the same
//! model, data, seed and steps reach the same accuracy (within the noise of
//! another shuffle) and send exactly the same bytes.

#[path = "../../../examples/custom_model.rs"]
#[allow(dead_code)]
mod custom_model;

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use custom_model::{GlyphNet, Glyphs, BATCH, EPOCHS, LR, SEED};
use gradcomp_train::config::TrainConfig;
use gradcomp_train::data::{Batch, ImageDataset, TrainData};
use gradcomp_train::models::{classification_stats, cross_entropy, EvalStats, Net};
use gradcomp_train::trainer::{self, RunOptions, Silent};

/// The example's model, as the built-in trainer takes a model.
#[derive(Module, Debug)]
struct Trained {
    net: GlyphNet,
}

impl Trained {
    fn logits(&self, batch: &Batch, device: &Device) -> (Tensor<2>, Tensor<1, burn::tensor::Int>) {
        let (x, y) = batch.images(device);
        (self.net.forward(x), y)
    }
}

impl Net for Trained {
    fn loss(&self, batch: &Batch, device: &Device) -> Tensor<1> {
        let (logits, y) = self.logits(batch, device);
        cross_entropy(logits, y)
    }

    fn evaluate(&self, batch: &Batch, device: &Device) -> EvalStats {
        let (logits, y) = self.logits(batch, device);
        classification_stats(logits, y)
    }
}

/// The example's glyphs as an IDX-style image set (pixels 0 or 255).
fn images(g: &Glyphs) -> ImageDataset {
    let pixels = g.pixels.iter().map(|&p| if p > 0.5 { 255 } else { 0 }).collect();
    let labels = g.labels.iter().map(|&l| l as u8).collect();
    ImageDataset::new(pixels, labels, [1, 8, 8], 10).unwrap()
}

#[test]
fn the_user_model_example_matches_the_built_in_trainer() {
    let (example, example_bytes) = custom_model::run(4, custom_model::terngrad());
    let (train, test) = custom_model::make_data(SEED);
    let dir = std::env::temp_dir().join(format!("gradcomp-example-{}", std::process::id()));
    // The example's settings: burn's AdamW defaults (ε 1e-5, decoupled decay 1e-4), TernGrad.
    let cfg = TrainConfig::from_toml(
        &format!(
            "name = \"example\"\nrun_dir = \"{}\"\nworkers = 4\nseed = {SEED}\n\
             [data]\ndataset = \"synthetic-images\"\nbatch_size = {BATCH}\n\
             [optimizer]\nname = \"adamw\"\nlr = {LR}\neps = 1e-5\nweight_decay = 1e-4\n\
             [train]\nepochs = {EPOCHS}\ncheckpoint_every_epochs = 0\n[compressor]\nname = \"terngrad\"",
            dir.display()
        ),
        &[],
    )
    .unwrap();
    let data = TrainData::Images { train: images(&train), test: images(&test) };
    let make = |d: &Device| Trained { net: GlyphNet::new(d) };
    let s = trainer::train_with(&cfg, &data, make, RunOptions::default(), Box::new(Silent)).unwrap();
    let last = s.epochs.last().unwrap();
    let builtin = last.test_accuracy.unwrap();
    println!("example {:.2}%, built-in trainer {:.2}%", example * 100.0, builtin * 100.0);
    assert!(example > 0.8, "the example learned too little: {example}");
    // The two loops shuffle their shards differently.
    assert!((example - builtin).abs() * 100.0 <= 2.0, "example {example} against the trainer's {builtin}");
    assert_eq!(example_bytes, last.bytes_sent, "both count the same bytes");
    std::fs::remove_dir_all(&dir).ok();
}
