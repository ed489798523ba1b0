//! A small CNN for Fashion-MNIST, standing in for TernGrad's CifarNet
//! (CIFAR-10 is not obtainable here): conv 32@5×5 pad 2 → ReLU → max-pool 2 →
//! conv 64@5×5 pad 2 → ReLU → max-pool 2 → fc 256 → ReLU → fc classes.
//! The padded convolutions keep the image size, so any image of at least 4×4
//! fits; the first layers take the data's channels and size.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::tensor::{Device, Tensor};

use super::{classification_stats, cross_entropy, Batch, EvalStats, ImageTask, Net};

#[derive(Module, Debug)]
pub struct FashionCnn {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
    relu: Relu,
}

impl FashionCnn {
    /// Whether the CNN fits images of this shape (two 2×2 pools need 4×4).
    pub fn check(task: &ImageTask) -> Result<(), String> {
        let [_, h, w] = task.shape;
        if h >= 4 && w >= 4 {
            Ok(())
        } else {
            Err(format!("fashion-cnn needs images of at least 4×4 pixels (two 2×2 pools); the data has {h}×{w}: use fcn5"))
        }
    }

    /// The CNN for `task` (call [`FashionCnn::check`] first).
    pub fn new(task: &ImageTask, device: &Device) -> Self {
        let [c, h, w] = task.shape;
        let conv = |c: [usize; 2]| {
            Conv2dConfig::new(c, [5, 5]).with_padding(PaddingConfig2d::Explicit(2, 2, 2, 2)).init(device)
        };
        Self {
            conv1: conv([c, 32]),
            conv2: conv([32, 64]),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(64 * (h / 4).max(1) * (w / 4).max(1), 256).init(device),
            fc2: LinearConfig::new(256, task.classes).init(device),
            relu: Relu::new(),
        }
    }

    fn logits(&self, x: Tensor<4>) -> Tensor<2> {
        let x = self.pool.forward(self.relu.forward(self.conv1.forward(x)));
        let x = self.pool.forward(self.relu.forward(self.conv2.forward(x)));
        let [n, c, h, w] = x.dims();
        let x = x.reshape([n, c * h * w]);
        self.fc2.forward(self.relu.forward(self.fc1.forward(x)))
    }
}

image_classifier!(FashionCnn);
