//! Combining the messages of N workers.
//!
//! Dense aggregation is [`crate::codec::accumulate`] (or
//! [`Message::add_to`]) with weight 1/N into a zeroed buffer. TernGrad with a
//! shared scaler aggregates in the integers instead (ALGORITHMS.md §1.2): the
//! parameter server sums the codes, `m_j ∈ −N..=N`, and downloads them in
//! `ceil(log2(2N+1))` bits each ([`TernarySumMessage`]), which every worker
//! decodes to `s·m/N`.

use crate::codec::{self, CodecError, MAX_WORKERS};
use crate::compressor::Combine;
use crate::message::{
    zip_ternary_codes, Message, MessageKind, TernaryMessage, TernarySumMessage, TERNARY_CODE_VALUES,
};

/// Combines N workers' encoded messages into `out` (overwritten) as a
/// compressor's exchange combines them ([`combine_unit`]). For a
/// caller with a transport of its own; the error names the message
/// (its index) that did not decode.
pub fn combine_encoded<'a>(
    messages: impl ExactSizeIterator<Item = &'a [u8]>,
    combine: Combine,
    out: &mut [f32],
) -> Result<(), (usize, CodecError)> {
    let messages: Vec<&[u8]> = messages.collect();
    combine_unit(&messages, combine, None, out, &mut Scratch::default())
}

/// What [`combine_unit`] keeps between calls, so that it does not allocate
/// once grown.
#[derive(Debug, Default)]
pub struct Scratch {
    messages: Vec<Message>,
    sums: Vec<f32>,
    counts: Vec<u32>,
    norms: Vec<f32>,
}

/// Combines one unit's messages from every worker (`messages`, in rank
/// order) into `out` (overwritten) as `combine` says: their average, the
/// vote on their signs, or the senders' mean. Each header must carry `unit`
/// where it is given. The error names the message (its index) at fault.
pub fn combine_unit(
    messages: &[&[u8]],
    combine: Combine,
    unit: Option<u32>,
    out: &mut [f32],
    scratch: &mut Scratch,
) -> Result<(), (usize, CodecError)> {
    let check_unit = |h: codec::Header| match unit {
        Some(u) if h.unit != u => Err(CodecError::Invalid("message for another unit")),
        _ => Ok(()),
    };
    if let Combine::SenderMean { clip } = combine {
        scratch.messages.resize_with(messages.len(), Message::default);
        for (i, (m, bytes)) in scratch.messages.iter_mut().zip(messages).enumerate() {
            codec::decode(bytes, m).and_then(check_unit).map_err(|e| (i, e))?;
        }
        return sender_mean(
            &scratch.messages[..messages.len()],
            clip,
            out,
            &mut scratch.sums,
            &mut scratch.counts,
            &mut scratch.norms,
        );
    }
    let vote = combine == Combine::MajorityVote;
    let w = if vote { 1.0 } else { 1.0 / messages.len().max(1) as f32 };
    out.fill(0.0);
    for (i, m) in messages.iter().enumerate() {
        codec::accumulate(m, w, out).and_then(check_unit).map_err(|e| (i, e))?;
    }
    if vote {
        majority_vote(out);
    }
    Ok(())
}

/// The senders' mean of chunked messages ([`Combine::SenderMean`]) into
/// `out`: each position's values summed in worker order and divided by the
/// number of workers that sent it (0 where none did), as Templar's and
/// DeMo's `scatter_reduce(…, "mean", include_self=False)`; with `clip`,
/// each worker's values first multiplied by `min(median / (norm + 1e−8), 1)`
/// (the lower median of the workers' value norms, Templar's `outer_step`).
/// DCT messages are averaged per coefficient and decoded once.
fn sender_mean(
    messages: &[Message],
    clip: bool,
    out: &mut [f32],
    sums: &mut Vec<f32>,
    counts: &mut Vec<u32>,
    norms: &mut Vec<f32>,
) -> Result<(), (usize, CodecError)> {
    let Some(Message::Chunked(first)) = messages.first() else {
        return match messages.first() {
            None => {
                out.fill(0.0);
                Ok(())
            }
            Some(_) => Err((0, CodecError::Invalid("the senders' mean takes only chunked messages"))),
        };
    };
    for (i, m) in messages.iter().enumerate() {
        match m {
            Message::Chunked(c) if c.tiles == first.tiles && c.k == first.k && c.dct == first.dct => {}
            _ => return Err((i, CodecError::Invalid("chunked messages of different tilings"))),
        }
    }
    if first.tiles.len() != out.len() {
        return Err((0, CodecError::LenMismatch { expected: out.len(), got: first.tiles.len() }));
    }
    let each = || {
        messages.iter().map(|m| match m {
            Message::Chunked(c) => c,
            _ => unreachable!("checked above"),
        })
    };
    norms.clear();
    norms.extend(each().map(|c| {
        let ss: f64 = (0..c.positions.len()).map(|e| f64::from(c.value(e)).powi(2)).sum();
        ss.sqrt() as f32
    }));
    // The lower median (torch.median's), sorted in the scratch's second half.
    let w = messages.len();
    norms.extend_from_within(..w);
    norms[w..].sort_by(f32::total_cmp);
    let median = norms[w + (w - 1) / 2];
    sums.clear();
    sums.resize(out.len(), 0.0);
    counts.clear();
    counts.resize(out.len(), 0);
    for (c, &norm) in each().zip(norms[..w].iter()) {
        let f = if clip { (median / (norm + 1e-8)).min(1.0) } else { 1.0 };
        crate::chunked::scatter::for_each_entry(&c.tiles, c.k as usize, &c.positions, |i, e| {
            sums[i] += c.value(e) * f;
            counts[i] += 1;
        });
    }
    for (s, &n) in sums.iter_mut().zip(counts.iter()) {
        if n > 0 {
            *s /= n as f32;
        }
    }
    if first.dct {
        out.fill(0.0);
        let bases = crate::chunked::scatter::Bases::new(&first.tiles);
        crate::chunked::scatter::add_inverse(&first.tiles, &bases, sums, |i| counts[i] > 0, out);
    } else {
        out.copy_from_slice(sums);
    }
    Ok(())
}

/// signSGD's majority vote on the sum of N workers' signs, in place: +1
/// where the sum is ≥ 0 (a tie goes to +1, as GRACE votes), −1 elsewhere.
pub fn majority_vote(sum: &mut [f32]) {
    for v in sum {
        *v = if *v >= 0.0 { 1.0 } else { -1.0 };
    }
}

/// The parameter server's integer sum of ternary codes.
#[derive(Clone, Debug, Default)]
pub struct TernarySum {
    sum: TernarySumMessage,
    scratch: Message,
}

impl TernarySum {
    /// Starts a sum over units of `len` elements.
    pub fn reset(&mut self, len: usize) {
        self.sum.workers = 0;
        self.sum.scale = 0.0;
        self.sum.sums.clear();
        self.sum.sums.resize(len, 0);
    }

    /// Adds one worker's encoded ternary message. Every worker must have used
    /// the same (shared) scaler and length; otherwise the integer sum would be
    /// meaningless, so it is an error.
    pub fn add_encoded(&mut self, bytes: &[u8]) -> Result<(), CodecError> {
        let h = codec::decode(bytes, &mut self.scratch)?;
        if h.kind != MessageKind::Ternary {
            return Err(CodecError::Invalid("the ternary sum takes only ternary messages"));
        }
        let Message::Ternary(m) = &self.scratch else {
            unreachable!("decode of a ternary header yields a ternary message")
        };
        add_codes_checked(m, &mut self.sum)
    }

    /// Adds one worker's in-memory ternary message (e.g. the server's own, when
    /// it is co-located with a worker).
    pub fn add(&mut self, m: &TernaryMessage) -> Result<(), CodecError> {
        add_codes_checked(m, &mut self.sum)
    }

    /// The aggregate so far.
    pub fn result(&self) -> &TernarySumMessage {
        &self.sum
    }

    /// Moves the aggregate into `out` as a [`Message::TernarySum`] (for encoding).
    pub fn take_into(&mut self, out: &mut Message) {
        std::mem::swap(out.ternary_sum_mut(), &mut self.sum);
    }
}

fn add_codes_checked(m: &TernaryMessage, sum: &mut TernarySumMessage) -> Result<(), CodecError> {
    if m.len != sum.sums.len() {
        return Err(CodecError::LenMismatch { expected: sum.sums.len(), got: m.len });
    }
    if sum.workers == 0 {
        sum.scale = m.scale;
    } else if sum.scale.to_bits() != m.scale.to_bits() {
        return Err(CodecError::Invalid(
            "workers sent different ternary scalers; scalar sharing must run before the sum",
        ));
    }
    if sum.workers >= MAX_WORKERS {
        return Err(CodecError::Invalid("more than 32767 workers in one ternary sum"));
    }
    sum.workers += 1;
    add_ternary_codes(&m.packed, &mut sum.sums);
    Ok(())
}

/// `sums[j] += code_j` for 2-bit packed ternary codes.
pub fn add_ternary_codes(packed: &[u8], sums: &mut [i16]) {
    zip_ternary_codes(packed, sums, |s, c| *s += i16::from(TERNARY_CODE_VALUES[c]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compressor::{Compressor, UnitContext};
    use crate::quantize::TernGrad;
    use crate::rng::RngKey;

    #[test]
    fn server_sum_decodes_to_the_average_of_the_workers() {
        let n = 5;
        let len = 103;
        let grads: Vec<Vec<f32>> =
            (0..n).map(|w| (0..len).map(|j| ((j * 7 + w * 13) % 17) as f32 - 8.0).collect()).collect();
        let t = TernGrad::default();
        let shared = grads.iter().map(|g| t.scaler(g)).fold(0.0f32, f32::max);
        let mut server = TernarySum::default();
        server.reset(len);
        let mut want = vec![0.0f32; len];
        for (w, g) in grads.iter().enumerate() {
            let mut msg = Message::default();
            let ctx = UnitContext { key: RngKey::new(0, w as u32, 0, 0), ..Default::default() };
            let mut t = TernGrad::default();
            t.round_result(0, &[shared], n);
            t.compress(g, &ctx, &mut msg);
            msg.add_to(1.0 / n as f32, &mut want);
            let mut bytes = Vec::new();
            codec::encode(&msg, 0, &mut bytes);
            server.add_encoded(&bytes).unwrap();
        }
        assert_eq!(server.result().workers, 5);
        let mut down = Message::default();
        server.take_into(&mut down);
        let mut bytes = Vec::new();
        let written = codec::encode(&down, 0, &mut bytes);
        // N = 5 -> 4 bits per element.
        assert_eq!(written, codec::HEADER_LEN + 8 + (len * 4).div_ceil(8));
        let mut got = vec![0.0f32; len];
        codec::accumulate(&bytes, 1.0, &mut got).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn mismatched_scalers_are_rejected() {
        let mut server = TernarySum::default();
        server.reset(4);
        let m = |scale| TernaryMessage { len: 4, scale, packed: vec![0b01], ..Default::default() };
        server.add(&m(1.0)).unwrap();
        assert!(server.add(&m(2.0)).is_err());
        assert!(server.add(&TernaryMessage { len: 3, ..m(1.0) }).is_err());
    }
}
