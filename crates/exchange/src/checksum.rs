//! FNV-1a hashes: what workers compare to prove they agree (parameters,
//! layouts, configurations).

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a over the parameters' bit patterns, one word per value: what
/// workers compare to prove their replicas identical.
pub fn checksum(params: &[f32]) -> u64 {
    let mut h = FNV_OFFSET;
    for p in params {
        h ^= u64::from(p.to_bits());
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// FNV-1a over bytes.
pub fn checksum_bytes(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}
