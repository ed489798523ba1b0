//! burn-train's `Learner`, with gradcomp's compressed data parallelism as its
//! training strategy: burn-train's dashboard, metrics and checkpoints stay,
//! and one line (marked `// gradcomp`) switches compression on.
//!
//! ```text
//! cargo run --release -p gradcomp-dp --features learner --example learner
//! ```
//!
//! The model and data are those of `custom_model.rs`. The learner's
//! optimizer is wrapped in `GradcompOptimizer`, which only CELGC needs (it
//! sets each worker's step size); `run` is also called with CELGC by the
//! tests.

#[path = "custom_model.rs"]
#[allow(dead_code)]
mod custom_model;

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamWConfig, Optimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{ClassificationOutput, InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep};
use custom_model::{accuracy, make_data, GlyphNet, Glyphs, BATCH, EPOCHS, LR, SEED};
use gradcomp_dp::learner::{GradcompOptimizer, GradcompStrategy};
use gradcomp_dp::DataParallelConfig;

/// One image (64 pixels in [0, 1]) and its class.
#[derive(Clone, Debug)]
pub struct Glyph {
    pixels: Vec<f32>,
    label: i64,
}

#[derive(Clone, Debug)]
pub struct GlyphBatch {
    images: Tensor<4>,
    targets: Tensor<1, Int>,
}

struct GlyphBatcher;

impl Batcher<Glyph, GlyphBatch> for GlyphBatcher {
    fn batch(&self, items: Vec<Glyph>, device: &Device) -> GlyphBatch {
        let n = items.len();
        let pixels: Vec<f32> = items.iter().flat_map(|g| g.pixels.iter().copied()).collect();
        let labels: Vec<i64> = items.iter().map(|g| g.label).collect();
        GlyphBatch {
            images: Tensor::from_data(TensorData::new(pixels, [n, 1, 8, 8]), device),
            targets: Tensor::from_data(TensorData::new(labels, [n]), device),
        }
    }
}

fn classify(model: &GlyphNet, batch: GlyphBatch) -> ClassificationOutput {
    let output = model.forward(batch.images);
    let loss =
        CrossEntropyLossConfig::new().init(&output.device()).forward(output.clone(), batch.targets.clone());
    ClassificationOutput { loss, output, targets: batch.targets }
}

impl TrainStep for GlyphNet {
    type Input = GlyphBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: GlyphBatch) -> TrainOutput<ClassificationOutput> {
        let out = classify(self, batch);
        TrainOutput::new(self, out.loss.backward(), out)
    }
}

impl InferenceStep for GlyphNet {
    type Input = GlyphBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: GlyphBatch) -> ClassificationOutput {
        classify(self, batch)
    }
}

fn loader(data: &Glyphs, shuffle: bool) -> Arc<dyn DataLoader<GlyphBatch>> {
    let items: Vec<Glyph> = (0..data.count())
        .map(|i| Glyph { pixels: data.pixels[i * 64..(i + 1) * 64].to_vec(), label: data.labels[i] })
        .collect();
    let builder = DataLoaderBuilder::new(GlyphBatcher).batch_size(BATCH);
    let builder = if shuffle { builder.shuffle(SEED) } else { builder };
    builder.build(InMemDataset::new(items))
}

/// Trains with the Learner on `workers` workers with `config` and the
/// optimizer `optim` at learning rate `lr`; returns the test accuracy and
/// bytes sent, or burn-train's error.
pub fn run<O: Optimizer>(
    workers: usize,
    config: DataParallelConfig,
    optim: O,
    lr: f64,
    dir: &std::path::Path,
) -> Result<(f64, u64), String> {
    let device = gradcomp_dp::default_device();
    device.seed(SEED);
    let (train, test) = make_data(SEED);
    let strategy = GradcompStrategy::new(workers, config); // gradcomp
    let result = SupervisedTraining::new(dir, loader(&train, true), loader(&test, false))
        .metric_train_numeric(LossMetric::new())
        .metric_valid_numeric(AccuracyMetric::new())
        .num_epochs(EPOCHS as usize)
        .with_application_logger(None)
        .with_training_strategy(strategy.clone().into())
        .launch(Learner::new(GlyphNet::new(&device), GradcompOptimizer(optim).into(), lr)); // gradcomp
    if let Some(e) = result.error {
        return Err(e.to_string());
    }
    Ok((accuracy(&result.model, &test, &device), strategy.bytes_sent()))
}

fn main() {
    let dir = std::env::temp_dir().join("gradcomp-learner-example");
    let (acc, sent) =
        run(4, custom_model::terngrad(), AdamWConfig::new().build(), LR, &dir).expect("training");
    println!(
        "burn-train Learner, 4 workers, TernGrad: test accuracy {:.2}%, bytes sent {:.2} MB",
        acc * 100.0,
        sent as f64 / 1e6
    );
}
