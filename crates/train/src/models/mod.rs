//! The models gradcomp trains, on burn (runtime device, `flex` CPU by default).
//!
//! Each model implements [`Net`]: a mean loss for a batch (tracked for
//! autodiff when the device has it) and evaluation statistics. Parameters are
//! visited in declaration order, which fixes the flat gradient layout
//! identically on every worker.

/// Implements [`Net`] for an image classifier with a
/// `logits(&self, Tensor<4>) -> Tensor<2>` method.
macro_rules! image_classifier {
    ($t:ty) => {
        image_classifier!($t, {});
    };
    // `staged`: the model's `logits_cut(x, cuts)` cuts its forward pass.
    ($t:ty, staged) => {
        image_classifier!($t, {
            fn staged_loss(&self, batch: &Batch, device: &Device) -> (Tensor<1>, gradcomp_dp::Cuts) {
                let (x, y) = batch.images(device);
                let mut cuts = gradcomp_dp::Cuts::new();
                let logits = self.logits_cut(x, &mut cuts);
                (cross_entropy(logits, y), cuts)
            }
        });
    };
    ($t:ty, { $($staged:item)* }) => {
        impl Net for $t {
            fn loss(&self, batch: &Batch, device: &Device) -> Tensor<1> {
                let (x, y) = batch.images(device);
                cross_entropy(self.logits(x), y)
            }

            $($staged)*

            fn evaluate(&self, batch: &Batch, device: &Device) -> EvalStats {
                let (x, y) = batch.images(device);
                classification_stats(self.logits(x), y)
            }
        }
    };
}

/// Implements [`Net`] for a language model with a
/// `logits_and_targets(&self, &Batch, &Device) -> (Tensor<2>, Tensor<1, Int>)` method.
macro_rules! language_model {
    ($t:ty) => {
        impl $crate::models::Net for $t {
            fn loss(
                &self,
                batch: &$crate::models::Batch,
                device: &burn::tensor::Device,
            ) -> burn::tensor::Tensor<1> {
                let (logits, y) = self.logits_and_targets(batch, device);
                $crate::models::cross_entropy(logits, y)
            }

            fn evaluate(
                &self,
                batch: &$crate::models::Batch,
                device: &burn::tensor::Device,
            ) -> $crate::models::EvalStats {
                let (logits, y) = self.logits_and_targets(batch, device);
                $crate::models::classification_stats(logits, y)
            }
        }
    };
}

mod cnn;
mod fcn;
mod gpt;
mod lenet;
mod lstm;
mod resnet;

pub use crate::config::{GptConfig, LstmLmConfig};
pub use cnn::FashionCnn;
pub use fcn::Fcn5;
pub use gpt::Gpt;
pub use lenet::LeNet5;
pub use lstm::LstmLm;
pub use resnet::ResNet18;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use gradcomp_compress::UnitRng;

use crate::config::{ConfigError, ModelName, TrainConfig};
pub use crate::data::Batch;
use crate::data::TrainData;

/// What an image classifier is built for: the data's image shape and classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageTask {
    /// `[channels, height, width]`.
    pub shape: [usize; 3],
    pub classes: usize,
}

/// Sums from evaluating a model on batches.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvalStats {
    /// Σ per-example (per-token) loss.
    pub loss_sum: f64,
    /// Correct predictions (classification).
    pub correct: u64,
    /// Examples (tokens) seen.
    pub count: u64,
}

impl EvalStats {
    pub fn add(&mut self, o: &EvalStats) {
        self.loss_sum += o.loss_sum;
        self.correct += o.correct;
        self.count += o.count;
    }

    pub fn mean_loss(&self) -> f64 {
        self.loss_sum / self.count.max(1) as f64
    }

    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.count.max(1) as f64
    }

    pub fn perplexity(&self) -> f64 {
        self.mean_loss().exp()
    }
}

/// One of the built-in models, fitted to the data: image classifiers take
/// the data's image shape and classes, the language models its vocabulary.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelChoice {
    Lenet5(ImageTask),
    Fcn5(ImageTask),
    FashionCnn(ImageTask),
    ResNet18(ImageTask),
    Lstm(LstmLmConfig),
    Gpt(GptConfig),
}

/// Something to do with a built-in model whatever its type: it receives a
/// function that builds a replica on a device.
pub trait WithModel {
    type Output;
    fn run<M: Net>(self, make: impl Fn(&Device) -> M + Send + Sync + Clone + 'static) -> Self::Output;
}

impl ModelChoice {
    /// The configured model for `data`; an error (key `model.name`) says why
    /// a model cannot take the data.
    pub fn new(cfg: &TrainConfig, data: &TrainData) -> Result<Self, ConfigError> {
        let bad = |problem: String| ConfigError { key: "model.name".into(), problem };
        match data {
            TrainData::Tokens { vocab, .. } => match cfg.model.name {
                ModelName::Lstm => {
                    Ok(ModelChoice::Lstm(LstmLmConfig { vocab: *vocab, ..cfg.model.lstm.clone() }))
                }
                ModelName::Gpt => Ok(ModelChoice::Gpt(GptConfig { vocab: *vocab, ..cfg.model.gpt.clone() })),
                other => {
                    Err(bad(format!("{other:?} classifies images; text data needs the lstm or the gpt")))
                }
            },
            TrainData::Images { train, .. } => {
                let task = ImageTask { shape: train.shape, classes: train.classes };
                match cfg.model.name {
                    ModelName::Lenet5 => {
                        LeNet5::check(&task).map(|()| ModelChoice::Lenet5(task)).map_err(bad)
                    }
                    ModelName::FashionCnn => {
                        FashionCnn::check(&task).map(|()| ModelChoice::FashionCnn(task)).map_err(bad)
                    }
                    ModelName::Resnet18 => {
                        ResNet18::check(&task).map(|()| ModelChoice::ResNet18(task)).map_err(bad)
                    }
                    ModelName::Fcn5 => Ok(ModelChoice::Fcn5(task)),
                    ModelName::Lstm | ModelName::Gpt => Err(bad(format!(
                        "the {} is a language model; image data needs lenet5, fcn5, fashion-cnn or resnet18",
                        if cfg.model.name == ModelName::Gpt { "gpt" } else { "lstm" }
                    ))),
                }
            }
        }
    }

    /// Runs `w` with this model's builder.
    pub fn with<W: WithModel>(self, w: W) -> W::Output {
        match self {
            ModelChoice::Lenet5(t) => w.run(move |d: &Device| LeNet5::new(&t, d)),
            ModelChoice::Fcn5(t) => w.run(move |d: &Device| Fcn5::new(&t, d)),
            ModelChoice::FashionCnn(t) => w.run(move |d: &Device| FashionCnn::new(&t, d)),
            ModelChoice::ResNet18(t) => w.run(move |d: &Device| ResNet18::new(&t, d)),
            ModelChoice::Lstm(c) => w.run(move |d: &Device| LstmLm::new(&c, d)),
            ModelChoice::Gpt(c) => w.run(move |d: &Device| Gpt::new(&c, d)),
        }
    }
}

/// A model gradcomp's trainer can train: a mean loss for a batch (tracked
/// for autodiff when the device has it) and evaluation statistics. Implement
/// it for your own burn model to train it with `trainer::train_with`.
pub trait Net: Module + Clone + Send + std::fmt::Debug + 'static {
    /// Mean loss over the batch, a scalar tensor.
    fn loss(&self, batch: &Batch, device: &Device) -> Tensor<1>;

    /// [`loss`](Net::loss) with the forward pass cut for a staged backward
    /// pass ([`Cuts`](gradcomp_dp::Cuts)); by default no cut, one stage.
    fn staged_loss(&self, batch: &Batch, device: &Device) -> (Tensor<1>, gradcomp_dp::Cuts) {
        (self.loss(batch, device), gradcomp_dp::Cuts::none())
    }

    /// Loss sum and correct count over the batch (no gradients needed).
    fn evaluate(&self, batch: &Batch, device: &Device) -> EvalStats;
}

/// Classification statistics from logits `[n, classes]`.
pub fn classification_stats(logits: Tensor<2>, labels: Tensor<1, Int>) -> EvalStats {
    let n = labels.dims()[0];
    let loss = burn::nn::loss::CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits.clone(), labels.clone());
    let pred = logits.argmax(1).reshape([n]);
    let correct: i64 = pred.equal(labels).int().sum().into_scalar();
    let mean: f32 = loss.into_scalar();
    EvalStats { loss_sum: f64::from(mean) * n as f64, correct: correct as u64, count: n as u64 }
}

/// Inverted dropout of probability `p` at connection `point`, its mask
/// drawn from the batch's key (`Batch::Tokens`' `key`), so masks do not
/// depend on how worker threads interleave: while training (an autodiff
/// device) only, so evaluation on the inner device sees the whole network.
pub(crate) fn keyed_dropout<const D: usize>(h: Tensor<D>, p: f64, key: u64, point: u64) -> Tensor<D> {
    if p <= 0.0 || !h.device().is_autodiff() {
        return h;
    }
    let keep = 1.0 - p;
    let dims = h.dims();
    let mut r = UnitRng::from_parts(&[key, point]);
    let scale = (1.0 / keep) as f32;
    let mask: Vec<f32> =
        (0..dims.iter().product::<usize>()).map(|_| if r.next_f64() < keep { scale } else { 0.0 }).collect();
    let device = h.device();
    h * Tensor::from_data(TensorData::new(mask, dims), &device)
}

/// Mean cross-entropy of logits `[n, classes]`.
pub fn cross_entropy(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    burn::nn::loss::CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, labels)
}

#[cfg(test)]
mod tests;
