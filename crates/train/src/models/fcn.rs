//! FCN-5 of Shi et al.'s Top-k study: 784-200-200-10 with ReLU (199,210
//! parameters on MNIST); the input takes any image flattened, the output the
//! data's classes.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Tensor};

use super::{classification_stats, cross_entropy, Batch, EvalStats, ImageTask, Net};

#[derive(Module, Debug)]
pub struct Fcn5 {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    relu: Relu,
}

impl Fcn5 {
    /// FCN-5 for `task`: input `channels·height·width`, output `classes`.
    pub fn new(task: &ImageTask, device: &Device) -> Self {
        let input = task.shape.iter().product();
        Self {
            fc1: LinearConfig::new(input, 200).init(device),
            fc2: LinearConfig::new(200, 200).init(device),
            fc3: LinearConfig::new(200, task.classes).init(device),
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
