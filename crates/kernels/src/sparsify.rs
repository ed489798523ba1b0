//! The sparsifiers' device forms, over the selection kernels of
//! [`crate::select`]: exact Top-k, Gaussian-k, DGC-k, Rand-k and the fixed
//! threshold, each under its configuration (whose density DGC's warm-up sets).

use gradcomp_compress::sparsify::dgck::DgcKConfig;
use gradcomp_compress::sparsify::gaussiank::GaussianKConfig;
use gradcomp_compress::sparsify::randk::RandKConfig;
use gradcomp_compress::sparsify::threshold::ThresholdConfig;
use gradcomp_compress::sparsify::topk::TopKConfig;
use gradcomp_compress::CompressorConfig;

use crate::form::{stateless, DeviceForm};
use crate::select;

/// The registry's line for `topk`.
pub(crate) fn topk_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Topk(c) = config else { return None };
    stateless(c, |client, g, c: &TopKConfig, _, out| select::top_k(client, g, c.density, c.wire, out))
}

/// The registry's line for `gaussiank` (not its refined variant, whose
/// correction loop runs on the host).
pub(crate) fn gaussiank_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Gaussiank(c) = config else { return None };
    if c.refine {
        return None;
    }
    stateless(c, |client, g, c: &GaussianKConfig, _, out| {
        select::gaussian_k(client, g, c.density, c.wire, out)
    })
}

/// The registry's line for `dgck`.
pub(crate) fn dgck_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Dgck(c) = config else { return None };
    stateless(c, |client, g, c: &DgcKConfig, ctx, out| select::dgc_k(client, g, c, ctx, out))
}

/// The registry's line for `randk`.
pub(crate) fn randk_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Randk(c) = config else { return None };
    stateless(c, |client, g, c: &RandKConfig, ctx, out| select::rand_k(client, g, c, ctx, out))
}

/// The registry's line for `threshold`.
pub(crate) fn threshold_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Threshold(c) = config else { return None };
    stateless(c, |client, g, c: &ThresholdConfig, _, out| {
        select::threshold(client, g, c.threshold, c.wire, out)
    })
}
