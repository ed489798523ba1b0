//! Decoders fed arbitrary and mutated bytes return errors, never panic, and
//! never touch the output of a message they reject (issue #2, item 3).
//! 100k arbitrary inputs plus 100k mutations of valid messages.

use gradcomp_compress::aggregate::TernarySum;
use gradcomp_compress::codec::{self, HEADER_LEN};
use gradcomp_compress::message::{Message, TernaryPacking};
use gradcomp_compress::quantize::TernGradConfig;
use gradcomp_compress::{CompressorConfig, RngKey, UnitContext};
use proptest::prelude::*;

/// Largest unit the harness allocates an output buffer for.
const MAX_OUT: usize = 1 << 16;

fn exercise(bytes: &[u8]) {
    let mut msg = Message::default();
    let decoded = codec::decode(bytes, &mut msg);
    let header = codec::read_header(bytes);
    let _ = codec::split_first(bytes);
    let scale = codec::ternary_scale(bytes);
    if let (Ok(h), Ok(scale)) = (&header, &scale) {
        assert_eq!(scale.is_some(), h.kind == gradcomp_compress::message::MessageKind::Ternary);
    }
    if let Ok(h) = header {
        if (h.len as usize) <= MAX_OUT {
            let mut out = vec![1.0f32; h.len as usize];
            match codec::accumulate(bytes, 0.5, &mut out) {
                Ok(_) => assert!(decoded.is_ok(), "accumulate accepted what decode rejected"),
                Err(_) => assert!(out.iter().all(|&v| v == 1.0), "rejected message modified the output"),
            }
            let mut sum = TernarySum::default();
            sum.reset(h.len as usize);
            let _ = sum.add_encoded(bytes);
        }
    }
    if decoded.is_ok() {
        // Whatever decodes re-encodes to the same bytes (the format is canonical).
        let mut again = Vec::new();
        codec::encode(&msg, header.unwrap().unit, &mut again);
        assert_eq!(again, bytes);
    }
}

fn valid_messages() -> Vec<Vec<u8>> {
    let x: Vec<f32> = (0..37).map(|i| ((i * 11) % 23) as f32 - 11.0).collect();
    let mut configs: Vec<CompressorConfig> = CompressorConfig::NAMES
        .iter()
        .map(|n| {
            let mut c = CompressorConfig::named(n).unwrap();
            c.set_density(0.2);
            c
        })
        .collect();
    configs.push(CompressorConfig::Terngrad(TernGradConfig {
        packing: TernaryPacking::Base3,
        ..Default::default()
    }));
    let mut out = Vec::new();
    for cfg in configs {
        let mut msg = Message::default();
        cfg.build().compress(
            &x,
            &UnitContext { key: RngKey::default(), shared_scalar: None, ..Default::default() },
            &mut msg,
        );
        let mut b = Vec::new();
        codec::encode(&msg, 5, &mut b);
        out.push(b);
    }
    // A parameter-server download too.
    let mut sum = TernarySum::default();
    sum.reset(37);
    sum.add_encoded(&out[2]).unwrap();
    let mut down = Message::default();
    sum.take_into(&mut down);
    let mut b = Vec::new();
    codec::encode(&down, 5, &mut b);
    out.push(b);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), kind in 1u8..=7, flags in 0u8..4) {
        // Half the time give it a plausible header so the payload parsers run.
        let mut b = bytes;
        if b.len() >= HEADER_LEN && b[0] % 2 == 0 {
            b[0] = codec::MAGIC;
            b[1] = codec::VERSION;
            b[2] = kind;
            b[3] = flags;
            b[5] = 0;
            b[6] = 0;
            b[7] = 0;
        }
        exercise(&b);
    }

    #[test]
    fn mutated_messages_never_panic(which in any::<prop::sample::Index>(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), cut in any::<prop::sample::Index>(), truncate in any::<bool>()) {
        let msgs = valid_messages();
        let mut b = msgs[which.index(msgs.len())].clone();
        for (pos, val) in edits {
            let i = pos.index(b.len());
            b[i] = val;
        }
        if truncate {
            b.truncate(cut.index(b.len() + 1));
        }
        exercise(&b);
    }
}

#[test]
fn valid_messages_pass_the_harness() {
    for m in valid_messages() {
        exercise(&m);
        let mut msg = Message::default();
        codec::decode(&m, &mut msg).unwrap();
    }
}

#[test]
fn specific_corruptions_are_named() {
    let msgs = valid_messages();
    let topk = &msgs[5];
    let mut msg = Message::default();
    let mut bad = topk.clone();
    bad[0] = 0;
    assert!(codec::decode(&bad, &mut msg).unwrap_err().to_string().contains("not a gradcomp message"));
    let mut bad = topk.clone();
    bad[1] = 9;
    assert!(codec::decode(&bad, &mut msg).unwrap_err().to_string().contains("version"));
    assert!(codec::decode(&topk[..topk.len() - 1], &mut msg).unwrap_err().to_string().contains("truncated"));
    let mut long = topk.clone();
    long.push(0);
    assert!(codec::decode(&long, &mut msg).unwrap_err().to_string().contains("follow the message"));
    // First index (after count) set beyond the unit length.
    let mut bad = topk.clone();
    bad[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&1000u32.to_le_bytes());
    assert!(codec::decode(&bad, &mut msg).unwrap_err().to_string().contains("out of range"));
    let mut out = vec![0.0; 36];
    assert!(codec::accumulate(topk, 1.0, &mut out).unwrap_err().to_string().contains("36"));
}
