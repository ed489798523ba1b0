//! ResNet-18 in its CIFAR form (He et al., 2016; the variant of the
//! Gaussian-k paper's experiments): a 3×3 stem of 64 channels with no
//! max-pool, four stages of two basic blocks (64, 128, 256, 512 channels,
//! stride 2 from the second stage on), global average pooling and one linear
//! layer. Basic blocks are conv3×3 → BN → ReLU → conv3×3 → BN, plus the input
//! (through a 1×1 convolution and BN where the shape changes), then ReLU.
//! With 3×32×32 inputs and 10 classes it has 11,173,962 trainable
//! parameters, the usual count. BatchNorm's running statistics are buffers, not parameters:
//! they take no gradient and are not exchanged.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::tensor::{Device, Tensor};

use gradcomp_dp::Cuts;

use super::{classification_stats, cross_entropy, Batch, EvalStats, ImageTask, Net};

fn conv(channels: [usize; 2], kernel: usize, stride: usize, device: &Device) -> Conv2d {
    let pad = kernel / 2;
    Conv2dConfig::new(channels, [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false)
        .init(device)
}

/// The 1×1 convolution and BN that match the input to a block's output shape.
#[derive(Module, Debug)]
struct Shortcut {
    conv: Conv2d,
    bn: BatchNorm,
}

#[derive(Module, Debug)]
struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm,
    conv2: Conv2d,
    bn2: BatchNorm,
    shortcut: Option<Shortcut>,
    relu: Relu,
}

impl BasicBlock {
    fn new(input: usize, output: usize, stride: usize, device: &Device) -> Self {
        let shortcut = (stride != 1 || input != output).then(|| Shortcut {
            conv: conv([input, output], 1, stride, device),
            bn: BatchNormConfig::new(output).init(device),
        });
        Self {
            conv1: conv([input, output], 3, stride, device),
            bn1: BatchNormConfig::new(output).init(device),
            conv2: conv([output, output], 3, 1, device),
            bn2: BatchNormConfig::new(output).init(device),
            shortcut,
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let y = self.relu.forward(self.bn1.forward(self.conv1.forward(x.clone())));
        let y = self.bn2.forward(self.conv2.forward(y));
        let skip = match &self.shortcut {
            Some(s) => s.bn.forward(s.conv.forward(x)),
            None => x,
        };
        self.relu.forward(y + skip)
    }
}

#[derive(Module, Debug)]
pub struct ResNet18 {
    stem: Conv2d,
    stem_bn: BatchNorm,
    blocks: Vec<BasicBlock>,
    pool: AdaptiveAvgPool2d,
    fc: Linear,
    relu: Relu,
}

impl ResNet18 {
    /// Whether ResNet-18 fits images of this shape: three stride-2 stages
    /// need at least 8×8 pixels to keep a spatial extent to pool.
    pub fn check(task: &ImageTask) -> Result<(), String> {
        let [_, h, w] = task.shape;
        if h >= 8 && w >= 8 {
            Ok(())
        } else {
            Err(format!("resnet18 needs images of at least 8×8 pixels (three stride-2 stages); the data has {h}×{w}: use fcn5 or fashion-cnn"))
        }
    }

    /// ResNet-18 for `task` (call [`ResNet18::check`] first).
    pub fn new(task: &ImageTask, device: &Device) -> Self {
        let widths = [64, 128, 256, 512];
        let mut blocks = Vec::with_capacity(8);
        let mut input = 64;
        for (stage, &width) in widths.iter().enumerate() {
            let stride = if stage == 0 { 1 } else { 2 };
            blocks.push(BasicBlock::new(input, width, stride, device));
            blocks.push(BasicBlock::new(width, width, 1, device));
            input = width;
        }
        Self {
            stem: conv([task.shape[0], 64], 3, 1, device),
            stem_bn: BatchNormConfig::new(64).init(device),
            blocks,
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            fc: LinearConfig::new(512, task.classes).init(device),
            relu: Relu::new(),
        }
    }

    fn logits(&self, x: Tensor<4>) -> Tensor<2> {
        self.logits_cut(x, &mut Cuts::none())
    }

    /// The logits, with the forward pass cut after the stem and after every
    /// residual block: a staged backward pass yields the blocks' gradients
    /// one block at a time, from the last.
    fn logits_cut(&self, x: Tensor<4>, cuts: &mut Cuts) -> Tensor<2> {
        let mut x = cuts.cut(self.relu.forward(self.stem_bn.forward(self.stem.forward(x))));
        for block in &self.blocks {
            x = cuts.cut(block.forward(x));
        }
        let [n, c, _, _] = x.dims();
        self.fc.forward(self.pool.forward(x).reshape([n, c]))
    }
}

image_classifier!(ResNet18, staged);

#[cfg(test)]
mod tests {
    use burn::optim::{GradientsParams, SgdConfig};

    use super::*;

    #[test]
    fn cifar_form_has_the_usual_parameter_count() {
        let task = ImageTask { shape: [3, 32, 32], classes: 10 };
        // burn's count includes BatchNorm's running mean and variance: 2 × 4,800 channels.
        assert_eq!(ResNet18::new(&task, &gradcomp_dp::default_device()).num_params(), 11_173_962 + 2 * 4_800);
        assert!(ResNet18::check(&ImageTask { shape: [1, 7, 28], classes: 2 }).is_err());
    }

    #[test]
    fn learns_a_fixed_batch() {
        let device = gradcomp_dp::default_device();
        let task = ImageTask { shape: [3, 8, 8], classes: 4 };
        let mut model = ResNet18::new(&task, &device);
        let n = 8;
        // Class c is an image of brightness c/4 plus a fixed texture.
        let pixels = (0..n * 3 * 64)
            .map(|i| (i / (3 * 64) % 4) as f32 / 4.0 + ((i * 37 % 101) as f32) / 404.0)
            .collect();
        let batch = Batch::Images {
            pixels,
            labels: (0..n as i64).map(|i| i % 4).collect(),
            channels: 3,
            height: 8,
            width: 8,
        };
        let mut optim = SgdConfig::new().init();
        let mut losses = Vec::new();
        for _ in 0..12 {
            let loss = model.loss(&batch, &device);
            losses.push(loss.clone().into_scalar::<f32>());
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.01, model, grads);
        }
        assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
        assert!(losses[11] < 0.5 * losses[0], "loss did not fall: {losses:?}");
    }
}
