//! Which built-in model trains (`[model]`), and the language models' sizes.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelName {
    Fcn5,
    Lenet5,
    FashionCnn,
    Resnet18,
    Lstm,
    Gpt,
}

impl ModelName {
    /// Whether the model reads tokens (a language model) rather than images.
    pub fn is_language_model(self) -> bool {
        matches!(self, ModelName::Lstm | ModelName::Gpt)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub name: ModelName,
    /// The LSTM language model's sizes (`vocab` is set from the corpus).
    pub lstm: LstmLmConfig,
    /// The transformer language model's sizes (`vocab` is set from the corpus).
    pub gpt: GptConfig,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self { name: ModelName::Lenet5, lstm: LstmLmConfig::default(), gpt: GptConfig::default() }
    }
}

impl ModelConfig {
    /// The configured language model's vocabulary (the synthetic corpus's
    /// size; a real corpus sets its own): the GPT's for `gpt`, else the LSTM's.
    pub fn vocab(&self) -> usize {
        match self.name {
            ModelName::Gpt => self.gpt.vocab,
            _ => self.lstm.vocab,
        }
    }
}

/// Sizes of the language model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LstmLmConfig {
    pub vocab: usize,
    pub embed: usize,
    pub hidden: usize,
    /// Dropout on the non-recurrent connections (Zaremba et al.): the
    /// embedding's output, between the LSTM layers and before the decoder;
    /// training only. 0 turns it off.
    pub dropout: f64,
}

impl Default for LstmLmConfig {
    fn default() -> Self {
        Self { vocab: 10_000, embed: 200, hidden: 200, dropout: 0.0 }
    }
}

/// Sizes of the decoder-only transformer language model (GPT-2's layout:
/// Radford et al. 2019, pre-norm blocks).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GptConfig {
    pub vocab: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads; they divide `embed`.
    pub heads: usize,
    /// Model width: token and position embeddings, every block's residual stream.
    pub embed: usize,
    /// Hidden width of each block's MLP; unset, 4 · `embed` (GPT-2's).
    pub mlp: Option<usize>,
    /// Positions the learned position embedding holds: the longest segment
    /// (`data.bptt`) the model reads.
    pub context: usize,
    /// Dropout after the embeddings and on each block's two residual
    /// branches (GPT-2's embedding and residual dropout); training only. 0
    /// turns it off.
    pub dropout: f64,
    /// The output head is the token embedding's transpose (GPT-2's); false:
    /// a linear layer of its own, without bias.
    pub tie: bool,
}

impl GptConfig {
    /// The MLP's hidden width: `mlp`, or 4 · `embed`.
    pub fn mlp_width(&self) -> usize {
        self.mlp.unwrap_or(4 * self.embed)
    }
}

impl Default for GptConfig {
    fn default() -> Self {
        Self {
            vocab: 10_000,
            layers: 4,
            heads: 4,
            embed: 256,
            mlp: None,
            context: 128,
            dropout: 0.0,
            tie: true,
        }
    }
}
