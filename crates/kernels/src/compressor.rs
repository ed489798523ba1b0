//! One entry point from a compressor configuration to its device kernels,
//! the device counterpart of `CompressorConfig::build`: a trainer or a
//! benchmark holds a [`DeviceCompressor`] per unit and calls `compress` on a
//! gradient in device memory, whatever the method. Which kernels run is
//! the method's own device form ([`crate::form`]), found in the registry
//! here ([`FORMS`]).

use gradcomp_compress::{CompressorConfig, Message, ReduceOp, StateError, UnitContext};

use crate::buffer::{DeviceF32, KernelError};
use crate::form::{Builder, DeviceForm};
use crate::Client;

/// The registry: every method with a device form, one line each.
pub const FORMS: &[Builder] = &[
    crate::dense::form,
    crate::fp16::form,
    crate::terngrad::form,
    crate::qsgd::form,
    crate::onebit::onebit_form,
    crate::onebit::signsgd_form,
    crate::onebit::efsignsgd_form,
    crate::signum::form,
    crate::natural::form,
    crate::blockwise::eightbit_form,
    crate::blockwise::fp4_form,
    crate::chunked::sparseloco_form,
    crate::sparsify::topk_form,
    crate::sparsify::gaussiank_form,
    crate::sparsify::dgck_form,
    crate::sparsify::randk_form,
    crate::sparsify::threshold_form,
    crate::lowrank::form,
];

/// The device form of `config` for a unit of `shape`, from the registry.
pub fn device_form(config: &CompressorConfig, shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    FORMS.iter().find_map(|build| build(config, shape))
}

/// Whether the GPU kernels know `config`'s method with these options.
pub fn has_device_form(config: &CompressorConfig) -> bool {
    device_form(config, &[1]).is_some()
}

/// A compressor whose every pass runs on the device: one per unit, as the
/// CPU's `Compressor`, since some keep state of their own across steps.
#[derive(Debug)]
pub struct DeviceCompressor {
    config: CompressorConfig,
    form: Box<dyn DeviceForm>,
    /// The CPU compressor's exchange rounds for this unit.
    rounds: usize,
}

impl DeviceCompressor {
    /// The device form of `config` for a unit of `shape`, or
    /// [`KernelError::Unsupported`] for the methods that have none (trimmed
    /// top-k, eSGD, refined Gaussian-k and stochastic fp4 run on the CPU
    /// path, as does any method without a line in the registry: a new
    /// method needs no kernel to run).
    pub fn new(config: &CompressorConfig, shape: &[usize]) -> Result<Self, KernelError> {
        let form =
            device_form(config, shape).ok_or_else(|| KernelError::Unsupported(config.name().into()))?;
        let rounds = config.build_for(shape).rounds();
        Ok(Self { config: config.clone(), form, rounds })
    }

    /// Exchange rounds before `compress`: the CPU compressor's own
    /// (PowerSGD's two, TernGrad's shared scaler's one), asked of it.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// This worker's contribution to exchange round `round`, appended to
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
        self.form.round_contribution(client, round, g, ctx, out)
    }

    /// Takes the combined contributions of `workers` workers to `round`.
    pub fn round_result(&mut self, round: usize, combined: &[f32], workers: usize) {
        self.form.round_result(round, combined, workers)
    }

    /// The state this compressor keeps across steps, for checkpoints (the
    /// CPU compressor's `state`, so a checkpoint moves between the two):
    /// PowerSGD's Q, Signum's momentum (read back from the device).
    pub fn state(&self, client: &Client) -> Result<Vec<Vec<f32>>, KernelError> {
        self.form.state(client)
    }

    /// Restores [`DeviceCompressor::state`].
    pub fn restore(&mut self, client: &Client, state: &[Vec<f32>]) -> Result<(), StateError> {
        self.form.restore(client, state)
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
        self.form.compress(client, g, ctx, out)
    }

    /// Sets the density of a density-driven sparsifier (DGC's warm-up
    /// schedule drives it), as `Compressor::set_density` does; other methods
    /// ignore it.
    pub fn set_density(&mut self, density: f64) {
        self.config.set_density(density);
        self.form.set_density(density);
    }

    /// The configuration this compressor runs.
    pub fn config(&self) -> &CompressorConfig {
        &self.config
    }
}
