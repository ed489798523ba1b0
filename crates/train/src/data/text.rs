//! Word-level text corpora (Penn Treebank, Mikolov's split, or any corpus
//! in the same form): whitespace tokens, one `<eos>` per line, the
//! vocabulary built from the training file. Words of the other files that
//! training never saw are read as `<unk>` and counted.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::error::DataError;
use crate::config::TextFiles;

/// The token unseen words become.
pub const UNK: &str = "<unk>";

/// Word ↔ id, most frequent words first (ties by spelling), so ids are stable.
/// It always holds `<unk>` (PTB's own marker; added last when the training
/// text has none).
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
        let mut words: Vec<String> = words.into_iter().map(|(w, _)| w.to_string()).collect();
        if !words.iter().any(|w| w == UNK) {
            words.push(UNK.to_string());
        }
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

    /// Token ids of `text` with `<eos>` per line, and how many words were
    /// not in the vocabulary (read as `<unk>`).
    pub fn encode(&self, text: &str) -> (Vec<u32>, u64) {
        let unk = self.id(UNK).expect("the vocabulary holds <unk>");
        let mut unknown = 0;
        let mut out = Vec::new();
        for line in text.lines() {
            for w in line.split_whitespace().chain(std::iter::once("<eos>")) {
                out.push(self.id(w).unwrap_or_else(|| {
                    unknown += 1;
                    unk
                }));
            }
        }
        (out, unknown)
    }
}

/// A corpus as token ids.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub vocab: Vocabulary,
    pub train: Vec<u32>,
    pub valid: Option<Vec<u32>>,
    pub test: Vec<u32>,
    /// Words not in the training vocabulary, per split (`valid`, `test`).
    pub unknown_words: BTreeMap<String, u64>,
}

impl Corpus {
    /// Loads `files` from `dir`; `missing` says how to get a file that is not there.
    pub fn load(dir: &Path, files: &TextFiles, dataset: &str, missing: &str) -> Result<Self, DataError> {
        let read = |name: &str| -> Result<(String, PathBuf), DataError> {
            let path = dir.join(name);
            if !path.is_file() {
                return Err(DataError::Missing {
                    dataset: dataset.to_string(),
                    file: name.to_string(),
                    dir: dir.to_path_buf(),
                    hint: missing.to_string(),
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
        let (train_text, _) = read(&files.train)?;
        let vocab = Vocabulary::from_text(&train_text);
        let (train, _) = vocab.encode(&train_text);
        let mut unknown_words = BTreeMap::new();
        let valid = if files.valid.is_empty() {
            None
        } else {
            let (ids, unknown) = vocab.encode(&read(&files.valid)?.0);
            unknown_words.insert("valid".to_string(), unknown);
            Some(ids)
        };
        let (test, unknown) = vocab.encode(&read(&files.test)?.0);
        unknown_words.insert("test".to_string(), unknown);
        Ok(Self { vocab, train, valid, test, unknown_words })
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
        let (ids, unknown) = v.encode("a zzz\n");
        assert_eq!(ids, [0, v.id(UNK).unwrap(), 1]);
        assert_eq!(unknown, 1);
    }

    #[test]
    fn unseen_words_become_unk_and_are_counted_even_without_unk_in_training() {
        let v = Vocabulary::from_text("a b\n");
        assert_eq!(v.words.last().map(String::as_str), Some(UNK));
        let (ids, unknown) = v.encode("q a r\n");
        let unk = v.id(UNK).unwrap();
        assert_eq!(ids, [unk, v.id("a").unwrap(), unk, v.id("<eos>").unwrap()]);
        assert_eq!(unknown, 2);
    }

    #[test]
    fn a_corpus_in_any_directory_with_its_own_names() {
        let dir = std::env::temp_dir().join(format!("gradcomp-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tr.txt"), "the cat sat\nthe dog sat\n").unwrap();
        std::fs::write(dir.join("te.txt"), "the bird sat\n").unwrap();
        let files = TextFiles { train: "tr.txt".into(), valid: String::new(), test: "te.txt".into() };
        let c = Corpus::load(&dir, &files, "text", "set data.test_text").unwrap();
        assert!(c.valid.is_none());
        assert_eq!(c.unknown_words.get("test"), Some(&1));
        assert_eq!(c.test.len(), 4);
        let e = Corpus::load(&dir, &TextFiles::default(), "text", "set data.train_text").unwrap_err();
        assert!(e.to_string().contains("train.txt") && e.to_string().contains("set data.train_text"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
