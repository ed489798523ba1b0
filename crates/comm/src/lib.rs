//! gradcomp-comm: moving bytes between workers.
//!
//! This crate will hold the `Collective` trait, the in-process and MPI
//! backends, the byte meter and the network model (issue #3). Until then it
//! holds only the cost model's basic unit so that the workspace layering of
//! `docs/ARCHITECTURE.md` is in place.

/// Seconds to move `bytes` over a link of latency `alpha` (s) and bandwidth
/// `bytes_per_second`: the α–β model every collective's cost is built from.
pub fn link_seconds(alpha: f64, bytes_per_second: f64, bytes: u64) -> f64 {
    alpha + bytes as f64 / bytes_per_second
}

#[cfg(test)]
mod tests {
    #[test]
    fn alpha_beta() {
        assert_eq!(super::link_seconds(1e-4, 1e9, 1_000_000), 1e-4 + 1e-3);
    }
}
