//! What a collective call is: its kind ([`OpKind`]) as the byte meter counts
//! it and ranks compare it, and one call's sizes ([`CollectiveCall`]) as the
//! network model prices it.

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
