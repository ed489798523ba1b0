//! A method's device form ([`DeviceForm`]): its kernels for one unit,
//! written beside the method's kernels in the method's own file and found
//! through the registry (`compressor.rs`'s `FORMS`, one line per method),
//! the device counterpart of the host registry (`gradcomp_compress::config`'s
//! `methods!`). A method without a line compresses on the host.
//!
//! A form answers for its own configuration and options only: its builder
//! returns `None` for another method's configuration and for options its
//! kernels do not follow (fp4's stochastic rounding, refined Gaussian-k),
//! so nothing here matches on the method.

use std::fmt;

use gradcomp_compress::method::Method;
use gradcomp_compress::{CompressorConfig, Message, ReduceOp, StateError, UnitContext};

use crate::buffer::{DeviceF32, KernelError};
use crate::Client;

/// One unit's compressor on the device: the CPU `Compressor`'s protocol
/// (exchange rounds, then the message) on a gradient in device memory.
/// Some keep state across steps (Signum's momentum, PowerSGD's factors).
pub trait DeviceForm: fmt::Debug + Send {
    /// This worker's contribution to exchange round `round`, appended to
    /// `out`, and how the workers' contributions combine (`None`: no part
    /// in this round). The default takes part in none.
    fn round_contribution(
        &mut self,
        _client: &Client,
        _round: usize,
        _g: &DeviceF32,
        _ctx: &UnitContext,
        _out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, KernelError> {
        Ok(None)
    }

    /// Takes the combined contributions of `workers` workers to `round`.
    fn round_result(&mut self, _round: usize, _combined: &[f32], _workers: usize) {}

    /// `g`'s message, the one the CPU compressor produces from a host copy
    /// of `g`: bit for bit for the deterministic methods, in distribution for
    /// the stochastic ones. After the rounds, it uses their results.
    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError>;

    /// The state the CPU compressor's `state` holds, read from the device
    /// (so a checkpoint moves between the two); empty for most.
    fn state(&self, _client: &Client) -> Result<Vec<Vec<f32>>, KernelError> {
        Ok(Vec::new())
    }

    /// Restores [`DeviceForm::state`].
    fn restore(&mut self, _client: &Client, _state: &[Vec<f32>]) -> Result<(), StateError> {
        Ok(())
    }

    /// Sets a density-driven sparsifier's density (DGC's warm-up); the
    /// others ignore it.
    fn set_density(&mut self, _density: f64) {}
}

/// A method's device form for a unit of `shape`, if `config` is that
/// method's and its kernels follow these options.
pub type Builder = fn(config: &CompressorConfig, shape: &[usize]) -> Option<Box<dyn DeviceForm>>;

/// A kernel that compresses under a method's configuration.
pub(crate) type Kernel<C> =
    fn(&Client, &DeviceF32, &C, &UnitContext, &mut Message) -> Result<(), KernelError>;

/// The device form of a method whose kernels keep no state across steps:
/// its configuration (whose density DGC's warm-up sets) and its kernel.
struct Stateless<C> {
    config: C,
    kernel: Kernel<C>,
}

impl<C: fmt::Debug> fmt::Debug for Stateless<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Stateless").field(&self.config).finish()
    }
}

impl<C: Method + Clone + 'static> DeviceForm for Stateless<C> {
    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        (self.kernel)(client, g, &self.config, ctx, out)
    }

    fn set_density(&mut self, density: f64) {
        self.config.set_density(density);
    }
}

/// The device form of `kernel` under `config`, for a registry line.
pub(crate) fn stateless<C: Method + Clone + 'static>(
    config: &C,
    kernel: Kernel<C>,
) -> Option<Box<dyn DeviceForm>> {
    Some(Box::new(Stateless { config: config.clone(), kernel }))
}
