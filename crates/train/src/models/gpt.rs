//! A decoder-only transformer language model in GPT-2's layout (Radford et
//! al. 2019): token and learned position embeddings, pre-norm blocks
//! `x + attn(LN(x))`, `x + MLP(LN(x))` with causal self-attention and a GELU
//! MLP, a final layer norm, and a head tied to the token embedding (or a
//! linear layer of its own, without bias). Each batch is a segment of at
//! most `context` tokens, read from position 0.
//!
//! Initialized as GPT-2: every linear and embedding weight N(0, 0.02),
//! biases 0, layer norms 1 and 0 (GPT-2's extra 1/√(2·layers) on the
//! residual projections is left out). bench/peer/models.py's `Gpt` is the
//! same model in PyTorch, parameter for parameter.

use burn::module::Module;
use burn::nn::attention::{
    generate_autoregressive_mask, MhaInput, MultiHeadAttention, MultiHeadAttentionConfig,
};
use burn::nn::{Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::gelu;
use burn::tensor::{Bool, Device, Int, Tensor};

use super::{keyed_dropout, Batch};
use crate::config::GptConfig;

/// GPT-2's initialization of every linear and embedding weight.
const INIT: Initializer = Initializer::Normal { mean: 0.0, std: 0.02 };

#[derive(Module, Debug)]
pub struct Gpt {
    tokens: Embedding,
    positions: Embedding,
    blocks: Vec<Block>,
    norm: LayerNorm,
    /// The untied head; `None` when the head is the token embedding's transpose.
    head: Option<Linear>,
    dropout: f64,
}

/// One pre-norm transformer block.
#[derive(Module, Debug)]
struct Block {
    norm1: LayerNorm,
    /// Query, key, value and output projections, each `embed × embed` with a
    /// bias; no dropout of its own on the attention weights.
    attn: MultiHeadAttention,
    norm2: LayerNorm,
    fc: Linear,
    proj: Linear,
}

/// A linear layer with GPT-2's initialization: weight N(0, 0.02), bias 0.
fn linear(d_in: usize, d_out: usize, device: &Device) -> Linear {
    let mut l = LinearConfig::new(d_in, d_out).with_bias(false).with_initializer(INIT).init(device);
    l.bias = Some(Initializer::Zeros.init([d_out], device));
    l
}

impl Block {
    fn new(c: &GptConfig, device: &Device) -> Self {
        let mut attn = MultiHeadAttentionConfig::new(c.embed, c.heads)
            .with_dropout(0.0)
            .with_initializer(INIT)
            .init(device);
        for l in [&mut attn.query, &mut attn.key, &mut attn.value, &mut attn.output] {
            l.bias = Some(Initializer::Zeros.init([c.embed], device));
        }
        Self {
            norm1: LayerNormConfig::new(c.embed).init(device),
            attn,
            norm2: LayerNormConfig::new(c.embed).init(device),
            fc: linear(c.embed, c.mlp_width(), device),
            proj: linear(c.mlp_width(), c.embed, device),
        }
    }

    /// `x + attn(LN(x))`, then `+ MLP(LN(·))`, each branch through dropout
    /// at connection `point` and `point + 1`.
    fn forward(&self, x: Tensor<3>, mask: Tensor<3, Bool>, dropout: f64, key: u64, point: u64) -> Tensor<3> {
        let a = self.attn.forward(MhaInput::self_attn(self.norm1.forward(x.clone())).mask_attn(mask)).context;
        let x = x + keyed_dropout(a, dropout, key, point);
        let m = self.proj.forward(gelu(self.fc.forward(self.norm2.forward(x.clone()))));
        x + keyed_dropout(m, dropout, key, point + 1)
    }
}

impl Gpt {
    pub fn new(c: &GptConfig, device: &Device) -> Self {
        let embedding = |n: usize| EmbeddingConfig::new(n, c.embed).with_initializer(INIT).init(device);
        Self {
            tokens: embedding(c.vocab),
            positions: embedding(c.context),
            blocks: (0..c.layers).map(|_| Block::new(c, device)).collect(),
            norm: LayerNormConfig::new(c.embed).init(device),
            head: (!c.tie).then(|| {
                LinearConfig::new(c.embed, c.vocab).with_bias(false).with_initializer(INIT).init(device)
            }),
            dropout: c.dropout,
        }
    }

    /// Logits `[batch·steps, vocab]` of a token batch, and its targets.
    fn logits_and_targets(&self, batch: &Batch, device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
        let (x, y) = batch.tokens(device);
        let key = batch.dropout_key();
        (self.logits(x, key), y)
    }

    /// Logits `[batch·steps, vocab]` of tokens `[batch, steps]`; `key` draws
    /// the dropout masks (training only).
    pub fn logits(&self, x: Tensor<2, Int>, key: u64) -> Tensor<2> {
        let [b, t] = x.dims();
        let [context, d] = self.positions.weight.dims();
        assert!(t <= context, "a segment of {t} tokens is longer than the model's context of {context}");
        let device = x.device();
        let positions = self.positions.weight.val().slice(0..t).unsqueeze::<3>();
        let mut h = keyed_dropout(self.tokens.forward(x) + positions, self.dropout, key, 0);
        let mask = generate_autoregressive_mask(b, t, &device);
        for (i, block) in self.blocks.iter().enumerate() {
            h = block.forward(h, mask.clone(), self.dropout, key, 1 + 2 * i as u64);
        }
        let h = self.norm.forward(h).reshape([b * t, d]);
        match &self.head {
            Some(head) => head.forward(h),
            None => h.matmul(self.tokens.weight.val().transpose()),
        }
    }
}

language_model!(Gpt);
