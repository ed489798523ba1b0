//! One entry point from a compressor configuration to its device kernels,
//! the device counterpart of `CompressorConfig::build`: a trainer or a
//! benchmark holds a [`DeviceCompressor`] per unit and calls `compress` on a
//! gradient in device memory, whatever the method.

use gradcomp_compress::codebook::BlockCodebook;
use gradcomp_compress::quantize::Rounding;
use gradcomp_compress::{CompressorConfig, Message, ReduceOp, StateError, UnitContext};

use crate::buffer::{DeviceF32, KernelError};
use crate::lowrank::DevicePowerSgd;
use crate::onebit::SignValues;
use crate::qsgd::DeviceQsgd;
use crate::signum::DeviceSignum;
use crate::terngrad::DeviceTernGrad;
use crate::{blockwise, chunked, fp16, natural, onebit, select, Client};

/// A compressor whose every pass runs on the device: one per unit, as the
/// CPU's `Compressor`, since some keep state of their own across steps.
#[derive(Clone, Debug)]
pub struct DeviceCompressor {
    config: CompressorConfig,
    /// PowerSGD's factors and schedule.
    lowrank: Option<Box<DevicePowerSgd>>,
    /// Signum's momentum.
    signum: Option<DeviceSignum>,
    /// The agreed scalar of the last round (TernGrad's shared scaler).
    shared: Option<f32>,
    /// The unit's shape (SparseLoCo's tiles).
    shape: Vec<usize>,
    /// The CPU compressor's agreement rounds for this unit.
    rounds: usize,
}

/// Whether the GPU kernels know `config`'s method.
pub fn has_device_form(config: &CompressorConfig) -> bool {
    use CompressorConfig as C;
    match config {
        C::Gaussiank(c) => !c.refine,
        C::Dense(_) | C::Fp16(_) | C::Terngrad(_) | C::Qsgd(_) | C::Onebit(_) | C::Signsgd(_) => true,
        C::Efsignsgd(_) | C::Signum(_) | C::Natural(_) | C::Eightbit(_) | C::Topk(_) => true,
        C::Dgck(_) | C::Randk(_) | C::Threshold(_) | C::Powersgd(_) | C::Sparseloco(_) => true,
        // Stochastic fp4 draws from the CPU's sequential stream, which a kernel cannot follow.
        C::Fp4(c) => c.rounding == Rounding::Nearest,
        _ => false,
    }
}

impl DeviceCompressor {
    /// The device form of `config` for a unit of `shape`, or
    /// [`KernelError::Unsupported`] for the methods that have none (trimmed
    /// top-k, eSGD and refined Gaussian-k run on the CPU path, as does any
    /// method not listed in [`has_device_form`]: a new method needs no
    /// kernel to run).
    pub fn new(config: &CompressorConfig, shape: &[usize]) -> Result<Self, KernelError> {
        if !has_device_form(config) {
            return Err(KernelError::Unsupported(config.name().into()));
        }
        let lowrank = match config {
            CompressorConfig::Powersgd(c) => Some(Box::new(DevicePowerSgd::new(c, shape))),
            _ => None,
        };
        let signum = match config {
            CompressorConfig::Signum(c) => Some(DeviceSignum::new(c)),
            _ => None,
        };
        let rounds = config.build_for(shape).rounds();
        Ok(Self { config: config.clone(), lowrank, signum, shared: None, shape: shape.to_vec(), rounds })
    }

    /// Agreement rounds before `compress`: the CPU compressor's own
    /// (PowerSGD's two, TernGrad's shared scaler's one), asked of it.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// This worker's contribution to agreement round `round`, appended to
    /// `out`, and how the workers' contributions combine (`None`: no part in
    /// this round): PowerSGD's factors, or TernGrad's local scaler.
    pub fn round_contribution(
        &mut self,
        client: &Client,
        round: usize,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, KernelError> {
        if let Some(p) = &mut self.lowrank {
            return p.round_contribution(client, round, g, ctx, out);
        }
        match &self.config {
            CompressorConfig::Terngrad(c) if c.share_scaler && round == 0 => {
                self.shared = None;
                out.push(DeviceTernGrad::new(c.clone()).scaler(client, g)?);
                Ok(Some(ReduceOp::Max))
            }
            _ => Ok(None),
        }
    }

    /// Takes the combined contributions of `workers` workers to `round`.
    pub fn round_result(&mut self, round: usize, combined: &[f32], workers: usize) {
        match &mut self.lowrank {
            Some(p) => p.round_result(round, combined, workers),
            None => self.shared = combined.first().copied(),
        }
    }

    /// The state this compressor keeps across steps, for checkpoints (the
    /// CPU compressor's `state`, so a checkpoint moves between the two):
    /// PowerSGD's Q, Signum's momentum (read back from the device).
    pub fn state(&self, client: &Client) -> Result<Vec<Vec<f32>>, KernelError> {
        if let Some(p) = &self.lowrank {
            return Ok(p.state().into_iter().map(<[f32]>::to_vec).collect());
        }
        match &self.signum {
            Some(s) => Ok(vec![s.state(client)?]),
            None => Ok(Vec::new()),
        }
    }

    /// Restores [`DeviceCompressor::state`].
    pub fn restore(&mut self, client: &Client, state: &[Vec<f32>]) -> Result<(), StateError> {
        if let Some(p) = &mut self.lowrank {
            return p.restore(state);
        }
        if let Some(s) = &mut self.signum {
            gradcomp_compress::state::expect_buffers("Signum", state, 1)?;
            s.restore(client, &state[0]);
        }
        Ok(())
    }

    /// `g`'s message, the one `config.build().compress(g, ctx, out)` produces
    /// from a host copy of `g`: bit for bit for the deterministic methods, in
    /// distribution for TernGrad and QSGD. After the rounds: a compressor
    /// with rounds uses their results (the shared scaler, PowerSGD's factors).
    pub fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        if let Some(p) = &mut self.lowrank {
            p.message(ctx, out);
            return Ok(());
        }
        match &self.config {
            CompressorConfig::Dense(_) => {
                out.dense_mut().values = g.read(client)?;
                Ok(())
            }
            CompressorConfig::Fp16(_) => fp16::compress(client, g, out),
            CompressorConfig::Terngrad(c) => {
                DeviceTernGrad::new(c.clone()).compress(client, g, self.shared.take(), &ctx.key, out)
            }
            CompressorConfig::Qsgd(c) => DeviceQsgd::new(c.clone()).compress(client, g, &ctx.key, out),
            CompressorConfig::Onebit(_) => onebit::compress(client, g, SignValues::Means, out),
            CompressorConfig::Signsgd(_) => onebit::compress(client, g, SignValues::Unit, out),
            CompressorConfig::Efsignsgd(_) => onebit::compress(client, g, SignValues::Scaled, out),
            CompressorConfig::Signum(_) => {
                self.signum.as_mut().expect("built with its momentum").compress(client, g, out)
            }
            CompressorConfig::Natural(_) => natural::compress(client, g, &ctx.key, out),
            CompressorConfig::Eightbit(c) => {
                blockwise::compress(client, g, BlockCodebook::Dynamic, c.block, out)
            }
            CompressorConfig::Fp4(c) => blockwise::compress(client, g, c.codebook(), c.block, out),
            CompressorConfig::Sparseloco(c) => chunked::compress(client, g, &self.shape, &c.options(), out),
            CompressorConfig::Topk(c) => select::top_k(client, g, c.density, c.wire, out),
            CompressorConfig::Gaussiank(c) => select::gaussian_k(client, g, c.density, c.wire, out),
            CompressorConfig::Dgck(c) => select::dgc_k(client, g, c, ctx, out),
            CompressorConfig::Randk(c) => select::rand_k(client, g, c, ctx, out),
            CompressorConfig::Threshold(c) => select::threshold(client, g, c.threshold, c.wire, out),
            _ => unreachable!("PowerSGD returned above; DeviceCompressor::new refuses the others"),
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
