//! The wire decoders under one roof, for fuzzing: [`exercise`] runs every
//! decoder of outside bytes on one input and asserts what must hold whether
//! or not the input is valid; [`valid_messages`] gives seeds to mutate. Used
//! by the property tests and by `gradcomp bench fuzz`.

use crate::aggregate::TernarySum;
use crate::codec;
use crate::message::{Message, MessageKind, TernaryPacking};
use crate::quantize::TernGradConfig;
use crate::{CompressorConfig, RngKey, UnitContext};

/// Largest unit the harness allocates an output buffer for.
const MAX_OUT: usize = 1 << 16;

/// Decodes `bytes` every way a receiver can (decode, header, split,
/// accumulate into a dense buffer, ternary sum) and panics if an invariant
/// breaks: a rejected message must leave the output untouched, accumulate
/// must not accept what decode rejects, whatever decodes holds finite values
/// only, and it re-encodes to the same bytes (the format is canonical, values
/// included: a NaN's payload would not survive). Returns whether it decoded.
pub fn exercise(bytes: &[u8]) -> bool {
    let mut msg = Message::default();
    let decoded = codec::decode(bytes, &mut msg);
    let header = codec::read_header(bytes);
    let _ = codec::split_first(bytes);
    let scale = codec::ternary_scale(bytes);
    if let (Ok(h), Ok(scale)) = (&header, &scale) {
        assert_eq!(scale.is_some(), h.kind == MessageKind::Ternary);
    }
    if let Ok(h) = &header {
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
    if let (Ok(_), Ok(h)) = (&decoded, &header) {
        if (h.len as usize) <= MAX_OUT {
            let mut values = vec![0.0f32; h.len as usize];
            msg.decompress_into(&mut values);
            assert!(
                values.iter().all(|v| v.is_finite()),
                "a decoded {:?} message holds a non-finite value",
                h.kind
            );
        }
        let mut again = Vec::new();
        codec::encode(&msg, h.unit, &mut again);
        assert_eq!(again, bytes, "a decoded message re-encodes to other bytes");
    }
    decoded.is_ok()
}

/// One valid message of every compressor (and a parameter-server download).
pub fn valid_messages() -> Vec<Vec<u8>> {
    let x: Vec<f32> = (0..37).map(|i| ((i * 11) % 23) as f32 - 11.0).collect();
    let mut configs: Vec<CompressorConfig> = CompressorConfig::NAMES
        .iter()
        .map(|n| {
            let mut c = CompressorConfig::named(n).expect("a known name");
            c.set_density(0.2);
            if let CompressorConfig::Powersgd(p) = &mut c {
                p.start_iter = 0; // a low-rank message, not the warm-up's dense one
            }
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
        // One worker; PowerSGD sees a one-column matrix.
        let mut c = cfg.build_for(&[x.len(), 1]);
        let ctx = UnitContext { key: RngKey::default(), ..Default::default() };
        let mut values = Vec::new();
        for round in 0..c.rounds() {
            values.clear();
            if c.round_contribution(round, &x, &ctx, &mut values).is_some() {
                c.round_result(round, &values, 1);
            }
        }
        c.compress(&x, &ctx, &mut msg);
        let mut b = Vec::new();
        codec::encode(&msg, 5, &mut b);
        out.push(b);
    }
    // A parameter-server download too.
    let mut sum = TernarySum::default();
    sum.reset(37);
    sum.add_encoded(&out[2]).expect("a valid ternary message");
    let mut down = Message::default();
    sum.take_into(&mut down);
    let mut b = Vec::new();
    codec::encode(&down, 5, &mut b);
    out.push(b);
    out
}
