//! eSGD (Tao & Li, HotEdge 2018; ALGORITHMS.md §4): importance-driven
//! coordinate selection with momentum residual accumulation, for edge
//! devices behind a parameter server. Global granularity: one unit holds all
//! coordinates.
//!
//! Each step (`k = ρ·d`), with this worker's loss `l_t`:
//! - choose `S`: uniformly at random for the first two steps; `S_prev` again,
//!   reinforced (`H[S] += 1`, or `+= |g_S|` with `importance = magnitude`),
//!   when the loss fell; otherwise `k` coordinates sampled without
//!   replacement with `P(j) ∝ H_j + ε`;
//! - accumulate the rest: `r_j = β·r_j + g_j` for `j ∉ S`;
//! - `R = {j ∉ S : |r_j| > mean|g|}`; members of `R`, largest `|r_j|` first,
//!   replace the lowest-`H` members of `S` one for one (`|S|` stays `k`);
//! - send `g_j` for the kept members of `S` and `r_j` for the replacements
//!   (whose residual is then cleared).
//!
//! [design] The paper does not give the exact increment of `H`; `count`
//! (+1) is the default and `magnitude` (+|g|) the option. A member of `S`
//! that a residual displaces is not sent and, as in the paper's Algorithm 2,
//! its gradient is not added to the residual either.

use serde::{Deserialize, Serialize};

use crate::compressor::{k_for, Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::{IndexEncoding, Message, SparseMessage, SparseWire, ValueEncoding};
use crate::method::{check, check_density, density_option, Method};
use crate::reduce;
use crate::rng::UnitRng;

/// How the importance scores grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Importance {
    /// `H[S] += 1` when the loss fell.
    #[default]
    Count,
    /// `H[S] += |g_S|` when the loss fell.
    Magnitude,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EsgdConfig {
    /// ρ: the fraction of coordinates sent each step.
    pub density: f64,
    /// β: decay of the residual of coordinates not sent.
    pub beta: f32,
    pub importance: Importance,
    /// ε in `P(j) ∝ H_j + ε`.
    pub epsilon: f32,
    pub wire: SparseWire,
}

impl Default for EsgdConfig {
    fn default() -> Self {
        Self {
            density: 0.5,
            beta: 0.9,
            importance: Importance::Count,
            epsilon: 1e-3,
            // At ρ = 0.5 u32 indices would make a message as large as the
            // dense gradient; delta-coded gaps take about a byte each.
            wire: SparseWire { indices: IndexEncoding::Varint, values: ValueEncoding::F32 },
        }
    }
}

/// What the last step did, for the step record.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EsgdStats {
    /// 0: random (first steps), 1: repeated `S_prev`, 2: sampled by importance.
    pub choice: u8,
    pub replacements: usize,
    pub h_mean: f64,
    pub h_max: f64,
}

/// eSGD's per-worker state.
#[derive(Clone, Debug, Default)]
pub struct Esgd {
    pub config: EsgdConfig,
    h: Vec<f32>,
    r: Vec<f32>,
    prev: Vec<u32>,
    prev_loss: Option<f64>,
    steps: u64,
    pub last: EsgdStats,
    // Scratch.
    keys: Vec<(f32, u32)>,
    in_s: Vec<bool>,
    candidates: Vec<u32>,
    sel: Vec<u32>,
}

impl Esgd {
    pub fn new(config: EsgdConfig) -> Self {
        Self { config, ..Default::default() }
    }

    /// `k` distinct indices of `0..d`, uniformly (Floyd's algorithm).
    fn uniform(&mut self, d: usize, k: usize, rng: &mut UnitRng, out: &mut Vec<u32>) {
        self.in_s.clear();
        self.in_s.resize(d, false);
        for j in d - k..d {
            let t = rng.below(j as u64 + 1) as usize;
            let pick = if self.in_s[t] { j } else { t };
            self.in_s[pick] = true;
        }
        out.extend((0..d as u32).filter(|&j| self.in_s[j as usize]));
    }

    /// `k` indices sampled without replacement with `P(j) ∝ H_j + ε`
    /// (Efraimidis–Spirakis: the k largest `ln(u_j) / w_j`).
    fn weighted(&mut self, k: usize, rng: &mut UnitRng, out: &mut Vec<u32>) {
        let eps = self.config.epsilon.max(f32::MIN_POSITIVE);
        self.keys.clear();
        self.keys.extend(self.h.iter().enumerate().map(|(j, &h)| {
            let u = 1.0 - rng.next_f64(); // (0, 1]
            ((u.ln() / f64::from(h + eps)) as f32, j as u32)
        }));
        let d = self.keys.len();
        if k < d {
            self.keys.select_nth_unstable_by(d - k, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        }
        out.extend(self.keys[d - k..].iter().map(|&(_, j)| j));
        out.sort_unstable();
    }

    /// Algorithm 1: chooses `S` (`k` indices, into `s`) and returns how (the
    /// [`EsgdStats::choice`] code); reinforces `H[S]` when the loss fell.
    fn choose(&mut self, g: &[f32], k: usize, loss: f64, rng: &mut UnitRng, s: &mut Vec<u32>) -> u8 {
        if self.steps <= 1 || self.prev.len() != k {
            self.uniform(g.len(), k, rng, s);
            0
        } else if self.prev_loss.is_some_and(|p| loss < p) {
            s.extend_from_slice(&self.prev);
            for &j in s.iter() {
                self.h[j as usize] += match self.config.importance {
                    Importance::Count => 1.0,
                    Importance::Magnitude => g[j as usize].abs(),
                };
            }
            1
        } else {
            self.weighted(k, rng, s);
            2
        }
    }

    /// Algorithm 2: `r_j = β·r_j + g_j` for every `j ∉ S`, collecting into
    /// `candidates` those whose `|r_j|` exceeds the mean `|g|`.
    fn accumulate_residuals(&mut self, g: &[f32], s: &[u32]) {
        let d = g.len();
        self.in_s.clear();
        self.in_s.resize(d, false);
        for &j in s {
            self.in_s[j as usize] = true;
        }
        let beta = self.config.beta;
        let (abs_sum, _) = reduce::abs_sum_and_max(g);
        let thr = (abs_sum / d.max(1) as f64) as f32;
        self.candidates.clear();
        for (j, (r, &gj)) in self.r.iter_mut().zip(g).enumerate() {
            if !self.in_s[j] {
                *r = beta * *r + gj;
                if r.abs() > thr {
                    self.candidates.push(j as u32);
                }
            }
        }
    }

    /// The largest residuals replace the lowest-importance members of `S`:
    /// afterwards `s[..n]` holds the replacements and `s[n..]` the kept
    /// members, each run ascending; returns `n`.
    fn replace_by_residuals(&mut self, s: &mut [u32]) -> usize {
        let r = &self.r;
        self.candidates
            .sort_unstable_by(|&a, &b| r[b as usize].abs().total_cmp(&r[a as usize].abs()).then(a.cmp(&b)));
        let h = &self.h;
        // S by H ascending: the front is replaced first.
        s.sort_unstable_by(|&a, &b| h[a as usize].total_cmp(&h[b as usize]).then(a.cmp(&b)));
        let replacements = self.candidates.len().min(s.len());
        for (slot, &j) in s.iter_mut().zip(&self.candidates).take(replacements) {
            *slot = j;
        }
        s[..replacements].sort_unstable();
        s[replacements..].sort_unstable();
        replacements
    }

    /// Appends to `m`, ascending, `r_j` for the replacements `s[..replacements]`
    /// (clearing their residual) and `g_j` for the kept members `s[replacements..]`.
    fn emit(&mut self, g: &[f32], s: &[u32], replacements: usize, m: &mut SparseMessage) {
        // Merge the two ascending runs into one ascending list with values.
        let (a, b) = s.split_at(replacements);
        let (mut i, mut jb) = (0, 0);
        while i < a.len() || jb < b.len() {
            let take_a = jb >= b.len() || (i < a.len() && a[i] < b[jb]);
            if take_a {
                let j = a[i] as usize;
                m.indices.push(a[i]);
                m.values.push(self.r[j]);
                self.r[j] = 0.0;
                i += 1;
            } else {
                let j = b[jb] as usize;
                m.indices.push(b[jb]);
                m.values.push(g[j]);
                jb += 1;
            }
        }
    }
}

impl Compressor for Esgd {
    fn name(&self) -> &'static str {
        "esgd"
    }

    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, g: &[f32], ctx: &UnitContext, out: &mut Message) {
        let d = g.len();
        if self.h.len() != d {
            self.h = vec![0.0; d];
            self.r = vec![0.0; d];
            self.prev.clear();
            // Sized once for the worst case, so later steps never grow them.
            self.candidates = Vec::with_capacity(d);
            self.keys = Vec::with_capacity(d);
            self.in_s = Vec::with_capacity(d);
        }
        let k = k_for(self.config.density, d);
        let mut rng = ctx.key.rng();
        let m = out.sparse_mut();
        m.len = d;
        m.wire = self.config.wire;
        m.indices.clear();
        m.values.clear();
        let loss = ctx.loss.unwrap_or(f64::NAN);
        let mut s = std::mem::take(&mut self.sel);
        s.clear();
        let choice = self.choose(g, k, loss, &mut rng, &mut s);
        self.accumulate_residuals(g, &s);
        let replacements = self.replace_by_residuals(&mut s);
        self.emit(g, &s, replacements, m);
        m.round_to_wire();
        self.prev.clear();
        self.prev.extend_from_slice(&m.indices);
        self.prev_loss = ctx.loss;
        self.steps += 1;
        self.sel = s;
        let (h_sum, h_max) = reduce::abs_sum_and_max(&self.h);
        self.last =
            EsgdStats { choice, replacements, h_mean: h_sum / d.max(1) as f64, h_max: f64::from(h_max) };
    }

    fn set_density(&mut self, density: f64) {
        self.config.density = density;
    }

    fn density(&self) -> Option<f64> {
        Some(self.config.density)
    }

    fn stats(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("esgd_choice", f64::from(self.last.choice)),
            ("esgd_replacements", self.last.replacements as f64),
            ("esgd_h_mean", self.last.h_mean),
            ("esgd_h_max", self.last.h_max),
        ]
    }
}

impl Method for EsgdConfig {
    fn draws_random(&self) -> bool {
        true
    }
    fn validate(&self) -> Result<(), crate::method::InvalidOption> {
        check_density(self.density)?;
        check((0.0..1.0).contains(&self.beta), "beta", || format!("{} is not in [0, 1)", self.beta))?;
        check(self.epsilon > 0.0 && self.epsilon.is_finite(), "epsilon", || {
            format!("{} must be positive", self.epsilon)
        })
    }
    /// eSGD carries its own residual.
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn whole_model(&self) -> bool {
        true
    }
    fn own_residual(&self) -> bool {
        true
    }
    fn needs_loss(&self) -> bool {
        true
    }
    density_option!();
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(Esgd::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::RngKey;

    fn ctx(step: u64, loss: f64) -> UnitContext {
        UnitContext { key: RngKey::new(1, 0, step, 0), loss: Some(loss) }
    }

    fn sent(m: &Message) -> (Vec<u32>, Vec<f32>) {
        let Message::Sparse(s) = m else { panic!() };
        (s.indices.clone(), s.values.clone())
    }

    #[test]
    fn sends_exactly_k_ascending_and_reinforces_when_the_loss_falls() {
        let d = 1000;
        let g: Vec<f32> = (0..d).map(|j| ((j * 37) % 101) as f32 / 100.0 - 0.5).collect();
        let mut e = Esgd::new(EsgdConfig { density: 0.1, ..Default::default() });
        let mut msg = Message::default();
        for (t, loss) in [3.0, 2.5, 2.0, 2.2, 1.9].into_iter().enumerate() {
            e.compress(&g, &ctx(t as u64, loss), &mut msg);
            let (idx, _) = sent(&msg);
            assert_eq!(idx.len(), 100, "step {t}");
            assert!(idx.windows(2).all(|w| w[0] < w[1]));
        }
        // Step 2 had a lower loss than step 1: S_prev was reinforced.
        assert!(e.h.iter().any(|&h| h > 0.0));
        assert_eq!(e.last.choice, 1, "loss fell at the last step");
    }

    #[test]
    fn residuals_accumulate_and_replace_when_large() {
        // With β = 1, unsent coordinates accumulate their gradient every
        // step; once above the mean |g| (≈ 0.02 here) they displace the
        // chosen ones, carrying their accumulated value.
        let d = 100;
        let mut e = Esgd::new(EsgdConfig { density: 0.05, beta: 1.0, ..Default::default() });
        let mut g = vec![0.01f32; d];
        g[99] = 1.0;
        let mut msg = Message::default();
        e.compress(&g, &ctx(0, 1.0), &mut msg);
        assert!(e.last.replacements <= 1, "only coordinate 99 can exceed the mean at once");
        e.compress(&g, &ctx(1, 1.0), &mut msg);
        e.compress(&g, &ctx(2, 1.0), &mut msg);
        assert_eq!(e.last.replacements, 5);
        let (idx, vals) = sent(&msg);
        assert_eq!(idx.len(), 5);
        assert!(vals.iter().all(|&v| v >= 0.029), "{vals:?}");
        // Their residual was cleared when sent.
        assert!(idx.iter().all(|&j| e.r[j as usize] == 0.0));
    }

    #[test]
    fn weighted_sampling_prefers_important_coordinates() {
        let mut e = Esgd::new(EsgdConfig { density: 0.1, ..Default::default() });
        e.h = (0..1000).map(|j| if j < 100 { 100.0 } else { 0.0 }).collect();
        let mut out = Vec::new();
        e.weighted(100, &mut UnitRng::from_parts(&[3]), &mut out);
        let heavy = out.iter().filter(|&&j| j < 100).count();
        assert!(heavy > 90, "{heavy} of 100 from the important block");
        assert_eq!(out.len(), 100);
        out.dedup();
        assert_eq!(out.len(), 100, "without replacement");
    }
}
