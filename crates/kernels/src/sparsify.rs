//! The sparsifiers' device forms, over the selection kernels of
//! [`crate::select`]: exact Top-k, Gaussian-k, DGC-k, Rand-k and the fixed
//! threshold, each with its configuration (whose density DGC's warm-up sets).

use gradcomp_compress::method::Method;
use gradcomp_compress::sparsify::dgck::DgcKConfig;
use gradcomp_compress::sparsify::gaussiank::GaussianKConfig;
use gradcomp_compress::sparsify::randk::RandKConfig;
use gradcomp_compress::sparsify::threshold::ThresholdConfig;
use gradcomp_compress::sparsify::topk::TopKConfig;
use gradcomp_compress::{CompressorConfig, Message, UnitContext};

use crate::buffer::{DeviceF32, KernelError};
use crate::form::DeviceForm;
use crate::{select, Client};

/// One sparsifier's device form: its configuration, and the kernel that
/// selects under it.
struct Sparsifier<C> {
    config: C,
    select: fn(&Client, &DeviceF32, &C, &UnitContext, &mut Message) -> Result<(), KernelError>,
}

impl<C: std::fmt::Debug> std::fmt::Debug for Sparsifier<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Sparsifier").field(&self.config).finish()
    }
}

impl<C: Method + Clone + 'static> DeviceForm for Sparsifier<C> {
    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        (self.select)(client, g, &self.config, ctx, out)
    }

    fn set_density(&mut self, density: f64) {
        self.config.set_density(density);
    }
}

fn form<C: Method + Clone + 'static>(
    config: &C,
    select: fn(&Client, &DeviceF32, &C, &UnitContext, &mut Message) -> Result<(), KernelError>,
) -> Option<Box<dyn DeviceForm>> {
    Some(Box::new(Sparsifier { config: config.clone(), select }))
}

/// The registry's line for `topk`.
pub(crate) fn topk_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Topk(c) = config else { return None };
    form(c, |client, g, c: &TopKConfig, _, out| select::top_k(client, g, c.density, c.wire, out))
}

/// The registry's line for `gaussiank` (not its refined variant, whose
/// correction loop runs on the host).
pub(crate) fn gaussiank_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Gaussiank(c) = config else { return None };
    if c.refine {
        return None;
    }
    form(c, |client, g, c: &GaussianKConfig, _, out| select::gaussian_k(client, g, c.density, c.wire, out))
}

/// The registry's line for `dgck`.
pub(crate) fn dgck_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Dgck(c) = config else { return None };
    form(c, |client, g, c: &DgcKConfig, ctx, out| select::dgc_k(client, g, c, ctx, out))
}

/// The registry's line for `randk`.
pub(crate) fn randk_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Randk(c) = config else { return None };
    form(c, |client, g, c: &RandKConfig, ctx, out| select::rand_k(client, g, c, ctx, out))
}

/// The registry's line for `threshold`.
pub(crate) fn threshold_form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Threshold(c) = config else { return None };
    form(c, |client, g, c: &ThresholdConfig, _, out| select::threshold(client, g, c.threshold, c.wire, out))
}
