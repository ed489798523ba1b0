//! Low-rank compression: PowerSGD (Vogels, Karimireddy & Jaggi, NeurIPS
//! 2019; ALGORITHMS.md §8), a matrix's gradient approximated by a rank-r
//! product P Qᵀ found by one step of power iteration, its two factors summed
//! by two allreduces.

mod orthogonalize;
mod powersgd;

pub use orthogonalize::orthogonalize;
pub use powersgd::{PowerSgd, PowerSgdConfig, Product};
