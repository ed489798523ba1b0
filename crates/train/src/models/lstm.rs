//! A 2-layer LSTM language model (Zaremba et al.'s PTB setup, as in the Top-k
//! and CELGC papers): embedding → LSTM → LSTM → linear decoder over the
//! vocabulary. Each batch is a truncated-BPTT segment starting from zero
//! state.

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig, Lstm, LstmConfig};
use burn::tensor::{Device, Int, Tensor};

use super::{keyed_dropout, Batch};
use crate::config::LstmLmConfig;

#[derive(Module, Debug)]
pub struct LstmLm {
    embed: Embedding,
    lstm1: Lstm,
    lstm2: Lstm,
    decoder: Linear,
    dropout: f64,
}

impl LstmLm {
    pub fn new(c: &LstmLmConfig, device: &Device) -> Self {
        Self {
            embed: EmbeddingConfig::new(c.vocab, c.embed).init(device),
            lstm1: LstmConfig::new(c.embed, c.hidden, true).init(device),
            lstm2: LstmConfig::new(c.hidden, c.hidden, true).init(device),
            decoder: LinearConfig::new(c.hidden, c.vocab).init(device),
            dropout: c.dropout,
        }
    }

    fn logits_and_targets(&self, batch: &Batch, device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
        let (x, y) = batch.tokens(device);
        let key = batch.dropout_key();
        let h = keyed_dropout(self.embed.forward(x), self.dropout, key, 0);
        let (h, _) = self.lstm1.forward(h, None);
        let h = keyed_dropout(h, self.dropout, key, 1);
        let (h, _) = self.lstm2.forward(h, None);
        let h = keyed_dropout(h, self.dropout, key, 2);
        let [b, t, d] = h.dims();
        (self.decoder.forward(h.reshape([b * t, d])), y)
    }
}

language_model!(LstmLm);
