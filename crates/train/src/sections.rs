//! Checkpoint files: named sections of numbers, written atomically.
//!
//! ```text
//! "GCCKPT2\n" | sections: name_len u32 | name | kind u8 (0 f32, 1 u64, 2 f64, 3 bytes) | count u64 | data (LE) | check u64
//! ```
//! `check` is FNV-1a over the section's bytes before it (name length to
//! data), so a flipped bit or a spliced section is an error naming the
//! section, not a silently different run. Format 1 (`GCCKPT1`, no checks) is
//! refused with a message saying so.
//! The trainer's checkpoint directories built from these files are
//! described in `trainer/checkpoint.rs`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::records::write_atomic;

const MAGIC: &[u8; 8] = b"GCCKPT2\n";
/// The first format, without checksums.
const MAGIC_V1: &[u8; 8] = b"GCCKPT1\n";

/// A section's values.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    U64(Vec<u64>),
    F64(Vec<f64>),
    /// Opaque bytes (burn's optimizer record, JSON of typed counters).
    Bytes(Vec<u8>),
}

/// Named sections, in name order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sections(pub BTreeMap<String, Values>);

/// Why a checkpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {problem}")]
    Corrupt { path: String, problem: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// A saved model with a non-finite parameter: a diverged run.
    #[error("parameter {parameter} of the saved model is {value}: a diverged run cannot be resumed or evaluated; resume an earlier checkpoint")]
    Diverged { parameter: usize, value: f32 },
    /// A section a reader needs is absent, or holds another kind of values.
    #[error("the checkpoint lacks section {name} ({kind} values)")]
    MissingSection { name: String, kind: &'static str },
}

impl Sections {
    pub fn put(&mut self, name: &str, v: Values) {
        self.0.insert(name.to_string(), v);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        for (name, v) in &self.0 {
            let start = out.len();
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            let (kind, count) = match v {
                Values::F32(x) => (0u8, x.len()),
                Values::U64(x) => (1, x.len()),
                Values::F64(x) => (2, x.len()),
                Values::Bytes(x) => (3, x.len()),
            };
            out.push(kind);
            out.extend_from_slice(&(count as u64).to_le_bytes());
            match v {
                Values::F32(x) => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
                Values::U64(x) => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
                Values::F64(x) => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
                Values::Bytes(x) => out.extend_from_slice(x),
            }
            let check = gradcomp_dp::params::checksum_bytes(&out[start..]);
            out.extend_from_slice(&check.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8], path: &str) -> Result<Self, CheckpointError> {
        let bad =
            |problem: &str| CheckpointError::Corrupt { path: path.to_string(), problem: problem.to_string() };
        if bytes.starts_with(MAGIC_V1) {
            return Err(bad(
                "a format-1 checkpoint (no checksums), written by an older gradcomp: this one reads format 2; start the run again",
            ));
        }
        let mut rest = bytes.strip_prefix(MAGIC).ok_or_else(|| bad("not a gradcomp checkpoint"))?;
        let mut s = Sections::default();
        while !rest.is_empty() {
            let section = rest;
            let mut take = |n: usize| -> Result<&[u8], CheckpointError> {
                if n > rest.len() {
                    return Err(bad("truncated"));
                }
                let (a, b) = rest.split_at(n);
                rest = b;
                Ok(a)
            };
            let len_bytes = take(4)?;
            let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
            let name =
                std::str::from_utf8(take(len)?).map_err(|_| bad("section name is not UTF-8"))?.to_string();
            let kind = take(1)?[0];
            let count = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
            let width = match kind {
                3 => 1,
                0 => 4,
                1 | 2 => 8,
                _ => return Err(bad("unknown section kind")),
            };
            let n = usize::try_from(count)
                .ok()
                .and_then(|c| c.checked_mul(width))
                .ok_or_else(|| bad("section too large"))?;
            let data = take(n)?;
            // What the checksum covers: name length, name, kind, count, data.
            let body = 4 + len + 1 + 8 + n;
            let check = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
            if check != gradcomp_dp::params::checksum_bytes(&section[..body]) {
                return Err(CheckpointError::Corrupt {
                    path: path.to_string(),
                    problem: format!("section {name} fails its checksum: the file is damaged"),
                });
            }
            if s.0.contains_key(&name) {
                return Err(bad("a section appears twice"));
            }
            let v = match kind {
                0 => Values::F32(
                    data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4"))).collect(),
                ),
                1 => Values::U64(
                    data.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8"))).collect(),
                ),
                3 => Values::Bytes(data.to_vec()),
                _ => Values::F64(
                    data.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8"))).collect(),
                ),
            };
            s.0.insert(name, v);
        }
        Ok(s)
    }

    pub fn write(&self, path: &Path) -> Result<(), CheckpointError> {
        write_atomic(path, &self.encode())
            .map_err(|source| CheckpointError::Io { path: path.display().to_string(), source })
    }

    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io { path: p.clone(), source })?;
        Self::decode(&bytes, &p)
    }

    fn get(&self, name: &str) -> Option<&Values> {
        self.0.get(name)
    }

    pub fn f32(&self, name: &str) -> Result<&[f32], CheckpointError> {
        match self.get(name) {
            Some(Values::F32(v)) => Ok(v),
            _ => Err(CheckpointError::MissingSection { name: name.to_string(), kind: "f32" }),
        }
    }

    pub fn u64(&self, name: &str) -> Result<&[u64], CheckpointError> {
        match self.get(name) {
            Some(Values::U64(v)) => Ok(v),
            _ => Err(CheckpointError::MissingSection { name: name.to_string(), kind: "u64" }),
        }
    }

    pub fn f64(&self, name: &str) -> Result<&[f64], CheckpointError> {
        match self.get(name) {
            Some(Values::F64(v)) => Ok(v),
            _ => Err(CheckpointError::MissingSection { name: name.to_string(), kind: "f64" }),
        }
    }

    pub fn bytes(&self, name: &str) -> Result<&[u8], CheckpointError> {
        match self.get(name) {
            Some(Values::Bytes(v)) => Ok(v),
            _ => Err(CheckpointError::MissingSection { name: name.to_string(), kind: "bytes" }),
        }
    }

    /// Sections whose names start with `prefix`, as f32 buffers under the rest of the name.
    pub fn f32_under(&self, prefix: &str) -> std::collections::BTreeMap<String, Vec<f32>> {
        self.0
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter_map(|(k, v)| match v {
                Values::F32(x) => Some((k[prefix.len()..].to_string(), x.clone())),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_corruption() {
        let mut s = Sections::default();
        s.put("params", Values::F32(vec![1.0, -2.5]));
        s.put("counters", Values::U64(vec![7, 8]));
        s.put("wall", Values::F64(vec![0.5]));
        s.put("dp.memory.0.0", Values::F32(vec![1.5]));
        s.put("optimizer", Values::Bytes(vec![1, 2, 3]));
        let b = s.encode();
        assert_eq!(Sections::decode(&b, "x").unwrap(), s);
        assert_eq!(s.bytes("optimizer").unwrap(), [1, 2, 3]);
        assert_eq!(s.f32_under("dp.").get("memory.0.0"), Some(&vec![1.5]));
        assert!(Sections::decode(&b[..b.len() - 1], "x").is_err());
        assert!(Sections::decode(b"nope", "x").is_err());
    }

    #[test]
    fn every_flipped_bit_is_caught_and_the_old_format_is_named() {
        let mut s = Sections::default();
        s.put("params", Values::F32(vec![1.0, -2.5, 3.25]));
        s.put("counters", Values::Bytes(b"{\"step\":3}".to_vec()));
        let b = s.encode();
        for i in MAGIC.len() * 8..b.len() * 8 {
            let mut d = b.clone();
            d[i / 8] ^= 1 << (i % 8);
            assert!(Sections::decode(&d, "x").is_err(), "bit {i} flipped went unnoticed");
        }
        let e = Sections::decode(&b.iter().map(|&x| x ^ 0xff).collect::<Vec<_>>(), "x").unwrap_err();
        assert!(e.to_string().contains("not a gradcomp checkpoint"), "{e}");
        let mut old = MAGIC_V1.to_vec();
        old.extend_from_slice(&b[8..]);
        let e = Sections::decode(&old, "x").unwrap_err().to_string();
        assert!(e.contains("format-1") && e.contains("start the run again"), "{e}");
        // A data bit names its section.
        let mut d = b.clone();
        let at = b.len() - 12;
        d[at] ^= 4;
        let e = Sections::decode(&d, "x").unwrap_err().to_string();
        assert!(e.contains("fails its checksum"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]
        #[test]
        fn arbitrary_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut b = MAGIC.to_vec();
            b.extend(tail);
            let _ = Sections::decode(&b, "fuzz");
        }
    }
}
