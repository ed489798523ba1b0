//! PowerSGD (ALGORITHMS.md §8), as PyTorch's `powerSGD_hook` runs it.
//!
//! A unit's compensated gradient M (`rows × cols`: a tensor's first
//! dimension by the rest) is approximated through two exchange rounds:
//!
//! 1. Q is orthogonalized (a random start, or last step's Q: warm start);
//!    round 0 sums P = M Q over the workers, and P is orthogonalized;
//! 2. round 1 sums Q = Mᵀ P, and Q is divided by N.
//!
//! The message is P Qᵀ, the same on every worker: the rounds were the
//! exchange ([`Combine::InRounds`]), and error feedback keeps M − P Qᵀ. Before
//! step `start_iter` round 0 sums M itself and the message is the plain
//! average (PyTorch's vanilla allreduce warm-up). Tensors that would not
//! shrink by `min_compression_rate` (vectors, small matrices) are not given
//! to PowerSGD at all ([`PowerSgdConfig::compresses`]): they travel dense.

use serde::{Deserialize, Serialize};

use super::orthogonalize::orthogonalize;
use crate::compressor::{Combine, Compressor, ReduceOp, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::{check, Method};
use crate::rng::UnitRng;

/// PowerSGD's options, with the defaults of PyTorch's `PowerSGDState`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PowerSgdConfig {
    /// The approximation's rank r, capped at min(rows, cols) per tensor. Also
    /// read as `matrix_approximation_rank` (torch's name), which the Python
    /// front uses: there `rank` is always the worker's.
    #[serde(alias = "matrix_approximation_rank")]
    pub rank: u32,
    /// Steps of plain allreduce before compression starts
    /// (`start_powerSGD_iter`). At PyTorch's default of 1000 a run shorter
    /// than that never compresses.
    pub start_iter: u64,
    /// A tensor is compressed only if (rows + cols)·r·this < rows·cols.
    pub min_compression_rate: f64,
    /// Error feedback (the unit's memory keeps M − P Qᵀ).
    pub error_feedback: bool,
    /// Start each step's Q from the last step's instead of a fresh random one.
    pub warm_start: bool,
    /// Added to each column's norm in orthogonalization (0: none).
    pub orthogonalization_epsilon: f32,
    /// Seeds the random starting Q, the same on every worker.
    pub random_seed: u64,
}

impl Default for PowerSgdConfig {
    fn default() -> Self {
        Self {
            rank: 1,
            start_iter: 1000,
            min_compression_rate: 2.0,
            error_feedback: true,
            warm_start: true,
            orthogonalization_epsilon: 0.0,
            random_seed: 0,
        }
    }
}

impl PowerSgdConfig {
    /// Rank `rank`, every other option at PyTorch's default: note that
    /// compression then starts at step 1000 (`start_iter`); a shorter run
    /// wants `.with_start_iter(..)`.
    pub fn new(rank: u32) -> Self {
        Self { rank, ..Default::default() }
    }

    /// Steps of plain allreduce before compression starts (≥ 2 with error
    /// feedback or warm start, as PyTorch requires).
    pub fn with_start_iter(mut self, steps: u64) -> Self {
        self.start_iter = steps;
        self
    }

    pub fn with_error_feedback(mut self, on: bool) -> Self {
        self.error_feedback = on;
        self
    }

    pub fn with_warm_start(mut self, on: bool) -> Self {
        self.warm_start = on;
        self
    }

    pub fn with_min_compression_rate(mut self, rate: f64) -> Self {
        self.min_compression_rate = rate;
        self
    }

    /// A tensor of `shape` as the matrix PowerSGD sees: its first dimension
    /// by the product of the rest.
    pub fn matrix(shape: &[usize]) -> (usize, usize) {
        let rows = shape.first().copied().unwrap_or(0);
        let cols = shape.iter().skip(1).product::<usize>();
        (rows, cols)
    }

    /// Whether a tensor of `shape` is compressed (PyTorch's `_should_compress`):
    /// a matrix that the approximation shrinks by more than
    /// `min_compression_rate`. Vectors are never compressed.
    pub fn compresses(&self, shape: &[usize]) -> bool {
        if shape.len() < 2 {
            return false;
        }
        let (rows, cols) = Self::matrix(shape);
        let rank = rows.min(cols).min(self.rank as usize);
        ((rows + cols) * rank) as f64 * self.min_compression_rate < (rows * cols) as f64
    }
}

/// One unit's PowerSGD state: its factors, kept between steps for warm start.
#[derive(Clone, Debug)]
pub struct PowerSgd {
    cfg: PowerSgdConfig,
    rows: usize,
    cols: usize,
    rank: usize,
    /// `rows × rank`, row-major: M Q, then the orthogonalized sum.
    p: Vec<f32>,
    /// `cols × rank`, row-major: the starting Q, then the average of Mᵀ P.
    q: Vec<f32>,
    /// This step is before `start_iter`: the rounds sum M itself.
    warming: bool,
    /// The warm-up step's average.
    average: Vec<f32>,
}

impl PowerSgd {
    /// PowerSGD for a tensor of `shape`.
    pub fn new(cfg: &PowerSgdConfig, shape: &[usize]) -> Self {
        let (rows, cols) = PowerSgdConfig::matrix(shape);
        // 0 for an empty tensor, which then only ever travels whole.
        let rank = rows.min(cols).min(cfg.rank as usize);
        Self {
            cfg: cfg.clone(),
            rows,
            cols,
            rank,
            p: Vec::new(),
            q: Vec::new(),
            warming: false,
            average: Vec::new(),
        }
    }

    /// Sets the starting Q (`cols × rank`, before orthogonalization), as a
    /// test sets the one PyTorch drew.
    pub fn set_q(&mut self, q: &[f32]) {
        self.q = q.to_vec();
    }

    /// The factors of the last step: P (`rows × rank`) and Q (`cols × rank`).
    pub fn factors(&self) -> (&[f32], &[f32]) {
        (&self.p, &self.q)
    }

    /// A fresh starting Q: standard normal draws from the stream of
    /// (`random_seed`, step, unit), the same on every worker.
    fn draw_q(&mut self, ctx: &UnitContext) {
        let mut rng = UnitRng::from_parts(&[self.cfg.random_seed, ctx.key.step, u64::from(ctx.key.unit)]);
        self.q.clear();
        self.q.extend((0..self.cols * self.rank).map(|_| rng.next_gaussian() as f32));
    }

    /// This worker's contribution to `round`, with the matrix products left
    /// to `product` (the host's loops here, the device's kernels in
    /// gradcomp-kernels): it appends M itself, M Q or Mᵀ P to `out`. The
    /// orthogonalizations and the warm-start state stay here, so the host and
    /// the device run one algorithm.
    pub fn contribute_with<E>(
        &mut self,
        round: usize,
        ctx: &UnitContext,
        out: &mut Vec<f32>,
        product: impl FnOnce(Product<'_>, &mut Vec<f32>) -> Result<(), E>,
    ) -> Result<Option<ReduceOp>, E> {
        match round {
            0 if ctx.key.step < self.cfg.start_iter || self.rank == 0 => {
                self.warming = true;
                product(Product::Whole, out)?;
            }
            0 => {
                self.warming = false;
                if self.q.len() != self.cols * self.rank || !self.cfg.warm_start {
                    self.draw_q(ctx);
                }
                orthogonalize(&mut self.q, self.cols, self.rank, self.cfg.orthogonalization_epsilon);
                product(Product::Project { q: &self.q, rank: self.rank }, out)?;
            }
            1 if !self.warming => product(Product::BackProject { p: &self.p, rank: self.rank }, out)?,
            _ => return Ok(None),
        }
        Ok(Some(ReduceOp::Sum))
    }
}

/// A matrix product a PowerSGD round needs of the unit's M (`rows × cols`,
/// row-major); factors are row-major with `rank` columns.
#[derive(Clone, Copy, Debug)]
pub enum Product<'a> {
    /// M itself (the warm-up's plain allreduce).
    Whole,
    /// M Q (`rows × rank`) for Q (`cols × rank`).
    Project { q: &'a [f32], rank: usize },
    /// Mᵀ P (`cols × rank`) for P (`rows × rank`).
    BackProject { p: &'a [f32], rank: usize },
}

impl Product<'_> {
    /// The product of the row-major `m` with `cols` columns, appended to `out`.
    pub fn of(self, m: &[f32], cols: usize, out: &mut Vec<f32>) {
        match self {
            Product::Whole => out.extend_from_slice(m),
            Product::Project { q, rank } => {
                // Each P[i][k] = Σ_j M[i][j]·Q[j][k], added in the order of j
                // (the device kernel's order: host and device agree bit for
                // bit). One row at a time that is one serial chain of adds;
                // ROWS rows side by side are ROWS independent chains.
                const ROWS: usize = 8;
                let start = out.len();
                let cols = cols.max(1);
                out.resize(start + m.len() / cols * rank, 0.0);
                for (block, p) in m.chunks(ROWS * cols).zip(out[start..].chunks_mut(ROWS * rank)) {
                    let n = block.len() / cols;
                    for k in 0..rank {
                        let mut acc = [0.0f32; ROWS];
                        for (j, q) in q.chunks_exact(rank).enumerate() {
                            let q = q[k];
                            for (r, acc) in acc.iter_mut().enumerate().take(n) {
                                *acc += block[r * cols + j] * q;
                            }
                        }
                        for (r, &acc) in acc.iter().enumerate().take(n) {
                            p[r * rank + k] = acc;
                        }
                    }
                }
            }
            Product::BackProject { p, rank } => {
                let start = out.len();
                out.resize(start + cols * rank, 0.0);
                for (row, p) in m.chunks_exact(cols).zip(p.chunks_exact(rank)) {
                    for (&x, q) in row.iter().zip(out[start..].chunks_exact_mut(rank)) {
                        for (q, &p) in q.iter_mut().zip(p) {
                            *q += x * p;
                        }
                    }
                }
            }
        }
    }
}

impl Compressor for PowerSgd {
    fn name(&self) -> &'static str {
        "powersgd"
    }

    fn combine(&self) -> Combine {
        Combine::InRounds
    }

    fn rounds(&self) -> usize {
        2
    }

    fn round_contribution(
        &mut self,
        round: usize,
        input: &[f32],
        ctx: &UnitContext,
        out: &mut Vec<f32>,
    ) -> Option<ReduceOp> {
        let cols = self.cols;
        let done: Result<_, std::convert::Infallible> =
            self.contribute_with(round, ctx, out, |product, out| {
                product.of(input, cols, out);
                Ok(())
            });
        let Ok(op) = done;
        op
    }

    fn round_result(&mut self, round: usize, combined: &[f32], workers: usize) {
        let inv = 1.0 / workers.max(1) as f32;
        match round {
            0 if self.warming => {
                self.average.clear();
                self.average.extend(combined.iter().map(|v| v * inv));
            }
            0 => {
                self.p.clear();
                self.p.extend_from_slice(combined);
                orthogonalize(&mut self.p, self.rows, self.rank, self.cfg.orthogonalization_epsilon);
            }
            _ => {
                self.q.clear();
                self.q.extend(combined.iter().map(|v| v * inv));
            }
        }
    }

    /// The aggregate of the rounds: P Qᵀ, or the warm-up's average.
    fn compress(&mut self, _input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        if self.warming {
            let m = out.dense_mut();
            m.values.clear();
            m.values.extend_from_slice(&self.average);
            return;
        }
        let m = out.low_rank_mut();
        (m.rows, m.cols, m.rank) = (self.rows as u32, self.cols as u32, self.rank as u32);
        m.p.clone_from(&self.p);
        m.q.clone_from(&self.q);
    }

    /// The warm-start Q (empty before the first compressed step).
    fn state(&self) -> Vec<&[f32]> {
        vec![&self.q]
    }

    fn restore(&mut self, state: &[Vec<f32>]) -> Result<(), crate::StateError> {
        crate::state::expect_buffers("PowerSGD", state, 1)?;
        let q = &state[0];
        let need = self.cols * self.rank;
        if !q.is_empty() && q.len() != need {
            let (rows, cols, rank) = (self.rows, self.cols, self.rank);
            let buffer = format!("PowerSGD's Q (its {rows}×{cols} unit at rank {rank})");
            return Err(crate::StateError::Length { buffer, expected: need, got: q.len() });
        }
        self.q.clone_from(q);
        Ok(())
    }
}

impl Method for PowerSgdConfig {
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check(self.rank >= 1, "rank", || "must be at least 1".into())?;
        check(!(self.error_feedback || self.warm_start) || self.start_iter >= 2, "start_iter", || {
            format!(
                "{} is too early: with error feedback or warm start PowerSGD starts at step 2 at the earliest (as PyTorch's hook)",
                self.start_iter
            )
        })?;
        check(
            self.min_compression_rate > 0.0 && self.min_compression_rate.is_finite(),
            "min_compression_rate",
            || format!("{} must be a positive number (PyTorch's default is 2)", self.min_compression_rate),
        )?;
        check(
            self.orthogonalization_epsilon >= 0.0 && self.orthogonalization_epsilon.is_finite(),
            "orthogonalization_epsilon",
            || format!("{} must be a finite number ≥ 0", self.orthogonalization_epsilon),
        )
    }
    fn default_memory(&self) -> MemoryKind {
        if self.error_feedback {
            MemoryKind::ErrorFeedback
        } else {
            MemoryKind::None
        }
    }
    fn compresses(&self, shape: &[usize]) -> bool {
        PowerSgdConfig::compresses(self, shape)
    }
    /// `start_iter`: plain allreduce before it.
    fn first_compressed_step(&self) -> u64 {
        self.start_iter
    }
    /// A shape-less unit is a vector (which PowerSGD leaves alone).
    fn build(&self, shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(PowerSgd::new(self, shape))
    }
}
