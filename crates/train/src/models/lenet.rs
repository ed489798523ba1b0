//! LeNet-5 as in Caffe's MNIST example, the network TernGrad's MNIST results
//! used: conv 20@5×5 → max-pool 2 → conv 50@5×5 → max-pool 2 → fc 500 → ReLU
//! → fc 10 (431,080 parameters).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Tensor};

use super::{classification_stats, cross_entropy, Batch, EvalStats, Net};

#[derive(Module, Debug)]
pub struct LeNet5 {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
    relu: Relu,
}

impl LeNet5 {
    pub fn new(device: &Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 20], [5, 5]).init(device),
            conv2: Conv2dConfig::new([20, 50], [5, 5]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(50 * 4 * 4, 500).init(device),
            fc2: LinearConfig::new(500, 10).init(device),
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
