//! Decoders fed arbitrary and mutated bytes return errors, never panic, and
//! never touch the output of a message they reject (issue #2, item 3).
//! 100k arbitrary inputs plus 100k mutations of valid messages.

use gradcomp_compress::codec::harness::{exercise, valid_messages};
use gradcomp_compress::codec::{self, HEADER_LEN};
use gradcomp_compress::message::{
    DenseMessage, HalfMessage, IndexEncoding, Message, SparseMessage, SparseWire, ValueEncoding,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), kind in 1u8..=10, flags in 0u8..4) {
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
        let _ = exercise(&b);
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
        let _ = exercise(&b);
    }
}

#[test]
fn valid_messages_pass_the_harness() {
    for m in valid_messages() {
        assert!(exercise(&m));
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

/// Issue #27: element payloads are refused when a value is not finite, as
/// scalars already were; before, a sparse f16 signalling NaN decoded and
/// re-encoded to other bytes.
#[test]
fn non_finite_values_are_refused() {
    let sparse = |values: ValueEncoding| {
        Message::Sparse(SparseMessage {
            len: 8,
            wire: SparseWire { indices: IndexEncoding::U32, values },
            indices: vec![1, 5],
            values: vec![0.5, -2.0],
        })
    };
    let f16_nans = [0x7c00u16, 0xfc00, 0x7e00, 0x7d00]; // +inf, -inf, quiet NaN, signalling NaN
    let f32_nans = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::from_bits(0x7fa0_0000)];
    let mut cases: Vec<(Message, Vec<u8>)> = Vec::new();
    for bits in f16_nans {
        cases.push((
            Message::Half(HalfMessage { values: vec![0x3c00, 0x3c00, 0x3c00] }),
            bits.to_le_bytes().to_vec(),
        ));
        cases.push((sparse(ValueEncoding::F16), bits.to_le_bytes().to_vec()));
    }
    for v in f32_nans {
        cases.push((Message::Dense(DenseMessage { values: vec![1.0, 2.0, 3.0] }), v.to_le_bytes().to_vec()));
        cases.push((sparse(ValueEncoding::F32), v.to_le_bytes().to_vec()));
    }
    for (msg, last) in cases {
        let mut bytes = Vec::new();
        codec::encode(&msg, 0, &mut bytes);
        assert!(exercise(&bytes), "the finite message decodes");
        // The last value is the message's last bytes.
        let at = bytes.len() - last.len();
        bytes[at..].copy_from_slice(&last);
        let mut out = Message::default();
        let err = codec::decode(&bytes, &mut out).unwrap_err().to_string();
        assert!(err.contains("non-finite"), "{err}");
        let mut acc = [0.0f32; 8];
        assert!(codec::accumulate(&bytes, 1.0, &mut acc[..msg.len()]).is_err());
        assert!(!exercise(&bytes));
    }
}
