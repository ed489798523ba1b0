//! The device kernels against the CPU reference of gradcomp-compress, on
//! whatever wgpu adapter the machine has: Mesa's software Vulkan (lavapipe)
//! in CI, a real GPU elsewhere. Deterministic compressors must produce the
//! same message and the same wire bytes; stochastic ones the same
//! distribution.
#![cfg(feature = "wgpu")]

use std::sync::OnceLock;

use cubecl::prelude::Client;
use gradcomp_compress::aggregate::TernarySum;
use gradcomp_compress::codec;
use gradcomp_compress::message::{SparseWire, TernaryMessage};
use gradcomp_compress::quantize::terngrad::{TernGrad, TernGradConfig};
use gradcomp_compress::{reduce, Compressor, CompressorConfig, Message, RngKey, UnitContext, UnitRng};
use gradcomp_kernels::terngrad::DeviceTernGrad;
use gradcomp_kernels::{aggregate, fp16, onebit, reduce as dreduce, select, DeviceF32};
use proptest::prelude::*;

mod entry;
mod grace;
mod memories;
mod quantizers;
mod sparsifiers;

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        cubecl::Device::wgpu(Default::default())
            .expect("no wgpu adapter: install mesa-vulkan-drivers (lavapipe) or run on a GPU")
            .client()
    })
}

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = UnitRng::from_parts(&[seed]);
    (0..n).map(|_| rng.next_gaussian() as f32).collect()
}

fn wire(msg: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode(msg, 3, &mut out);
    out
}

fn cpu_message(config: &CompressorConfig, g: &[f32], ctx: &UnitContext) -> Message {
    let mut msg = Message::default();
    config.build().compress(g, ctx, &mut msg);
    msg
}

/// Values every f32 edge case of the half conversion lands on.
fn edge_values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -2.5,
        0.1,
        65504.0,
        65519.0,
        65520.0,
        -65536.0,
        70000.0,
        1e-8,
        -1e-8,
        5.96e-8,
        2.98e-8,
        2.99e-8,
        6.1e-5,
        6.09e-5,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1.000_976_6,
        1.000_488_3,
        1.001_464_8,
    ];
    v.extend((0..2000).map(|i| f32::from_bits(0x3380_0000 + i * 0x0004_1234)));
    v
}

fn decode(m: &Message, len: usize) -> Vec<f32> {
    let mut out = vec![0.0; len];
    m.decompress_into(&mut out);
    out
}

/// Gradients at many scales with zeros, negative zeros and NaN: the inputs
/// where a sign rule or a reduction order shows.
fn awkward(n: usize, seed: u64) -> Vec<f32> {
    let mut g = gaussian(n, seed);
    for (i, v) in g.iter_mut().enumerate() {
        match i % 97 {
            0 => *v = 0.0,
            1 => *v = -0.0,
            2 => *v *= 1e6,
            3 => *v *= 1e-6,
            _ => {}
        }
    }
    g
}
