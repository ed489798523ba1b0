//! FCN-5 of Shi et al.'s Top-k study: 784-200-200-10 with ReLU (199,210
//! parameters).

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Tensor};

use super::{classification_stats, cross_entropy, Batch, EvalStats, Net};

#[derive(Module, Debug)]
pub struct Fcn5 {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    relu: Relu,
}

impl Fcn5 {
    pub fn new(device: &Device) -> Self {
        Self {
            fc1: LinearConfig::new(784, 200).init(device),
            fc2: LinearConfig::new(200, 200).init(device),
            fc3: LinearConfig::new(200, 10).init(device),
            relu: Relu::new(),
        }
    }

    fn logits(&self, x: Tensor<4>) -> Tensor<2> {
        let [n, c, h, w] = x.dims();
        let x = x.reshape([n, c * h * w]);
        let x = self.relu.forward(self.fc1.forward(x));
        let x = self.relu.forward(self.fc2.forward(x));
        self.fc3.forward(x)
    }
}

image_classifier!(Fcn5);
