//! `gradcomp bench fuzz`: every parser of outside input fed generated and
//! mutated bytes, at scale (issue #12: at least 1,000,000 inputs each).
//!
//! Parsers: the wire decoders, IDX image and label files, gzipped IDX, text
//! corpora, checkpoint files, configurations and run records. Each input is
//! a mutation of a valid seed (bit flips, interesting values, cut, insert,
//! delete, splice), arbitrary bytes, or, for checkpoints, a valid file whose
//! section contents were mutated and re-sealed with fresh checksums, so the
//! readers behind the checksums are reached too. A parser must return (an
//! error or a value) and never panic; a panic is caught, counted and shown,
//! and the run exits non-zero. The CI runs a short smoke version
//! (`smoke_run_of_every_parser`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args as ClapArgs;
use gradcomp_compress::codec::harness;
use gradcomp_compress::UnitRng;
use gradcomp_train::config::TrainConfig;
use gradcomp_train::data::{images_file, labels_file, parse_file_bytes, FileKind};
use gradcomp_train::records::{EpochRecord, Manifest, StepRecord};
use gradcomp_train::sections::{Sections, Values};
use gradcomp_train::trainer::checkpoint_bytes;

#[derive(ClapArgs)]
pub struct Args {
    /// Inputs per parser.
    #[arg(long, default_value_t = 1_000_000)]
    pub inputs: u64,
    /// Only these parsers (comma-separated); all by default.
    #[arg(long, value_delimiter = ',')]
    pub parser: Vec<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Reseal {
    No,
    /// Checkpoint sections, sealed with fresh checksums.
    Sections,
    /// A gzip stream's content, compressed again (a valid CRC).
    Gzip,
}

/// One parser under test: its seeds and how to run it on bytes.
struct Target {
    name: &'static str,
    seeds: Vec<Vec<u8>>,
    run: fn(&[u8]) -> bool,
    /// Half the inputs mutate inside the container and re-seal it, so the
    /// parsers behind its checksums see them.
    reseal: Reseal,
}

fn targets() -> Vec<Target> {
    let shape = [1, 8, 8];
    let pixels: Vec<u8> = (0..64 * 5).map(|i| (i * 37 % 256) as u8).collect();
    let images = images_file(&pixels, 5, shape);
    let images4 = images_file(&pixels, 5, [4, 4, 4]);
    let gz = gzip(&images);
    let text = b"the cat sat on the mat\nthe dog <unk> sat\n\n  a  b\tc\n".to_vec();
    let step = serde_json::to_vec(&StepRecord::default()).expect("serializes");
    let epoch = serde_json::to_vec(&EpochRecord::default()).expect("serializes");
    let configs: Vec<Vec<u8>> = [
        include_str!("../../../../experiments/quick-synthetic.toml"),
        include_str!("../../../../experiments/celgc-ptb-i2.toml"),
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain(std::iter::once(TrainConfig::default().to_toml().into_bytes()))
    .collect();
    vec![
        Target { name: "wire", seeds: harness::valid_messages(), run: harness::exercise, reseal: Reseal::No },
        Target {
            name: "idx-images",
            seeds: vec![images, images4],
            run: |b| parse_file_bytes(FileKind::IdxImages, b).is_ok(),
            reseal: Reseal::No,
        },
        Target {
            name: "idx-labels",
            seeds: vec![labels_file(&[0, 1, 2, 9, 255])],
            run: |b| parse_file_bytes(FileKind::IdxLabels, b).is_ok(),
            reseal: Reseal::No,
        },
        Target {
            name: "gzip-idx",
            seeds: vec![gz],
            run: |b| parse_file_bytes(FileKind::GzipImages, b).is_ok(),
            reseal: Reseal::Gzip,
        },
        Target {
            name: "text",
            seeds: vec![text],
            run: |b| parse_file_bytes(FileKind::Text, b).is_ok(),
            reseal: Reseal::No,
        },
        Target {
            name: "checkpoint",
            seeds: vec![checkpoint_bytes::sample_file_bytes()],
            run: |b| checkpoint_bytes::parse_file_bytes(b).is_ok(),
            reseal: Reseal::Sections,
        },
        Target {
            name: "config",
            seeds: configs,
            run: |b| std::str::from_utf8(b).is_ok_and(|t| TrainConfig::from_toml(t, &[]).is_ok()),
            reseal: Reseal::No,
        },
        Target {
            name: "records",
            seeds: vec![step, epoch],
            run: |b| {
                // What `read_jsonl`/`read_json` do per line, for every record type.
                let Ok(t) = std::str::from_utf8(b) else { return false };
                let step = t.lines().all(|l| serde_json::from_str::<StepRecord>(l).is_ok());
                let epoch = t.lines().all(|l| serde_json::from_str::<EpochRecord>(l).is_ok());
                let manifest = serde_json::from_str::<Manifest>(t).is_ok();
                step || epoch || manifest
            },
            reseal: Reseal::No,
        },
    ]
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("in memory");
    e.finish().expect("in memory")
}

/// Values that sit on boundaries parsers check.
const INTERESTING_U32: [u32; 10] = [0, 1, 2, 0x7f, 0x80, 0xff, 0xffff, 0x7fff_ffff, 0x8000_0000, u32::MAX];

/// One mutated input from `seeds`.
fn mutate(r: &mut UnitRng, seeds: &[Vec<u8>], out: &mut Vec<u8>) {
    out.clear();
    if r.below(10) == 0 {
        // Arbitrary bytes.
        let n = r.below(256) as usize;
        out.extend((0..n).map(|_| (r.next_u64() as u32) as u8));
        return;
    }
    out.extend_from_slice(&seeds[r.below(seeds.len() as u64) as usize]);
    for _ in 0..1 + r.below(4) {
        let len = out.len() as u64;
        match r.below(8) {
            0 if len > 0 => {
                let i = r.below(len) as usize;
                out[i] ^= 1 << r.below(8);
            }
            1 if len > 0 => {
                let i = r.below(len) as usize;
                out[i] = (r.next_u64() as u32) as u8;
            }
            2 if len >= 4 => {
                // A boundary value as a 4-byte integer, either byte order.
                let i = r.below(len - 3) as usize;
                let v = INTERESTING_U32[r.below(INTERESTING_U32.len() as u64) as usize];
                let b = if r.below(2) == 0 { v.to_be_bytes() } else { v.to_le_bytes() };
                out[i..i + 4].copy_from_slice(&b);
            }
            3 => out.truncate(r.below(len + 1) as usize),
            4 => {
                let i = r.below(len + 1) as usize;
                let n = 1 + r.below(16) as usize;
                let ins: Vec<u8> = (0..n).map(|_| (r.next_u64() as u32) as u8).collect();
                out.splice(i..i, ins);
            }
            5 if len > 0 => {
                let i = r.below(len) as usize;
                let n = (1 + r.below(16) as usize).min(out.len() - i);
                out.drain(i..i + n);
            }
            6 if len > 0 => {
                // Repeat a slice of the input at another place.
                let i = r.below(len) as usize;
                let n = (1 + r.below(32) as usize).min(out.len() - i);
                let piece = out[i..i + n].to_vec();
                let at = r.below(out.len() as u64 + 1) as usize;
                out.splice(at..at, piece);
            }
            _ if len > 0 => {
                let i = r.below(len) as usize;
                out[i] = [0u8, 0xff, b'\n', b'"', b'[', b'=', b'.', b'-'][r.below(8) as usize];
            }
            _ => out.push((r.next_u64() as u32) as u8),
        }
    }
}

/// A valid checkpoint file (`seed`, already opened) whose sections were
/// mutated and sealed again: the checksums pass, so the section readers
/// meet the damage.
fn mutate_sections(r: &mut UnitRng, seed: &Sections, scratch: &mut Vec<u8>, out: &mut Vec<u8>) {
    let mut s = seed.clone();
    let names: Vec<String> = s.0.keys().cloned().collect();
    let name = &names[r.below(names.len() as u64) as usize];
    let values = s.0.get_mut(name).expect("a present section");
    match values {
        Values::Bytes(b) => {
            mutate(r, &[std::mem::take(b)], scratch);
            *b = scratch.clone();
        }
        Values::F32(v) => match r.below(4) {
            0 => v.truncate(r.below(v.len() as u64 + 1) as usize),
            1 => v.push(f32::NAN),
            2 if !v.is_empty() => {
                let i = r.below(v.len() as u64) as usize;
                v[i] = [f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -0.0, f32::MIN_POSITIVE]
                    [r.below(5) as usize];
            }
            _ => v.clear(),
        },
        Values::U64(v) => match r.below(3) {
            0 => v.truncate(r.below(v.len() as u64 + 1) as usize),
            1 => v.push(u64::MAX),
            _ => v.clear(),
        },
        Values::F64(v) => v.push(f64::NAN),
    }
    if r.below(8) == 0 {
        s.0.remove(name);
    }
    *out = s.encode();
}

/// What one parser did with its inputs.
pub struct Outcome {
    pub parser: &'static str,
    pub inputs: u64,
    pub accepted: u64,
    pub panics: u64,
    pub first_panic: Option<String>,
    pub seconds: f64,
    pub slowest_input_ms: f64,
}

/// Runs `inputs` inputs through each selected parser.
pub fn fuzz(inputs: u64, only: &[String], seed: u64) -> Result<Vec<Outcome>> {
    let all = targets();
    for o in only {
        if !all.iter().any(|t| t.name == o) {
            let names: Vec<&str> = all.iter().map(|t| t.name).collect();
            bail!("--parser {o}: not a parser; choose from {}", names.join(", "));
        }
    }
    // Caught panics would print a message each; keep the first per parser instead.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut outcomes = Vec::new();
    for t in all.iter().filter(|t| only.is_empty() || only.iter().any(|o| o == t.name)) {
        for s in &t.seeds {
            assert!((t.run)(s), "{}: a seed must be valid", t.name);
        }
        let mut r = UnitRng::from_parts(&[seed, t.name.len() as u64, t.seeds.len() as u64]);
        let (mut input, mut scratch) = (Vec::new(), Vec::new());
        // A re-sealed container's content, opened once: each input mutates a copy.
        let sections = (t.reseal == Reseal::Sections)
            .then(|| Sections::decode(&t.seeds[0], "seed").expect("the seed is a valid checkpoint"));
        let gz_content = (t.reseal == Reseal::Gzip).then(|| {
            let mut content = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&t.seeds[0][..]), &mut content)
                .expect("the seed is valid gzip");
            content
        });
        let mut o = Outcome {
            parser: t.name,
            inputs,
            accepted: 0,
            panics: 0,
            first_panic: None,
            seconds: 0.0,
            slowest_input_ms: 0.0,
        };
        let start = Instant::now();
        for _ in 0..inputs {
            match (&sections, &gz_content, r.below(2)) {
                (Some(s), _, 0) => mutate_sections(&mut r, s, &mut scratch, &mut input),
                (_, Some(content), 0) => {
                    mutate(&mut r, std::slice::from_ref(content), &mut scratch);
                    input = gzip(&scratch);
                }
                _ => mutate(&mut r, &t.seeds, &mut input),
            }
            let one = Instant::now();
            match catch_unwind(AssertUnwindSafe(|| (t.run)(&input))) {
                Ok(accepted) => o.accepted += u64::from(accepted),
                Err(payload) => {
                    o.panics += 1;
                    if o.first_panic.is_none() {
                        let msg = payload
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        o.first_panic = Some(format!("{msg} (input {:?})", &input[..input.len().min(64)]));
                    }
                }
            }
            o.slowest_input_ms = o.slowest_input_ms.max(one.elapsed().as_secs_f64() * 1e3);
        }
        o.seconds = start.elapsed().as_secs_f64();
        outcomes.push(o);
    }
    std::panic::set_hook(hook);
    Ok(outcomes)
}

pub fn run(a: &Args) -> Result<()> {
    println!(
        "{:<12} {:>10} {:>10} {:>7} {:>9} {:>12}",
        "parser", "inputs", "accepted", "panics", "seconds", "slowest ms"
    );
    let outcomes = fuzz(a.inputs, &a.parser, a.seed)?;
    let mut panics = 0;
    for o in &outcomes {
        println!(
            "{:<12} {:>10} {:>10} {:>7} {:>9.1} {:>12.2}",
            o.parser, o.inputs, o.accepted, o.panics, o.seconds, o.slowest_input_ms
        );
        if let Some(p) = &o.first_panic {
            println!("  first panic: {p}");
        }
        panics += o.panics;
    }
    if panics > 0 {
        bail!("{panics} input(s) made a parser panic");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CI's smoke run: every parser, a few thousand inputs, no panic,
    /// and the mutations reach both outcomes (some inputs still parse).
    #[test]
    fn smoke_run_of_every_parser() {
        let outcomes = fuzz(3000, &[], 7).unwrap();
        assert_eq!(outcomes.len(), 8);
        for o in &outcomes {
            assert_eq!(o.panics, 0, "{}: {:?}", o.parser, o.first_panic);
            assert!(
                o.accepted > 0 && o.accepted < o.inputs,
                "{}: {} of {} accepted",
                o.parser,
                o.accepted,
                o.inputs
            );
        }
    }

    #[test]
    fn an_unknown_parser_is_named() {
        let err = fuzz(1, &["jpeg".into()], 1).err().unwrap().to_string();
        assert!(err.contains("jpeg") && err.contains("idx-images"), "{err}");
    }
}
