//! [`Batch`]: one minibatch in host memory, and its tensors on a device.

use burn::tensor::{Device, Int, Tensor, TensorData};

/// One minibatch, in host memory.
#[derive(Clone, Debug, PartialEq)]
pub enum Batch {
    /// `pixels`: `len × channels × height × width` in [0, 1]; `labels`: class indices.
    Images { pixels: Vec<f32>, labels: Vec<i64>, channels: usize, height: usize, width: usize },
    /// Token ids `[batch × steps]`, row-major; `targets` are the next tokens.
    /// `key` seeds the batch's dropout masks: a pure function of (seed, rank,
    /// epoch, index), so masks never depend on how worker threads interleave
    /// (burn's own dropout draws from one global generator).
    Tokens { inputs: Vec<i64>, targets: Vec<i64>, batch: usize, steps: usize, key: u64 },
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

    /// The images `[n, channels, height, width]` and labels `[n]` of an
    /// image batch, on `device`. Panics on a token batch: a model that takes
    /// images was given a language-model dataset, which the trainer rejects
    /// before any work.
    pub fn images(&self, device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
        let Batch::Images { pixels, labels, channels, height, width } = self else {
            panic!("an image model was given a token batch")
        };
        let n = labels.len();
        let x = Tensor::from_data(TensorData::new(pixels.clone(), [n, *channels, *height, *width]), device);
        let y = Tensor::from_data(TensorData::new(labels.clone(), [n]), device);
        (x, y)
    }

    /// The key that seeds a token batch's dropout masks (0 for an image batch).
    pub fn dropout_key(&self) -> u64 {
        match self {
            Batch::Tokens { key, .. } => *key,
            Batch::Images { .. } => 0,
        }
    }

    /// The inputs `[batch, steps]` and next-token targets `[batch·steps]` of a
    /// token batch, on `device`. Panics on an image batch.
    pub fn tokens(&self, device: &Device) -> (Tensor<2, Int>, Tensor<1, Int>) {
        let Batch::Tokens { inputs, targets, batch, steps, .. } = self else {
            panic!("a language model was given an image batch")
        };
        let x = Tensor::from_data(TensorData::new(inputs.clone(), [*batch, *steps]), device);
        let y = Tensor::from_data(TensorData::new(targets.clone(), [batch * steps]), device);
        (x, y)
    }
}
