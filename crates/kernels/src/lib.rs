//! gradcomp-kernels: gradcomp's compressors on a GPU, written in cubecl.
//!
//! Each device compressor reads a gradient that already lives on the device
//! (a [`DeviceF32`]) and produces the same [`gradcomp_compress::Message`] the
//! CPU compressor produces, so the wire format, the collectives and the
//! decoders are shared: bytes from a GPU worker and from a CPU worker mix in
//! one collective. Only the compressed payload (packed codes, halves, the
//! selected pairs) and a few per-block statistics cross to the host.
//!
//! - [`compressor`]: [`DeviceCompressor`], from a `CompressorConfig` to its
//!   kernels: the one entry point trainers and benchmarks use.
//! - [`form`]: a method's device form ([`form::DeviceForm`]), written in
//!   the method's own file; [`compressor::FORMS`] registers them, one line
//!   per method.
//! - [`reduce`]: per-block sums, sums of squares and max |x| (scalers, norms).
//! - [`fp16`]: the half-precision baseline, rounding exactly as `half` does.
//! - [`terngrad`]: TernGrad's scaler, stochastic ternarization and 2-bit
//!   packing in one pass.
//! - [`qsgd`]: per-bucket norms, then stochastic levels two to a word.
//! - [`onebit`]: sign messages: 1-bit SGD's bits and two means (summed in
//!   the CPU's order), signSGD's ±1, EF-SignSGD's ±‖g‖₁/d.
//! - [`signum`]: Signum's momentum in device memory, then its signs.
//! - [`natural`]: natural compression's stochastic powers of two, a byte each.
//! - [`blockwise`]: 8-bit dynamic quantization and fp4, block maxima then codes.
//! - [`chunked`]: SparseLoCo's per-tile top-k (the host codes the kept values).
//! - [`select`]: exact Top-k by radix select and the ordered compaction that
//!   every threshold sparsifier shares (Gaussian-k, DGC-k, threshold), and
//!   Rand-k's gather.
//! - [`lowrank`]: PowerSGD's matrix products, the factors alone crossing to the host.
//! - [`aggregate`]: decoding and summing N workers' ternary codes on the device.
//! - [`memory`]: error feedback and DGC momentum with their state on the device.
//! - [`elementwise`]: scaling (DGC's local clipping).
//!
//! Deterministic compressors are byte-identical to the CPU reference;
//! stochastic ones draw from a counter-based hash instead of the CPU's
//! xoshiro stream, so they agree in distribution (tested statistically).
//!
//! The crate compiles against no runtime; turn on `wgpu` or `cuda` to link one.

// Kernel bodies are cubecl's DSL, which expands `for i in a..b` but not
// iterator chains: index loops are the only form.
#![allow(clippy::needless_range_loop)]

pub mod aggregate;
pub mod blockwise;
pub mod buffer;
pub mod chunked;
pub mod compressor;
mod dense;
pub mod device;
pub mod elementwise;
pub mod form;
pub mod fp16;
mod hash;
pub mod lowrank;
pub mod memory;
pub mod natural;
pub mod onebit;
pub mod qsgd;
pub mod reduce;
pub mod select;
pub mod signum;
mod sparsify;
pub mod terngrad;

pub use buffer::{DeviceF32, KernelError};
pub use compressor::DeviceCompressor;
pub use cubecl::prelude::Client;
use cubecl::prelude::{CubeCount, CubeDim};

/// Waits until every kernel launched on `client` has finished.
pub fn sync(client: &Client) -> Result<(), KernelError> {
    cubecl::future::block_on(client.sync()).map_err(|e| KernelError::Read(format!("{e:?}")))
}

/// Units per cube for every kernel of the crate: a multiple of the warp and
/// wavefront widths, and within every backend's limit.
pub(crate) const CUBE_UNITS: u32 = 256;

/// The cube count for `work` items of `per_unit` each, capped so that the
/// grid-stride loops of the kernels cover the rest (65535 is the smallest
/// per-dimension limit across backends).
pub(crate) fn cubes_for(work: usize, per_unit: usize) -> u32 {
    let units = work.div_ceil(per_unit.max(1));
    units.div_ceil(CUBE_UNITS as usize).clamp(1, 4096) as u32
}

/// The launch geometry of a block-reduction kernel: a cube per block,
/// capped at 65535 (the smallest per-dimension limit across backends), the
/// kernel's loop over blocks covering the rest.
pub(crate) fn block_grid(blocks: usize) -> (CubeCount, CubeDim) {
    (CubeCount::Static(blocks.clamp(1, 65_535) as u32, 1, 1), CubeDim::new_1d(CUBE_UNITS))
}

/// The launch geometry of a grid-stride kernel over `work` items of
/// `per_unit` each: [`cubes_for`] cubes of [`CUBE_UNITS`] units.
pub(crate) fn grid(work: usize, per_unit: usize) -> (CubeCount, CubeDim) {
    (CubeCount::Static(cubes_for(work, per_unit), 1, 1), CubeDim::new_1d(CUBE_UNITS))
}
