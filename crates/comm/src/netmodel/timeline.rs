//! The pipelined exchange on a timeline: when each bucket's compression,
//! wire time and decoding happen, so a prediction can subtract what the
//! pipeline hides.

use super::NetworkModel;

impl NetworkModel {
    /// The timeline of an exchange whose buckets are pipelined as
    /// `gradcomp-train`'s exchange runs them: `stages[b]` = [compress, wire,
    /// decode] seconds of bucket b, in exchange order. One thread compresses
    /// bucket b, hands it to the wire, then decodes bucket b−1; the wire
    /// moves one bucket at a time, in order. Returns each stage's
    /// [start, end] per bucket, from 0.
    pub fn pipelined_timeline(stages: &[[f64; 3]]) -> Vec<[[f64; 2]; 3]> {
        Self::staged_timeline(&[], &vec![0; stages.len()], stages)
    }

    /// [`NetworkModel::pipelined_timeline`] for an exchange fed by a staged
    /// backward pass: the exchange's thread first computes `backward[0]`
    /// seconds of backward pass, hands over the buckets that stage
    /// completed (`ready_after[b]`: the stages computed before bucket b was
    /// complete), decodes those the wire has finished, computes the next
    /// stage while the wire works, and so on; then it decodes the rest as
    /// they arrive. With no stages every bucket is ready at 0 and the
    /// thread decodes bucket b−1 right after handing over bucket b.
    pub fn staged_timeline(backward: &[f64], ready_after: &[u32], stages: &[[f64; 3]]) -> Vec<[[f64; 2]; 3]> {
        let mut out = vec![[[0.0; 2]; 3]; stages.len()];
        let (mut main, mut wire_free) = (0.0f64, 0.0f64);
        let mut in_flight = std::collections::VecDeque::new();
        let decode = |b: usize, main: &mut f64, out: &mut Vec<[[f64; 2]; 3]>| {
            let start = main.max(out[b][1][1]);
            *main = start + stages[b][2];
            out[b][2] = [start, *main];
        };
        let staged = !backward.is_empty();
        for k in 0..=backward.len() {
            if k > 0 {
                main += backward[k - 1];
            }
            for (b, &[compress, wire, _]) in stages.iter().enumerate() {
                if ready_after.get(b).map_or(0, |&r| r as usize) != k {
                    continue;
                }
                out[b][0] = [main, main + compress];
                main += compress;
                let start = main.max(wire_free);
                wire_free = start + wire;
                out[b][1] = [start, wire_free];
                in_flight.push_back(b);
                if !staged && in_flight.len() > 1 {
                    let first = in_flight.pop_front().expect("two in flight");
                    decode(first, &mut main, &mut out);
                }
            }
            // Between stages, only what the wire has already finished.
            while staged && in_flight.front().is_some_and(|&b| out[b][1][1] <= main) {
                let first = in_flight.pop_front().expect("one in flight");
                decode(first, &mut main, &mut out);
            }
        }
        for b in in_flight {
            decode(b, &mut main, &mut out);
        }
        out
    }

    /// The span of [`NetworkModel::pipelined_timeline`]: what the serial
    /// sum of the stages less this is, the pipeline hid.
    pub fn pipelined_span(stages: &[[f64; 3]]) -> f64 {
        Self::pipelined_timeline(stages).last().map_or(0.0, |s| s[2][1])
    }
}
