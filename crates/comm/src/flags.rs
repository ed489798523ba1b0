//! [`Flagged`]: a collective whose first operation also tells every worker
//! which workers raised a flag, so that a per-step agreement (a non-finite
//! gradient, say) costs no round of its own.
//!
//! An allreduce carries one slot per worker after the caller's elements
//! (the worker's own slot 1 when raised, every other slot 0: the sum, or
//! the maximum, of a slot is its worker's flag); an allgatherv carries one
//! trailing byte per worker. A broadcast, a barrier or a parameter-server
//! round cannot carry every worker's flag, so before one that comes first
//! the flags take a round of their own, as they do when the caller made no
//! operation at all ([`Flagged::flagged`]).

use crate::{Aggregate, Collective, CommError, Gathered, Reduction, ServerPlacement};
use half::f16;

/// `inner`, with this worker's flag carried inside the first operation.
pub struct Flagged<C> {
    inner: C,
    raised: bool,
    /// Every worker's flag, once an operation carried them.
    flags: Option<Vec<bool>>,
    /// Bytes the flags added to what this worker sent.
    flag_bytes: usize,
    /// The widened copy of a float32 allreduce (the dense exchange's large
    /// buffer), kept across calls by [`Flagged::into_parts`].
    scratch: Vec<f32>,
}

impl<C: Collective> Flagged<C> {
    /// `inner` carrying this worker's flag, `raised` or not.
    pub fn new(inner: C, raised: bool) -> Self {
        Self::with_scratch(inner, raised, Vec::new())
    }

    /// As [`Flagged::new`], reusing `scratch` (from an earlier
    /// [`Flagged::into_parts`]) for the widened float32 buffer.
    pub fn with_scratch(inner: C, raised: bool, scratch: Vec<f32>) -> Self {
        Flagged { inner, raised, flags: None, flag_bytes: 0, scratch }
    }

    /// The ranks that raised their flag, in order, if an operation has
    /// carried the flags yet.
    pub fn known(&self) -> Option<Vec<usize>> {
        self.flags.as_ref().map(|f| (0..f.len()).filter(|&r| f[r]).collect())
    }

    /// The ranks that raised their flag. When no operation carried the
    /// flags, they take a round of their own here, so every worker must
    /// call this at the same point (after the same operations).
    pub fn flagged(&mut self) -> Result<Vec<usize>, CommError> {
        self.before_uncarried()?;
        Ok(self.known().expect("carried above"))
    }

    /// Bytes the flags added to what this worker sent.
    pub fn flag_bytes(&self) -> usize {
        self.flag_bytes
    }

    /// The collective inside.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// The collective itself, and the scratch buffer for the next use.
    pub fn into_parts(self) -> (C, Vec<f32>) {
        (self.inner, self.scratch)
    }

    /// The flags alone: one 32-bit slot per worker, summed.
    fn own_round(&mut self) -> Result<(), CommError> {
        let mut slots = self.slots(0i32, 1);
        self.inner.allreduce_sum_i32(&mut slots)?;
        self.flag_bytes += std::mem::size_of_val(slots.as_slice());
        self.flags = Some(slots.iter().map(|&s| s != 0).collect());
        Ok(())
    }

    /// One slot per worker: `one` in this worker's when raised, else `zero`.
    fn slots<T: Copy>(&self, zero: T, one: T) -> Vec<T> {
        let rank = self.inner.rank();
        (0..self.inner.world_size()).map(|r| if r == rank && self.raised { one } else { zero }).collect()
    }

    /// A float32 allreduce, widened in the reused scratch buffer (the dense
    /// exchange's buffer is the model's size).
    fn ride_f32(&mut self, buf: &mut [f32], as_op: fn(&mut [f32]) -> Reduction<'_>) -> Result<(), CommError> {
        let mut wide = std::mem::take(&mut self.scratch);
        let result = self.ride_in(&mut wide, buf, 0.0, 1.0, as_op);
        self.scratch = wide;
        result
    }

    /// The first operation: the reduction `as_op` makes of `buf` widened by
    /// the flag slots, in `wide` (cleared first).
    fn ride_in<T: Copy + PartialEq>(
        &mut self,
        wide: &mut Vec<T>,
        buf: &mut [T],
        zero: T,
        one: T,
        as_op: fn(&mut [T]) -> Reduction<'_>,
    ) -> Result<(), CommError> {
        wide.clear();
        wide.extend_from_slice(buf);
        wide.extend(self.slots(zero, one));
        self.inner.allreduce(as_op(wide))?;
        // The caller's elements back into `buf`, the slots into the flags.
        let (data, slots) = wide.split_at(buf.len());
        buf.copy_from_slice(data);
        self.flags = Some(slots.iter().map(|&s| s != zero).collect());
        self.flag_bytes += std::mem::size_of_val(slots);
        Ok(())
    }

    /// Before an operation that cannot carry every worker's flag.
    fn before_uncarried(&mut self) -> Result<(), CommError> {
        if self.flags.is_none() {
            self.own_round()?;
        }
        Ok(())
    }
}

impl<C: Collective> Collective for Flagged<C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn allreduce(&mut self, r: Reduction<'_>) -> Result<(), CommError> {
        if self.flags.is_some() {
            return self.inner.allreduce(r);
        }
        match r {
            Reduction::SumF32(b) => self.ride_f32(b, |w| Reduction::SumF32(w)),
            Reduction::MaxF32(b) => self.ride_f32(b, |w| Reduction::MaxF32(w)),
            Reduction::SumF16(b) => {
                self.ride_in(&mut Vec::new(), b, f16::ZERO, f16::ONE, |w| Reduction::SumF16(w))
            }
            Reduction::SumI32(b) => self.ride_in(&mut Vec::new(), b, 0, 1, |w| Reduction::SumI32(w)),
            Reduction::SumI16(b) => self.ride_in(&mut Vec::new(), b, 0, 1, |w| Reduction::SumI16(w)),
            Reduction::SumI8(b) => self.ride_in(&mut Vec::new(), b, 0, 1, |w| Reduction::SumI8(w)),
        }
    }

    fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError> {
        if self.flags.is_some() {
            return self.inner.allgatherv(send, recv);
        }
        let mut with_flag = Vec::with_capacity(send.len() + 1);
        with_flag.extend_from_slice(send);
        with_flag.push(u8::from(self.raised));
        self.inner.allgatherv(&with_flag, recv)?;
        let trailers = recv.split_trailers().ok_or_else(|| CommError::Mismatch {
            detail: "a worker's allgatherv message came without its flag byte".into(),
        })?;
        self.flags = Some(trailers.iter().map(|&b| b != 0).collect());
        self.flag_bytes += 1;
        Ok(())
    }

    /// Every message to a peer carries the flag byte: every rank receives
    /// one message from each rank, so each learns every flag.
    fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError> {
        if self.flags.is_some() {
            return self.inner.alltoallv(send, recv);
        }
        let mut with_flag = send.clone();
        with_flag.push_trailer(u8::from(self.raised));
        self.inner.alltoallv(&with_flag, recv)?;
        let trailers = recv.split_trailers().ok_or_else(|| CommError::Mismatch {
            detail: "a worker's alltoallv message came without its flag byte".into(),
        })?;
        self.flags = Some(trailers.iter().map(|&b| b != 0).collect());
        self.flag_bytes += send.len().saturating_sub(1);
        Ok(())
    }

    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        self.before_uncarried()?;
        self.inner.broadcast(buf, root)
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        self.before_uncarried()?;
        self.inner.barrier()
    }

    fn push_pull(
        &mut self,
        placement: ServerPlacement,
        upload: &[u8],
        aggregate: &mut Aggregate<'_>,
        download: &mut Vec<u8>,
    ) -> Result<(), CommError> {
        self.before_uncarried()?;
        self.inner.push_pull(placement, upload, aggregate, download)
    }

    fn abandon(&mut self, code: i32) {
        self.inner.abandon(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InProcessGroup;

    /// Each worker's view after `ops`: the flagged ranks, the flag bytes,
    /// and what the operations returned (as f64s).
    fn run(
        world: usize,
        raised: &[usize],
        ops: fn(&mut Flagged<crate::InProcessCollective>) -> Vec<f64>,
    ) -> Vec<(Vec<usize>, usize, Vec<f64>)> {
        InProcessGroup::new(world)
            .run(|c| {
                let rank = c.rank();
                let mut f = Flagged::new(c, raised.contains(&rank));
                let out = ops(&mut f);
                let flagged = f.flagged().unwrap();
                (flagged, f.flag_bytes(), out)
            })
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn the_flags_ride_on_every_kind_of_first_operation() {
        type Op = fn(&mut Flagged<crate::InProcessCollective>) -> Vec<f64>;
        let cases: [(&str, Op, usize); 7] = [
            (
                "f32",
                |f| {
                    let mut b = vec![1.5f32, f.rank() as f32];
                    f.allreduce_sum_f32(&mut b).unwrap();
                    b.iter().map(|&v| f64::from(v)).collect()
                },
                12,
            ),
            (
                "max f32",
                |f| {
                    let mut b = vec![f.rank() as f32];
                    f.allreduce_max_f32(&mut b).unwrap();
                    vec![f64::from(b[0])]
                },
                12,
            ),
            (
                "i32",
                |f| {
                    let mut b = vec![2i32];
                    f.allreduce_sum_i32(&mut b).unwrap();
                    vec![f64::from(b[0])]
                },
                12,
            ),
            (
                "i16",
                |f| {
                    let mut b = vec![2i16];
                    f.allreduce_sum_i16(&mut b).unwrap();
                    vec![f64::from(b[0])]
                },
                6,
            ),
            (
                "i8",
                |f| {
                    let mut b = vec![2i8];
                    f.allreduce_sum_i8(&mut b).unwrap();
                    vec![f64::from(b[0])]
                },
                3,
            ),
            (
                "f16",
                |f| {
                    let mut b = vec![f16::from_f32(0.5)];
                    f.allreduce_sum_f16(&mut b).unwrap();
                    vec![f64::from(b[0].to_f32())]
                },
                6,
            ),
            (
                "allgatherv",
                |f| {
                    let mut g = Gathered::default();
                    let msg = vec![7u8; f.rank()];
                    f.allgatherv(&msg, &mut g).unwrap();
                    g.iter().map(|m| m.len() as f64).collect()
                },
                1,
            ),
        ];
        let expect: [&[f64]; 7] = [&[4.5, 3.0], &[2.0], &[6.0], &[6.0], &[6.0], &[1.5], &[0.0, 1.0, 2.0]];
        for ((name, op, bytes), want) in cases.into_iter().zip(expect) {
            for raised in [&[][..], &[1], &[0, 2]] {
                for (rank, (flagged, flag_bytes, out)) in run(3, raised, op).into_iter().enumerate() {
                    assert_eq!(flagged, raised, "{name}, rank {rank}");
                    assert_eq!(flag_bytes, bytes, "{name}: the flags cost their slots, no round");
                    assert_eq!(out, want, "{name}: the caller's result is untouched");
                }
            }
        }
    }

    /// An alltoallv carries the flag on every peer's message (a byte to
    /// each of the others), and the messages arrive as they were sent.
    #[test]
    fn the_flags_ride_on_an_alltoallv() {
        for raised in [&[][..], &[1], &[0, 2]] {
            let views = run(3, raised, |f| {
                // Rank r sends r + j bytes to rank j: it receives i + r from rank i.
                let mut send = Gathered::default();
                (0..f.world_size()).for_each(|j| send.push(&vec![j as u8; f.rank() + j]));
                let mut g = Gathered::default();
                f.alltoallv(&send, &mut g).unwrap();
                g.iter().map(|m| m.len() as f64).collect()
            });
            for (rank, (flagged, flag_bytes, out)) in views.into_iter().enumerate() {
                assert_eq!(flagged, raised, "rank {rank}");
                assert_eq!(flag_bytes, 2, "a byte to each of the other two");
                assert_eq!(out, (0..3).map(|i| (i + rank) as f64).collect::<Vec<_>>(), "rank {rank}");
            }
        }
    }

    #[test]
    fn only_the_first_operation_carries_them() {
        let views = run(2, &[0], |f| {
            let mut a = vec![1.0f32; 3];
            f.allreduce_sum_f32(&mut a).unwrap();
            let mut b = vec![1.0f32; 3];
            f.allreduce_sum_f32(&mut b).unwrap();
            a.into_iter().chain(b).map(f64::from).collect()
        });
        for (flagged, bytes, out) in views {
            assert_eq!(flagged, [0]);
            assert_eq!(bytes, 8, "one float32 slot per worker, once");
            assert_eq!(out, [2.0; 6]);
        }
    }

    #[test]
    fn without_a_carrier_they_take_a_round_of_their_own() {
        // No operation at all, and a broadcast first: 4 bytes per worker.
        let none = run(2, &[1], |_| Vec::new());
        let broadcast = run(2, &[1], |f| {
            let mut b = if f.rank() == 0 { vec![9u8, 8] } else { Vec::new() };
            f.broadcast(&mut b, 0).unwrap();
            b.into_iter().map(f64::from).collect()
        });
        for (flagged, bytes, _) in none {
            assert_eq!((flagged, bytes), (vec![1], 8));
        }
        for (flagged, bytes, out) in broadcast {
            assert_eq!((flagged, bytes, out), (vec![1], 8, vec![9.0, 8.0]));
        }
    }
}
