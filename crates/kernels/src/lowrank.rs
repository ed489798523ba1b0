//! PowerSGD on the device (ALGORITHMS.md §8): the matrix products of its
//! two rounds run as kernels on the gradient where it lies, and only the
//! factors P (`rows × r`) and Q (`cols × r`) cross to the host for the
//! allreduces. The orthogonalizations, the warm-start Q and the schedule are
//! the CPU's [`PowerSgd`], so both paths run one algorithm; each product
//! sums in the CPU loops' order, so they agree bit for bit where the backend
//! does not contract `a·b + c` into one rounding.

use cubecl::prelude::*;
use gradcomp_compress::lowrank::{PowerSgd, PowerSgdConfig, Product};
use gradcomp_compress::message::LowRankMessage;
use gradcomp_compress::{Compressor, Message, ReduceOp, UnitContext};

use crate::buffer::{DeviceF32, KernelError};
use crate::form::DeviceForm;
use crate::grid;
use gradcomp_compress::{CompressorConfig, StateError};

/// `p[i, s] = Σ_j m[i, j] · q[j, s]`, one unit per entry of P.
#[cube(launch)]
fn project(m: &[f32], q: &[f32], p: &mut [f32], cols: u32, rank: u32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let cols = cols as usize;
    let rank = rank as usize;
    let mut t = ABSOLUTE_POS;
    while t < p.len() {
        let i = t / rank;
        let s = t % rank;
        let mut acc = 0.0f32;
        for j in 0..cols {
            acc += m[i * cols + j] * q[j * rank + s];
        }
        p[t] = acc;
        t += stride;
    }
}

/// `q[j, s] = Σ_i m[i, j] · p[i, s]`, one unit per entry of Q.
#[cube(launch)]
fn back_project(m: &[f32], p: &[f32], q: &mut [f32], rows: u32, rank: u32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let rows = rows as usize;
    let rank = rank as usize;
    let cols = q.len() / rank;
    let mut t = ABSOLUTE_POS;
    while t < q.len() {
        let j = t / rank;
        let s = t % rank;
        let mut acc = 0.0f32;
        for i in 0..rows {
            acc += m[i * cols + j] * p[i * rank + s];
        }
        q[t] = acc;
        t += stride;
    }
}

/// `out[i, j] += weight · Σ_s p[i, s] · q[j, s]`: the CPU's `add_low_rank`.
#[cube(launch)]
fn add_product(out: &mut [f32], p: &[f32], q: &[f32], cols: u32, rank: u32, weight: f32) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let cols = cols as usize;
    let rank = rank as usize;
    let mut t = ABSOLUTE_POS;
    while t < out.len() {
        let i = t / cols;
        let j = t % cols;
        let mut v = 0.0f32;
        for s in 0..rank {
            v += p[i * rank + s] * q[j * rank + s];
        }
        out[t] += weight * v;
        t += stride;
    }
}

/// `out += weight · P Qᵀ` for a low-rank message, on the device (error
/// feedback's residual keeps what the approximation missed).
pub fn add_low_rank(
    client: &Client,
    m: &LowRankMessage,
    weight: f32,
    out: &mut DeviceF32,
) -> Result<(), KernelError> {
    let (rows, cols, rank) = (m.rows as usize, m.cols as usize, m.rank as usize);
    if rows * cols != out.len || m.p.len() != rows * rank || m.q.len() != cols * rank {
        return Err(KernelError::Input(format!(
            "a {rows}×{cols} rank-{rank} message with {} and {} factor values does not fit {} elements",
            m.p.len(),
            m.q.len(),
            out.len
        )));
    }
    if out.len == 0 || rank == 0 {
        return Ok(());
    }
    let (p, q) = (DeviceF32::upload(client, &m.p), DeviceF32::upload(client, &m.q));
    let (cubes, dim) = grid(out.len, 1);
    add_product::launch(client, cubes, dim, out.arg(), p.arg(), q.arg(), cols as u32, rank as u32, weight);
    Ok(())
}

/// One unit's PowerSGD with its products on the device.
#[derive(Clone, Debug)]
pub struct DevicePowerSgd {
    host: PowerSgd,
    rows: usize,
    cols: usize,
}

impl DevicePowerSgd {
    /// PowerSGD for a tensor of `shape` whose gradient lives on the device.
    pub fn new(cfg: &PowerSgdConfig, shape: &[usize]) -> Self {
        let (rows, cols) = PowerSgdConfig::matrix(shape);
        Self { host: PowerSgd::new(cfg, shape), rows, cols }
    }

    /// This worker's contribution to `round` (see
    /// `Compressor::round_contribution`), computed from the device buffer `m`.
    pub fn round_contribution(
        &mut self,
        client: &Client,
        round: usize,
        m: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, KernelError> {
        if m.len != self.rows * self.cols {
            return Err(KernelError::Input(format!(
                "PowerSGD's {}×{} unit got {} values",
                self.rows, self.cols, m.len
            )));
        }
        let (rows, cols) = (self.rows, self.cols);
        self.host.contribute_with(round, ctx, out, |product, out| {
            let values = match product {
                Product::Whole => m.read(client)?,
                Product::Project { q, rank } => {
                    let p = DeviceF32::zeros(client, rows * rank);
                    let q = DeviceF32::upload(client, q);
                    if p.len > 0 {
                        let (cubes, dim) = grid(p.len, 1);
                        project::launch(
                            client,
                            cubes,
                            dim,
                            m.arg(),
                            q.arg(),
                            p.arg(),
                            cols as u32,
                            rank as u32,
                        );
                    }
                    p.read(client)?
                }
                Product::BackProject { p, rank } => {
                    let q = DeviceF32::zeros(client, cols * rank);
                    let p = DeviceF32::upload(client, p);
                    if q.len > 0 {
                        let (cubes, dim) = grid(q.len, 1);
                        back_project::launch(
                            client,
                            cubes,
                            dim,
                            m.arg(),
                            p.arg(),
                            q.arg(),
                            rows as u32,
                            rank as u32,
                        );
                    }
                    q.read(client)?
                }
            };
            out.extend_from_slice(&values);
            Ok(())
        })
    }

    /// Takes the sum of every worker's contribution to `round`.
    pub fn round_result(&mut self, round: usize, combined: &[f32], workers: usize) {
        self.host.round_result(round, combined, workers);
    }

    /// The rounds' aggregate: P Qᵀ, or the warm-up's average.
    pub fn message(&mut self, ctx: &UnitContext, out: &mut Message) {
        self.host.compress(&[], ctx, out);
    }

    /// The state a checkpoint keeps (the warm-start Q).
    pub fn state(&self) -> Vec<&[f32]> {
        self.host.state()
    }

    /// Restores [`DevicePowerSgd::state`].
    pub fn restore(&mut self, state: &[Vec<f32>]) -> Result<(), gradcomp_compress::StateError> {
        self.host.restore(state)
    }
}

/// The registry's line for `powersgd`.
pub(crate) fn form(config: &CompressorConfig, shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Powersgd(c) = config else { return None };
    Some(Box::new(DevicePowerSgd::new(c, shape)))
}

impl DeviceForm for DevicePowerSgd {
    fn round_contribution(
        &mut self,
        client: &Client,
        round: usize,
        g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Result<Option<ReduceOp>, KernelError> {
        DevicePowerSgd::round_contribution(self, client, round, g, ctx, out)
    }

    fn round_result(&mut self, round: usize, combined: &[f32], workers: usize) {
        DevicePowerSgd::round_result(self, round, combined, workers)
    }

    /// The rounds' aggregate: P Qᵀ, or the warm-up's average.
    fn compress(
        &mut self,
        _client: &Client,
        _g: &DeviceF32,
        ctx: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        self.message(ctx, out);
        Ok(())
    }

    fn state(&self, _client: &Client) -> Result<Vec<Vec<f32>>, KernelError> {
        Ok(DevicePowerSgd::state(self).into_iter().map(<[f32]>::to_vec).collect())
    }

    fn restore(&mut self, _client: &Client, state: &[Vec<f32>]) -> Result<(), StateError> {
        DevicePowerSgd::restore(self, state)
    }
}
