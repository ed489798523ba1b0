//! The parameter server's side of a bucket: the aggregation it runs on the
//! workers' uploads, and its reused buffers.

use gradcomp_comm::Gathered;
use gradcomp_compress::aggregate::{combine_unit, Scratch, TernarySum};
use gradcomp_compress::codec::{self, CodecError};
use gradcomp_compress::message::DenseMessage;
use gradcomp_compress::Combine;
use gradcomp_compress::Message;

use super::plan::Plan;
use super::route::Route;

/// The co-located server's reused buffers.
#[derive(Default)]
pub(crate) struct ServerBuffers {
    sum: TernarySum,
    avg: Vec<f32>,
    msg: Message,
    scratch: Scratch,
}

/// The server's aggregation: per unit, the integer sum of ternary codes
/// (compact download), the majority vote of sign messages (a one-bit
/// download), or the average of the decoded messages, downloaded as a
/// sparse message when that is smaller than dense f32.
pub(crate) fn aggregate(
    plan: &Plan,
    b: usize,
    ups: &Gathered,
    down: &mut Vec<u8>,
    s: &mut ServerBuffers,
) -> Result<(), CodecError> {
    let mut cursors: Vec<&[u8]> = ups.iter().collect();
    for u in plan.buckets[b].clone().filter(|&u| plan.units[u].route == Route::Server) {
        let unit = &plan.units[u];
        let firsts: Vec<&[u8]> = cursors
            .iter_mut()
            .map(|cur| {
                let (first, rest) = codec::split_first(cur)?;
                *cur = rest;
                Ok(first)
            })
            .collect::<Result<_, CodecError>>()?;
        // Integer sums need every upload ternary under one shared scaler.
        let scales = firsts.iter().map(|b| codec::ternary_scale(b)).collect::<Result<Vec<_>, _>>()?;
        let same_scale = scales.iter().all(|s| s.is_some())
            && scales.windows(2).all(|w| w[0].map(f32::to_bits) == w[1].map(f32::to_bits));
        let vote = unit.combine == Combine::MajorityVote;
        if same_scale && !vote {
            s.sum.reset(unit.len);
            for b in &firsts {
                s.sum.add_encoded(b)?;
            }
            s.sum.take_into(&mut s.msg);
        } else {
            // The vote, the average, or the senders' mean (SparseLoCo, DeMo):
            // `combine_unit` overwrites every value.
            s.avg.resize(unit.len, 0.0);
            combine_unit(&firsts, unit.combine, None, &mut s.avg, &mut s.scratch).map_err(|(_, e)| e)?;
            if vote {
                let m = s.msg.sign_mut();
                m.len = unit.len;
                (m.positive, m.negative) = (1.0, -1.0);
                m.bits.clear();
                m.bits.resize(unit.len.div_ceil(8), 0);
                for (j, &v) in s.avg.iter().enumerate() {
                    m.bits[j / 8] |= u8::from(v > 0.0) << (j % 8);
                }
            } else {
                downloaded_average(&s.avg, &mut s.msg);
            }
        }
        codec::encode(&s.msg, unit.id, down);
    }
    if let Some(rest) = cursors.iter().find(|c| !c.is_empty()) {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    Ok(())
}

/// The average `avg` as the server sends it down: sparse where that is
/// smaller than dense f32, dense otherwise.
fn downloaded_average(avg: &[f32], msg: &mut Message) {
    let nnz = avg.iter().filter(|&&v| v != 0.0).count();
    if nnz * 8 + 4 < avg.len() * 4 {
        let m = msg.sparse_mut();
        m.len = avg.len();
        m.wire = Default::default();
        m.indices.clear();
        m.values.clear();
        for (i, &v) in avg.iter().enumerate() {
            if v != 0.0 {
                m.indices.push(i as u32);
                m.values.push(v);
            }
        }
    } else {
        let m: &mut DenseMessage = msg.dense_mut();
        m.values.clear();
        m.values.extend_from_slice(avg);
    }
}
