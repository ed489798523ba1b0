//! One entry point from a compressor configuration to its device kernels,
//! the device counterpart of `CompressorConfig::build`: a trainer or a
//! benchmark holds a [`DeviceCompressor`] per unit and calls `compress` on a
//! gradient in device memory, whatever the method.

use gradcomp_compress::{CompressorConfig, Message, UnitContext};

use crate::buffer::{DeviceF32, KernelError};
use crate::qsgd::DeviceQsgd;
use crate::terngrad::DeviceTernGrad;
use crate::{fp16, onebit, select, Client};

/// A compressor whose every pass runs on the device.
#[derive(Clone, Debug)]
pub struct DeviceCompressor {
    config: CompressorConfig,
}

impl DeviceCompressor {
    /// The device form of `config`, or [`KernelError::Unsupported`] for the
    /// methods that have none (trimmed top-k and eSGD run on the CPU path).
    pub fn new(config: &CompressorConfig) -> Result<Self, KernelError> {
        match config {
            CompressorConfig::Trimmedk(_) => Err(KernelError::Unsupported("trimmedk".into())),
            CompressorConfig::Esgd(_) => Err(KernelError::Unsupported("esgd".into())),
            CompressorConfig::Powersgd(_) => Err(KernelError::Unsupported("powersgd".into())),
            CompressorConfig::Gaussiank(c) if c.refine => {
                Err(KernelError::Unsupported("gaussiank-refined".into()))
            }
            _ => Ok(Self { config: config.clone() }),
        }
    }

    /// This worker's scalar for scalar sharing (TernGrad's scaler), if the
    /// method shares one: the device form of `Compressor::local_scalar`.
    pub fn local_scalar(&self, client: &Client, g: &DeviceF32) -> Result<Option<f32>, KernelError> {
        match &self.config {
            CompressorConfig::Terngrad(c) if c.share_scaler => {
                Ok(Some(DeviceTernGrad::new(c.clone()).scaler(client, g)?))
            }
            _ => Ok(None),
        }
    }

    /// `g`'s message, the one `config.build().compress(g, ctx, out)` produces
    /// from a host copy of `g`: bit for bit for the deterministic methods, in
    /// distribution for TernGrad and QSGD.
    pub fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        match &self.config {
            CompressorConfig::Dense {} => {
                out.dense_mut().values = g.read(client)?;
                Ok(())
            }
            CompressorConfig::Fp16 {} => fp16::compress(client, g, out),
            CompressorConfig::Terngrad(c) => {
                DeviceTernGrad::new(c.clone()).compress(client, g, ctx.shared_scalar, &ctx.key, out)
            }
            CompressorConfig::Qsgd(c) => DeviceQsgd::new(c.clone()).compress(client, g, &ctx.key, out),
            CompressorConfig::Onebit(_) => onebit::compress(client, g, out),
            CompressorConfig::Topk(c) => select::top_k(client, g, c.density, c.wire, out),
            CompressorConfig::Gaussiank(c) => select::gaussian_k(client, g, c.density, c.wire, out),
            CompressorConfig::Dgck(c) => select::dgc_k(client, g, c, ctx, out),
            CompressorConfig::Randk(c) => select::rand_k(client, g, c, ctx, out),
            CompressorConfig::Threshold(c) => select::threshold(client, g, c.threshold, c.wire, out),
            CompressorConfig::Trimmedk(_) | CompressorConfig::Esgd(_) | CompressorConfig::Powersgd(_) => {
                unreachable!("DeviceCompressor::new refuses methods without a device form")
            }
        }
    }

    /// Sets the density of a density-driven sparsifier (DGC's warm-up
    /// schedule drives it), as `Compressor::set_density` does; other methods
    /// ignore it.
    pub fn set_density(&mut self, density: f64) {
        self.config.set_density(density);
    }

    /// The configuration this compressor runs.
    pub fn config(&self) -> &CompressorConfig {
        &self.config
    }
}
