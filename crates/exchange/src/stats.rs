//! What one exchange did, for the step record and the network model.

use gradcomp_comm::CollectiveCall;
use gradcomp_compress::message::Message;
use gradcomp_compress::stats as measures;
use serde::{Deserialize, Serialize};

/// What one exchange did, for the step record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExchangeStats {
    /// Encoded bytes of this worker's compressed messages; for a compressor
    /// whose exchange rounds are its exchange (PowerSGD), the rounds' values.
    pub wire_bytes: u64,
    /// Elements this worker sent a value for.
    pub selected: u64,
    /// Elements in all units.
    pub elements: u64,
    /// Seconds in each phase, summed over buckets; when the buckets were
    /// pipelined the phases overlapped and [`ExchangeStats::wall_seconds`]
    /// is less than their sum.
    pub compress_seconds: f64,
    pub communicate_seconds: f64,
    pub decode_seconds: f64,
    /// Wall-clock seconds of the whole exchange.
    pub wall_seconds: f64,
    /// Seconds of each stage of a staged backward pass computed inside the
    /// exchange, in order (empty for a whole gradient).
    pub backward_seconds: Vec<f64>,
    /// ‖residual‖₂ over all units with a memory.
    pub residual_norm: f64,
    /// Σ‖acc − C(acc)‖² / Σ‖acc‖² over compressed units (when measured).
    pub contraction: Option<f64>,
    /// TernGrad's ‖g‖∞‖g‖₁/‖g‖² per compressed unit (when measured).
    pub bound_ratios: Vec<f64>,
    /// The exchange's collectives in call order, for the network model.
    pub calls: Vec<CollectiveCall>,
    /// Per bucket, in exchange order: this worker's phase times.
    pub buckets: Vec<BucketTimes>,
    /// Whether the buckets went through the communication thread.
    pub pipelined: bool,
    /// Compressor-specific figures of the last step (eSGD's replacements and
    /// importance scores), from the first unit that reports any.
    pub extra: Vec<(&'static str, f64)>,
}

/// One bucket's phase times on this worker, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BucketTimes {
    /// Compressing its units and packing their messages.
    pub compress_seconds: f64,
    /// Inside its collectives (on the communication thread when pipelined).
    pub wire_seconds: f64,
    /// Decoding, aggregating, and the memories' update.
    pub decode_seconds: f64,
    /// The stages of a staged backward pass computed before the bucket
    /// was complete (0 for a whole gradient).
    #[serde(default)]
    pub ready_after: u32,
}

impl ExchangeStats {
    /// Counts a compressed unit's message: what it selected and, when the
    /// message travels (`travels`), its encoded bytes.
    pub(crate) fn count(&mut self, msg: &Message, travels: bool) {
        self.selected += msg.selected() as u64;
        if travels {
            self.wire_bytes += gradcomp_compress::codec::encoded_len(msg) as u64;
        }
    }

    /// A measured step's contraction ratio Σ‖acc − C(acc)‖² / Σ‖acc‖² (0 for
    /// a zero gradient) and TernGrad's bound ratios, from the per-unit
    /// figures in unit order (whatever the order the buckets ran in).
    pub(crate) fn fold_measured(&mut self, measured: &[Option<[f64; 3]>]) {
        let (mut err, mut norm) = (0.0, 0.0);
        for [e, n, bound] in measured.iter().flatten() {
            err += e;
            norm += n;
            self.bound_ratios.push(*bound);
        }
        self.contraction = Some(if norm > 0.0 { err / norm } else { 0.0 });
    }

    /// Adds the buckets' phase times to the phase totals.
    pub(crate) fn sum_buckets(&mut self) {
        self.compress_seconds += self.buckets.iter().map(|b| b.compress_seconds).sum::<f64>();
        self.communicate_seconds += self.buckets.iter().map(|b| b.wire_seconds).sum::<f64>();
        self.decode_seconds += self.buckets.iter().map(|b| b.decode_seconds).sum::<f64>();
    }
}

/// A compressed unit's ‖x − C(x)‖², ‖x‖² and TernGrad bound ratio, for the
/// contraction statistics of a measured step (`x` the compressed input).
pub(crate) fn measure(x: &[f32], msg: &Message, scratch: &mut Vec<f32>) -> [f64; 3] {
    let norm = gradcomp_compress::reduce::sum_of_squares(x);
    [norm * measures::contraction_ratio(x, msg, scratch), norm, measures::terngrad_bound_ratio(x)]
}
