//! Decoders fed arbitrary and mutated bytes return errors, never panic, and
//! never touch the output of a message they reject (issue #2, item 3).
//! 100k arbitrary inputs plus 100k mutations of valid messages.

use gradcomp_compress::codec::harness::{exercise, valid_messages};
use gradcomp_compress::codec::{self, HEADER_LEN};
use gradcomp_compress::message::Message;
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
