//! Penn Treebank, word level (Mikolov's split): whitespace tokens, one
//! `<eos>` per line, vocabulary built from the training split.

use std::collections::HashMap;
use std::path::Path;

use super::DataError;

/// Word ↔ id, most frequent words first (ties by spelling), so ids are stable.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocabulary {
    pub words: Vec<String>,
    index: HashMap<String, u32>,
}

impl Vocabulary {
    pub fn from_text(text: &str) -> Self {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for line in text.lines() {
            for w in line.split_whitespace().chain(std::iter::once("<eos>")) {
                *counts.entry(w).or_default() += 1;
            }
        }
        let mut words: Vec<(&str, u64)> = counts.into_iter().collect();
        words.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let words: Vec<String> = words.into_iter().map(|(w, _)| w.to_string()).collect();
        let index = words.iter().enumerate().map(|(i, w)| (w.clone(), i as u32)).collect();
        Self { words, index }
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn id(&self, w: &str) -> Option<u32> {
        self.index.get(w).copied()
    }

    /// Token ids of `text` with `<eos>` per line; unknown words become
    /// `<unk>` (PTB's own marker), or are an error if the vocabulary has none.
    pub fn encode(&self, text: &str, path: &Path) -> Result<Vec<u32>, DataError> {
        let unk = self.id("<unk>");
        let mut out = Vec::new();
        for line in text.lines() {
            for w in line.split_whitespace().chain(std::iter::once("<eos>")) {
                match self.id(w).or(unk) {
                    Some(id) => out.push(id),
                    None => {
                        return Err(DataError::corrupt(
                            path,
                            format!("word {w:?} is not in the training vocabulary"),
                        ))
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The three splits as token ids.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub vocab: Vocabulary,
    pub train: Vec<u32>,
    pub valid: Vec<u32>,
    pub test: Vec<u32>,
}

impl Corpus {
    /// Loads `data_dir/ptb/ptb.{train,valid,test}.txt`.
    pub fn load_ptb(data_dir: &Path) -> Result<Self, DataError> {
        let dir = data_dir.join("ptb");
        let read = |split: &str| -> Result<(String, std::path::PathBuf), DataError> {
            let path = dir.join(format!("ptb.{split}.txt"));
            if !path.is_file() {
                return Err(DataError::Missing {
                    dataset: "Penn Treebank",
                    file: format!("ptb.{split}.txt"),
                    dir: dir.clone(),
                    fetch: "ptb",
                });
            }
            let bytes =
                std::fs::read(&path).map_err(|source| DataError::Io { path: path.clone(), source })?;
            let text = String::from_utf8(bytes).map_err(|_| DataError::corrupt(&path, "not UTF-8 text"))?;
            if text.trim().is_empty() {
                return Err(DataError::corrupt(&path, "empty"));
            }
            Ok((text, path))
        };
        let (train_text, train_path) = read("train")?;
        let vocab = Vocabulary::from_text(&train_text);
        let train = vocab.encode(&train_text, &train_path)?;
        let (valid_text, valid_path) = read("valid")?;
        let valid = vocab.encode(&valid_text, &valid_path)?;
        let (test_text, test_path) = read("test")?;
        let test = vocab.encode(&test_text, &test_path)?;
        Ok(Self { vocab, train, valid, test })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_orders_by_frequency_and_appends_eos() {
        let v = Vocabulary::from_text("a b a\nc a <unk>\n");
        assert_eq!(v.words[0], "a");
        assert_eq!(v.words[1], "<eos>");
        let ids = v.encode("a zzz\n", Path::new("t")).unwrap();
        assert_eq!(ids, [0, v.id("<unk>").unwrap(), 1]);
        let strict = Vocabulary::from_text("a b\n");
        assert!(strict.encode("q\n", Path::new("t")).unwrap_err().to_string().contains("\"q\""));
    }
}
