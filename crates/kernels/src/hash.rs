//! The device's random draws: a counter-based hash of (stream key, element
//! index), so every element's draw is independent of launch geometry and of
//! how many draws other elements made. PCG's output permutation (O'Neill,
//! "PCG: A Family of Simple Fast Space-Efficient Statistically Good
//! Algorithms", 2014, as `pcg_hash` in Jarzynski & Olano, JCGT 2020), applied
//! twice with the key folded in between.

use cubecl::prelude::*;
use gradcomp_compress::RngKey;

#[cube]
pub(crate) fn pcg_hash(x: u32) -> u32 {
    let state = x * 747_796_405u32 + 2_891_336_453u32;
    let word = ((state >> ((state >> 28u32) + 4u32)) ^ state) * 277_803_737u32;
    (word >> 22u32) ^ word
}

/// A uniform u32 for element `i` of the stream `(k0, k1)`.
#[cube]
pub(crate) fn draw(i: u32, k0: u32, k1: u32) -> u32 {
    pcg_hash(pcg_hash(i ^ k0) + k1)
}

/// The two 32-bit stream words for `key`, taken from the CPU's stream so that
/// the same (seed, rank, step, unit) names the same device stream.
pub(crate) fn stream_words(key: &RngKey) -> (u32, u32) {
    let x = key.rng().next_u64();
    (x as u32, (x >> 32) as u32)
}
