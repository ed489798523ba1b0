//! LeNet-5 as in Caffe's MNIST example, the network TernGrad's MNIST results
//! used: conv 20@5×5 → max-pool 2 → conv 50@5×5 → max-pool 2 → fc 500 → ReLU
//! → fc classes (431,080 parameters on MNIST). The first convolution takes
//! the data's channels and the first linear layer its image size after the
//! two convolutions and pools, so images of at least 16×16 fit.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Tensor};

use super::{classification_stats, cross_entropy, Batch, EvalStats, ImageTask, Net};

#[derive(Module, Debug)]
pub struct LeNet5 {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
    relu: Relu,
}

/// The side after conv 5×5 → pool 2 → conv 5×5 → pool 2, if at least 1.
fn side_after_features(side: usize) -> Option<usize> {
    let p2 = (side.checked_sub(4)? / 2).checked_sub(4)? / 2;
    (p2 >= 1).then_some(p2)
}

impl LeNet5 {
    /// Whether LeNet-5 fits images of this shape; the error says why not.
    pub fn check(task: &ImageTask) -> Result<(), String> {
        let [_, h, w] = task.shape;
        match (side_after_features(h), side_after_features(w)) {
            (Some(_), Some(_)) => Ok(()),
            _ => Err(format!(
                "LeNet-5 needs images of at least 16×16 pixels (two 5×5 convolutions, each followed by 2×2 pooling); the data has {h}×{w}: use fcn5 or fashion-cnn"
            )),
        }
    }

    /// LeNet-5 for `task` (call [`LeNet5::check`] first).
    pub fn new(task: &ImageTask, device: &Device) -> Self {
        let [c, h, w] = task.shape;
        let (fh, fw) = (side_after_features(h).unwrap_or(1), side_after_features(w).unwrap_or(1));
        Self {
            conv1: Conv2dConfig::new([c, 20], [5, 5]).init(device),
            conv2: Conv2dConfig::new([20, 50], [5, 5]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(50 * fh * fw, 500).init(device),
            fc2: LinearConfig::new(500, task.classes).init(device),
            relu: Relu::new(),
        }
    }

    fn logits(&self, x: Tensor<4>) -> Tensor<2> {
        let x = self.pool.forward(self.conv1.forward(x));
        let x = self.pool.forward(self.conv2.forward(x));
        let [n, c, h, w] = x.dims();
        let x = x.reshape([n, c * h * w]);
        self.fc2.forward(self.relu.forward(self.fc1.forward(x)))
    }
}

image_classifier!(LeNet5);
