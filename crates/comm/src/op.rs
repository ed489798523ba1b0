//! What a collective call is: its kind ([`OpKind`]) as the byte meter counts
//! it and ranks compare it, and one call's sizes ([`CollectiveCall`]) as the
//! network model prices it.

use half::f16;
use serde::{Deserialize, Serialize};

/// Operation kinds, as recorded by the byte meter and compared across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    AllreduceSumF32,
    AllreduceSumF16,
    AllreduceSumI32,
    AllreduceSumI16,
    AllreduceSumI8,
    AllreduceMaxF32,
    Allgatherv,
    /// All-to-all with per-peer sizes: rank i's j-th message goes to rank j.
    Alltoallv,
    Broadcast,
    Barrier,
    /// Parameter server: every worker's upload to the server.
    PsPush,
    /// Parameter server: the server's download to every worker.
    PsPull,
}

impl OpKind {
    pub const ALL: [OpKind; 12] = [
        OpKind::AllreduceSumF32,
        OpKind::AllreduceSumF16,
        OpKind::AllreduceSumI32,
        OpKind::AllreduceSumI16,
        OpKind::AllreduceSumI8,
        OpKind::AllreduceMaxF32,
        OpKind::Allgatherv,
        OpKind::Alltoallv,
        OpKind::Broadcast,
        OpKind::Barrier,
        OpKind::PsPush,
        OpKind::PsPull,
    ];

    /// The name used in records (`steps.jsonl`) and benchmark tables.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::AllreduceSumF32 => "allreduce_sum_f32",
            OpKind::AllreduceSumF16 => "allreduce_sum_f16",
            OpKind::AllreduceSumI32 => "allreduce_sum_i32",
            OpKind::AllreduceSumI16 => "allreduce_sum_i16",
            OpKind::AllreduceSumI8 => "allreduce_sum_i8",
            OpKind::AllreduceMaxF32 => "allreduce_max_f32",
            OpKind::Allgatherv => "allgatherv",
            OpKind::Alltoallv => "alltoallv",
            OpKind::Broadcast => "broadcast",
            OpKind::Barrier => "barrier",
            OpKind::PsPush => "ps_push",
            OpKind::PsPull => "ps_pull",
        }
    }

    /// Whether this is an elementwise allreduce (every rank sends and
    /// receives the same number of bytes).
    pub fn is_allreduce(self) -> bool {
        matches!(
            self,
            OpKind::AllreduceSumF32
                | OpKind::AllreduceSumF16
                | OpKind::AllreduceSumI32
                | OpKind::AllreduceSumI16
                | OpKind::AllreduceSumI8
                | OpKind::AllreduceMaxF32
        )
    }
}

/// One collective call as a caller made it: the record from which the
/// network model prices the call
/// ([`NetworkModel::price`](crate::NetworkModel::price)). A parameter
/// server's round trip is one call of kind [`OpKind::PsPush`] whose
/// `download` is the pull.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveCall {
    pub op: OpKind,
    /// Bytes per rank: one entry for an allreduce (every rank's size); every
    /// rank's message for an allgatherv; for an alltoallv, what this rank
    /// sent each rank (its own entry 0: it crosses no link); every upload
    /// for the parameter server (known on the server only; empty elsewhere).
    pub sizes: Vec<u64>,
    /// The parameter server's download, in bytes (0 for other kinds).
    pub download: u64,
    /// The caller's label for the call: for gradcomp's exchange, the bucket
    /// it moved (`None` for a round that precedes every bucket).
    pub bucket: Option<u32>,
}

impl CollectiveCall {
    /// An allreduce of `bytes` bytes per rank.
    pub fn allreduce(op: OpKind, bytes: u64, bucket: Option<u32>) -> Self {
        debug_assert!(op.is_allreduce());
        CollectiveCall { op, sizes: vec![bytes], download: 0, bucket }
    }
}

/// One elementwise allreduce as a caller asks for it: the operation and
/// element type (the variant) and the caller's buffer, reduced in place on
/// every rank. The one reduction every backend implements
/// ([`Collective::allreduce`](crate::Collective::allreduce)); the typed
/// methods (`allreduce_sum_f32`, …) build it.
#[derive(Debug)]
pub enum Reduction<'a> {
    SumF32(&'a mut [f32]),
    /// Each addition in f32, rounded to half (ties to even).
    SumF16(&'a mut [f16]),
    /// Wrapping on overflow, as every integer sum here.
    SumI32(&'a mut [i32]),
    SumI16(&'a mut [i16]),
    SumI8(&'a mut [i8]),
    MaxF32(&'a mut [f32]),
}

impl Reduction<'_> {
    /// The operation kind the meter counts and ranks compare.
    pub fn kind(&self) -> OpKind {
        match self {
            Reduction::SumF32(_) => OpKind::AllreduceSumF32,
            Reduction::SumF16(_) => OpKind::AllreduceSumF16,
            Reduction::SumI32(_) => OpKind::AllreduceSumI32,
            Reduction::SumI16(_) => OpKind::AllreduceSumI16,
            Reduction::SumI8(_) => OpKind::AllreduceSumI8,
            Reduction::MaxF32(_) => OpKind::AllreduceMaxF32,
        }
    }

    /// Whether the elements are combined by their maximum (else summed).
    pub fn is_max(&self) -> bool {
        matches!(self, Reduction::MaxF32(_))
    }

    /// The element type as NumPy and PyTorch name it (`"float32"`, …).
    pub fn dtype(&self) -> &'static str {
        match self {
            Reduction::SumF32(_) | Reduction::MaxF32(_) => "float32",
            Reduction::SumF16(_) => "float16",
            Reduction::SumI32(_) => "int32",
            Reduction::SumI16(_) => "int16",
            Reduction::SumI8(_) => "int8",
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Reduction::SumF32(b) | Reduction::MaxF32(b) => b.len(),
            Reduction::SumF16(b) => b.len(),
            Reduction::SumI32(b) => b.len(),
            Reduction::SumI16(b) => b.len(),
            Reduction::SumI8(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer's memory, for a backend that moves bytes (the element
    /// type is [`Reduction::dtype`], native byte order).
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        let bytes = self.bytes();
        let ptr = match self {
            Reduction::SumF32(b) | Reduction::MaxF32(b) => b.as_mut_ptr().cast::<u8>(),
            Reduction::SumF16(b) => b.as_mut_ptr().cast::<u8>(),
            Reduction::SumI32(b) => b.as_mut_ptr().cast::<u8>(),
            Reduction::SumI16(b) => b.as_mut_ptr().cast::<u8>(),
            Reduction::SumI8(b) => b.as_mut_ptr().cast::<u8>(),
        };
        // SAFETY: the slice is borrowed mutably for the result's lifetime,
        // `bytes` is its size, u8 has alignment 1, and every byte pattern
        // is a valid f32, f16, i32, i16 or i8, so writes through the bytes
        // leave valid elements.
        unsafe { std::slice::from_raw_parts_mut(ptr, bytes) }
    }

    /// The buffer's size in bytes.
    pub fn bytes(&self) -> usize {
        match self {
            Reduction::SumF32(b) | Reduction::MaxF32(b) => std::mem::size_of_val(*b),
            Reduction::SumF16(b) => std::mem::size_of_val(*b),
            Reduction::SumI32(b) => std::mem::size_of_val(*b),
            Reduction::SumI16(b) => std::mem::size_of_val(*b),
            Reduction::SumI8(b) => std::mem::size_of_val(*b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reduction_names_its_kind_and_exposes_its_bytes() {
        let (mut f, mut h, mut i, mut s, mut b, mut m) =
            ([0f32; 3], [f16::ZERO; 3], [0i32; 3], [0i16; 3], [0i8; 3], [0f32; 3]);
        let all = [
            (Reduction::SumF32(&mut f), OpKind::AllreduceSumF32, "float32", 12),
            (Reduction::SumF16(&mut h), OpKind::AllreduceSumF16, "float16", 6),
            (Reduction::SumI32(&mut i), OpKind::AllreduceSumI32, "int32", 12),
            (Reduction::SumI16(&mut s), OpKind::AllreduceSumI16, "int16", 6),
            (Reduction::SumI8(&mut b), OpKind::AllreduceSumI8, "int8", 3),
            (Reduction::MaxF32(&mut m), OpKind::AllreduceMaxF32, "float32", 12),
        ];
        for (mut r, kind, dtype, bytes) in all {
            assert_eq!((r.kind(), r.dtype(), r.bytes(), r.len()), (kind, dtype, bytes, 3));
            assert_eq!(r.is_max(), kind == OpKind::AllreduceMaxF32);
            assert_eq!(r.as_mut_bytes().len(), bytes);
            r.as_mut_bytes().fill(1);
        }
        // Writes through the bytes land in the caller's elements.
        assert_eq!(f[2].to_bits(), 0x0101_0101);
        assert_eq!((h[0].to_bits(), i[1], s[2], b[0]), (0x0101, 0x0101_0101, 0x0101, 1));
    }
}
