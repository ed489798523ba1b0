//! Which built-in model trains (`[model]`), and the language model's sizes.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelName {
    Fcn5,
    Lenet5,
    FashionCnn,
    Resnet18,
    Lstm,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub name: ModelName,
    /// Language model sizes (`vocab` is set from the corpus).
    pub lstm: LstmLmConfig,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self { name: ModelName::Lenet5, lstm: LstmLmConfig::default() }
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
