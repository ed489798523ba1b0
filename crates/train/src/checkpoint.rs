//! Checkpoint files: named sections of numbers, written atomically.
//!
//! ```text
//! "GCCKPT1\n" | sections: name_len u32 | name | kind u8 (0 f32, 1 u64, 2 f64, 3 bytes) | count u64 | data (LE)
//! ```
//! The trainer's checkpoint directories built from these files are
//! described in `trainer/checkpoint.rs`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::records::write_atomic;

const MAGIC: &[u8; 8] = b"GCCKPT1\n";

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
}

impl Sections {
    pub fn put(&mut self, name: &str, v: Values) {
        self.0.insert(name.to_string(), v);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        for (name, v) in &self.0 {
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
        }
        out
    }

    pub fn decode(bytes: &[u8], path: &str) -> Result<Self, CheckpointError> {
        let bad =
            |problem: &str| CheckpointError::Corrupt { path: path.to_string(), problem: problem.to_string() };
        let mut rest = bytes.strip_prefix(MAGIC).ok_or_else(|| bad("not a gradcomp checkpoint"))?;
        let mut take = |n: usize| -> Result<&[u8], CheckpointError> {
            if n > rest.len() {
                return Err(bad("truncated"));
            }
            let (a, b) = rest.split_at(n);
            rest = b;
            Ok(a)
        };
        let mut s = Sections::default();
        while let Ok(len_bytes) = take(4) {
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
        if !rest.is_empty() {
            return Err(bad("trailing bytes"));
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

    pub fn f32(&self, name: &str) -> Result<&[f32], String> {
        match self.get(name) {
            Some(Values::F32(v)) => Ok(v),
            _ => Err(format!("checkpoint lacks section {name}")),
        }
    }

    pub fn u64(&self, name: &str) -> Result<&[u64], String> {
        match self.get(name) {
            Some(Values::U64(v)) => Ok(v),
            _ => Err(format!("checkpoint lacks section {name}")),
        }
    }

    pub fn f64(&self, name: &str) -> Result<&[f64], String> {
        match self.get(name) {
            Some(Values::F64(v)) => Ok(v),
            _ => Err(format!("checkpoint lacks section {name}")),
        }
    }

    pub fn bytes(&self, name: &str) -> Result<&[u8], String> {
        match self.get(name) {
            Some(Values::Bytes(v)) => Ok(v),
            _ => Err(format!("checkpoint lacks section {name}")),
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
