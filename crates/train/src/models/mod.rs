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
        impl Net for $t {
            fn loss(&self, batch: &Batch, device: &Device) -> Tensor<1> {
                let (x, y) = batch.images(device);
                cross_entropy(self.logits(x), y)
            }

            fn evaluate(&self, batch: &Batch, device: &Device) -> EvalStats {
                let (x, y) = batch.images(device);
                classification_stats(self.logits(x), y)
            }
        }
    };
}

mod cnn;
mod fcn;
mod lenet;
mod lstm;

pub use cnn::FashionCnn;
pub use fcn::Fcn5;
pub use lenet::LeNet5;
pub use lstm::{LstmLm, LstmLmConfig};

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

/// One minibatch, in host memory.
#[derive(Clone, Debug, PartialEq)]
pub enum Batch {
    /// `pixels`: `len × channels × height × width` in [0, 1]; `labels`: class indices.
    Images { pixels: Vec<f32>, labels: Vec<i64>, channels: usize, height: usize, width: usize },
    /// Token ids `[batch × steps]`, row-major; `targets` are the next tokens.
    Tokens { inputs: Vec<i64>, targets: Vec<i64>, batch: usize, steps: usize },
}

impl Batch {
    /// Examples (images) or predicted tokens in the batch.
    pub fn len(&self) -> usize {
        match self {
            Batch::Images { labels, .. } => labels.len(),
            Batch::Tokens { targets, .. } => targets.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn images(&self, device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
        let Batch::Images { pixels, labels, channels, height, width } = self else {
            panic!("an image model was given a token batch")
        };
        let n = labels.len();
        let x = Tensor::from_data(TensorData::new(pixels.clone(), [n, *channels, *height, *width]), device);
        let y = Tensor::from_data(TensorData::new(labels.clone(), [n]), device);
        (x, y)
    }
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

/// A trainable model.
pub trait Net: Module + Clone + Send + std::fmt::Debug + 'static {
    /// Mean loss over the batch, a scalar tensor.
    fn loss(&self, batch: &Batch, device: &Device) -> Tensor<1>;

    /// Loss sum and correct count over the batch (no gradients needed).
    fn evaluate(&self, batch: &Batch, device: &Device) -> EvalStats;

    /// Whether the parameter at this position (in visit order, with its shape)
    /// is the output layer's, for `exclude.last_layer`.
    fn is_output_param(&self, index: usize, count: usize) -> bool {
        index + 2 >= count
    }
}

/// Classification statistics from logits `[n, classes]`.
pub(crate) fn classification_stats(logits: Tensor<2>, labels: Tensor<1, Int>) -> EvalStats {
    let n = labels.dims()[0];
    let loss = burn::nn::loss::CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits.clone(), labels.clone());
    let pred = logits.argmax(1).reshape([n]);
    let correct: i64 = pred.equal(labels).int().sum().into_scalar();
    let mean: f32 = loss.into_scalar();
    EvalStats { loss_sum: f64::from(mean) * n as f64, correct: correct as u64, count: n as u64 }
}

/// Mean cross-entropy of logits `[n, classes]`.
pub(crate) fn cross_entropy(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    burn::nn::loss::CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, labels)
}
