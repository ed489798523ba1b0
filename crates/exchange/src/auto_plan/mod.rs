//! `plan = "auto"` (ALGORITHMS.md §2.5): the plan of phases a run of local
//! updates takes, chosen by one rule from the run's measured
//! communication-free step, its link, N, the model's tensors and its length.
//! Every price is the performance model's ([`crate::predict`]: the bytes the
//! codecs produce, on the routes of the route table, through the α–β
//! formulas), and every decision comes with its reason in one line.
//!
//! The rule's constants are below, stated once for every model and link;
//! docs/ALGORITHMS.md §2.5 says where each comes from.

mod again;
mod explain;
mod in_group;

use gradcomp_comm::NetworkModel;
use gradcomp_compress::CompressorConfig;

use crate::config::{OuterConfig, OuterKind, PeriodRule, StrategyConfig, SyncPhase, Topology};
use crate::predict::{
    local_step_seconds, measure, outer_seconds_per_value, powersgd_rank, step_seconds, LocalSetup,
    MethodCost, Workload,
};

pub use again::{Decided, Replan, MIN_SAMPLES};
pub use explain::choose_here;
pub use in_group::resolve_in_group;

/// The share of the run's steps taken synchronously before local updates:
/// none, since on the tuning seed a phase cost steps (ALGORITHMS.md §2.5).
pub const SYNC_FRACTION: f64 = 0.0;
/// The shortest period: local updates never meet more often than this.
pub const MIN_PERIOD: u64 = 16;
/// The longest overlap τ a fragment's round may take, in inner steps.
pub const MAX_DELAY: u64 = 2;
/// A round hides when the inner steps wait for it at most this share of a
/// step, averaged over the period.
pub const HIDDEN_SHARE: f64 = 0.01;
/// The link's share the rounds may take over a period (the rest is slack
/// for the step's own noise and for rounds that queue).
pub const LINK_SHARE: f64 = 0.5;
/// The synchronous phase stays dense while the wire adds at most this
/// share to its step: the exact average costs no steps.
pub const DENSE_SHARE: f64 = 0.1;
/// The outer optimizer's warm-up, in rounds: DiLoCo's Nesterov (lr 0.7,
/// μ 0.9) reached from plain averaging over this many rounds (Pier's
/// warm-up). On the tuning seed Nesterov without it diverged and with it
/// needed fewer steps than averaging (ALGORITHMS.md §2.5).
pub const OUTER_WARMUP_ROUNDS: u64 = 8;
/// The fewest outer rounds a run must have for DiLoCo's Nesterov: its
/// warm-up and then two of its momentum's horizons, 1/(1 − μ) = 10 rounds
/// at μ = 0.9 each (8 + 2·10 = 28). A run of fewer rounds averages (outer
/// SGD at lr 1): its momentum would hardly outlive its own warm-up.
pub const NESTEROV_MIN_ROUNDS: u64 = OUTER_WARMUP_ROUNDS + 2 * 10;
/// The most fragments a plan cuts the model into.
pub const MAX_FRAGMENTS: u64 = 16;

/// The sizes (bytes per rank) a probe round times: one bound by latency,
/// three by bandwidth (the α–β fit needs three at least).
pub const PROBE_BYTES: [u64; 4] = [4 << 10, 256 << 10, 1 << 20, 4 << 20];
/// The timed allreduces of each size, after one untimed (the median kept).
pub const PROBE_REPEATS: usize = 3;

/// The link measured by a probe round, where none is given: allreduces of
/// [`PROBE_BYTES`] over `c`, each size's median of [`PROBE_REPEATS`],
/// averaged over the workers (so each gets the same model), fitted by the
/// α–β model the plan prices with (`NetworkModel::fit`, ring allreduce).
/// A link faster than the workers' own allreduce path cannot show: the
/// probe measures the path the rounds take, copies and all.
/// Every worker calls it; it moves about 3·(PROBE_REPEATS + 1) · 5.3 MB per
/// worker.
pub fn probe_link(c: &mut dyn gradcomp_comm::Collective) -> Result<NetworkModel, crate::ExchangeError> {
    let n = c.world_size();
    let mut medians = Vec::with_capacity(PROBE_BYTES.len());
    for &bytes in &PROBE_BYTES {
        let mut buf = vec![0.0f32; bytes as usize / 4];
        let mut times = Vec::with_capacity(PROBE_REPEATS);
        for k in 0..=PROBE_REPEATS {
            let t = std::time::Instant::now();
            c.allreduce_sum_f32(&mut buf)?;
            if k > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        medians.push(crate::predict::median(times) as f32);
    }
    c.allreduce_sum_f32(&mut medians)?;
    let samples: Vec<(u64, f64)> =
        PROBE_BYTES.iter().zip(&medians).map(|(&b, &t)| (b, f64::from(t) / n as f64)).collect();
    // α and B only (no rendezvous term): the plan's link is (α, B).
    let ab = NetworkModel { eager_limit: u64::MAX, ..NetworkModel::from_bits_per_second(1e9, 0.0) };
    ab.fit(n, &samples).map_err(|e| {
        crate::ExchangeError::Usage(format!("the link probe: {e}; give the link's speed instead"))
    })
}

/// PowerSGD as the synchronous phase runs it: rank 2, compressing from
/// step 10 (torch's default start of 1000 would leave a phase of fewer
/// steps dense throughout), its error feedback on.
pub fn sync_powersgd() -> CompressorConfig {
    gradcomp_compress::lowrank::PowerSgdConfig::new(2).with_start_iter(10).into()
}

/// What the rule decides from.
#[derive(Clone, Debug)]
pub struct PlanInputs {
    /// The measured communication-free step of one worker, in seconds.
    pub step_seconds: f64,
    /// The link between workers (α, β).
    pub link: NetworkModel,
    /// N.
    pub workers: usize,
    /// The model's trainable tensors' shapes, in order.
    pub shapes: Vec<Vec<usize>>,
    /// The run's inner steps.
    pub total_steps: u64,
}

/// The methods a plan is priced with, measured on the model's shapes.
pub struct PlanCosts {
    pub dense: MethodCost,
    pub powersgd: MethodCost,
    pub fp4_gather: MethodCost,
    pub fp4_scatter: MethodCost,
    /// Seconds of the outer step per parameter.
    pub outer_per_value: f64,
}

impl PlanCosts {
    /// Measured here, on this CPU, on `shapes` (the codecs' bytes and speed).
    pub fn measure(shapes: &[Vec<usize>]) -> Self {
        let fp4 = || CompressorConfig::named("fp4").expect("fp4 is built in");
        let len: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        PlanCosts {
            dense: measure("dense", CompressorConfig::dense(), Topology::Allreduce, shapes),
            powersgd: measure("powersgd r=2", powersgd_rank(2), Topology::Allreduce, shapes),
            fp4_gather: measure("fp4 (allgather)", fp4(), Topology::Allgather, shapes),
            fp4_scatter: measure("fp4 (reduce-scatter)", fp4(), Topology::ReduceScatter, shapes),
            outer_per_value: outer_seconds_per_value(len.min(1 << 20)),
        }
    }
}

/// One decision: the key it sets, its value, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub key: &'static str,
    pub value: String,
    pub reason: String,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}: {}", self.key, self.value, self.reason)
    }
}

/// The plan the rule chose.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoPlan {
    /// Local updates with their synchronous phase, period, fragments, τ and
    /// outer optimizer.
    pub strategy: StrategyConfig,
    /// The change's compressor (`compress_change` on).
    pub compressor: CompressorConfig,
    /// The change's route.
    pub topology: Topology,
    /// Each decision with its reason, in the order taken.
    pub decisions: Vec<Decision>,
    /// The predicted seconds per inner step of the local phase.
    pub local_step_seconds: f64,
}

impl AutoPlan {
    /// `cfg` with the plan's keys in place of its own (`strategy.plan`
    /// becomes `given`): the change's compressor and route, and the
    /// strategy's phase, period, fragments, τ and outer optimizer (its
    /// warm-up included); `average_buffers` and `inner_state_every` stay the configuration's.
    pub fn apply(&self, cfg: &mut crate::DataParallelConfig) {
        let st = &mut cfg.strategy;
        *st = StrategyConfig {
            average_buffers: st.average_buffers,
            inner_state_every: st.inner_state_every,
            ..self.strategy.clone()
        };
        cfg.compressor = self.compressor.clone().into();
        cfg.topology = Some(self.topology);
    }

    /// The plan as `--set KEY=VALUE` overrides of a gradcomp TOML
    /// configuration: the run frozen, to repeat or race it.
    pub fn overrides(&self) -> Vec<String> {
        let st = &self.strategy;
        let outer = st.outer();
        let mut o = vec![
            "strategy.plan=\"given\"".to_string(),
            "strategy.kind=\"local\"".to_string(),
            format!("strategy.period={}", st.period),
            format!("strategy.fragments={}", st.fragments),
            format!("strategy.delay={}", st.delay),
            "strategy.compress_change=true".to_string(),
            format!("strategy.outer.name=\"{}\"", outer.kind_name()),
            format!("strategy.outer.warmup_rounds={}", outer.warmup_rounds),
            format!("compressor.name=\"{}\"", self.compressor.name()),
            format!("comm.topology=\"{}\"", self.topology.name()),
        ];
        if let Some(phase) = st.sync_phase() {
            o.push(format!("strategy.sync.steps={}", phase.steps));
            let table = serde_json::to_value(phase.compressor()).expect("compressors serialize");
            o.push(format!("strategy.sync.compressor={}", toml_inline(&table)));
        }
        o
    }
}

/// A JSON value as a TOML inline value (objects as inline tables, unset
/// options left out).
fn toml_inline(v: &serde_json::Value) -> String {
    let Some(m) = v.as_object() else { return v.to_string() };
    // `name` first, as a configuration's tables put it.
    let mut entries: Vec<_> = m.iter().filter(|(_, v)| !v.is_null()).collect();
    entries.sort_by_key(|(k, _)| *k != "name");
    let items: Vec<String> = entries.iter().map(|(k, v)| format!("{k} = {}", toml_inline(v))).collect();
    format!("{{ {} }}", items.join(", "))
}

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

/// The rule's prices: the inputs' step, workers and link, the measured methods.
struct Pricer<'a> {
    inputs: &'a PlanInputs,
    costs: &'a PlanCosts,
    work: Workload,
}

impl Pricer<'_> {
    /// Local updates whose rounds carry the change through `m`.
    fn local(&self, m: &MethodCost, period: u64, fragments: u64, delay: u64) -> crate::predict::LocalPrice {
        let setup = LocalSetup { period, fragments: fragments as usize, delay, overlap: delay > 0 };
        let (n, net) = (self.inputs.workers, &self.inputs.link);
        local_step_seconds(&self.work, m, n, net, &setup, self.costs.outer_per_value)
    }

    /// The change: fp4, on the route whose round of the whole model is
    /// sooner (the reduce-scatter moves fewer bytes at N; on the tuning
    /// seed it cost no steps against the allgather).
    fn route(&self) -> (&MethodCost, Topology, Decision) {
        let (gather, scatter) = (&self.costs.fp4_gather, &self.costs.fp4_scatter);
        let whole = |m| self.local(m, 1, 1, 0).round_seconds;
        let (g, s) = (whole(gather), whole(scatter));
        let (m, topology) =
            if s < g { (scatter, Topology::ReduceScatter) } else { (gather, Topology::Allgather) };
        let reason = format!(
            "an fp4 change of the whole model takes {} by allgather, {} by reduce-scatter among {}",
            ms(g),
            ms(s),
            self.inputs.workers
        );
        (m, topology, Decision { key: "comm.topology", value: format!("\"{}\"", topology.name()), reason })
    }

    /// Fragments and τ: the fewest that hide the rounds (each fragment's
    /// round within τ inner steps), τ = 0 first (a blocking round that costs
    /// nothing), then τ = 1, 2 with 1, 2, 4, ... fragments; the last
    /// candidate where none hides. Returns (fragments, τ, the rounds'
    /// seconds a period).
    fn overlap(&self, change: &MethodCost) -> (u64, u64, f64, Decision) {
        let t = self.inputs.step_seconds;
        let tensors = self.inputs.shapes.len() as u64;
        let mut candidates = vec![(0, 1)];
        for delay in 1..=MAX_DELAY {
            candidates.extend(
                (0..).map(|k| 1u64 << k).take_while(|&p| p <= MAX_FRAGMENTS.min(tensors)).map(|p| (delay, p)),
            );
        }
        let hides = |&(d, p): &(u64, u64)| {
            self.local(change, MIN_PERIOD, p, d).exposed_seconds <= HIDDEN_SHARE * t * MIN_PERIOD as f64
        };
        let hidden = candidates.iter().copied().find(hides);
        let (delay, fragments) = hidden.unwrap_or(*candidates.last().expect("a candidate"));
        let price = self.local(change, MIN_PERIOD, fragments, delay);
        let reason = match hidden {
            Some(_) if delay == 0 => format!(
                "a blocking round of the whole model every {MIN_PERIOD} steps ({}) waits {} a step, within {:.0}% of the {} step",
                ms(price.round_seconds),
                ms(price.exposed_seconds / MIN_PERIOD as f64),
                HIDDEN_SHARE * 100.0,
                ms(t)
            ),
            Some(_) => format!(
                "each of {fragments} fragments' rounds ({} of {} a period) hides behind {delay} inner step(s) of {}",
                ms(price.round_seconds / fragments as f64),
                ms(price.round_seconds),
                ms(t)
            ),
            None => format!(
                "no plan of at most {MAX_FRAGMENTS} fragments and τ ≤ {MAX_DELAY} hides its rounds: {} exposed a period",
                ms(price.exposed_seconds)
            ),
        };
        let value = format!("{fragments}, {delay}");
        let d = Decision { key: "strategy.fragments, strategy.delay", value, reason };
        (fragments, delay, price.round_seconds, d)
    }

    /// H: at least MIN_PERIOD, room for every fragment's overlap, and the
    /// rounds within LINK_SHARE of the link's time over a period.
    fn period(&self, fragments: u64, delay: u64, round_seconds: f64) -> (u64, Decision) {
        let t = self.inputs.step_seconds;
        let by_link = (round_seconds / (LINK_SHARE * t)).ceil() as u64;
        let period =
            MIN_PERIOD.max((fragments * delay + 1).next_power_of_two()).max(by_link.next_power_of_two());
        let reason = format!(
            "{MIN_PERIOD} at least; the rounds' {} a period within {:.0}% of {period} steps of {}",
            ms(round_seconds),
            LINK_SHARE * 100.0,
            ms(t)
        );
        (period, Decision { key: "strategy.period", value: period.to_string(), reason })
    }

    /// The synchronous phase: SYNC_FRACTION of the run, dense while the
    /// wire adds at most DENSE_SHARE to its step (or PowerSGD is no
    /// faster), else PowerSGD rank 2.
    fn sync(&self) -> (u64, CompressorConfig, Decision) {
        let (t, n, net) = (self.inputs.step_seconds, self.inputs.workers, &self.inputs.link);
        let steps = (SYNC_FRACTION * self.inputs.total_steps as f64).round() as u64;
        let dense = step_seconds(&self.work, &self.costs.dense, n, net);
        let psgd = step_seconds(&self.work, &self.costs.powersgd, n, net);
        let (c, why) = if dense <= (1.0 + DENSE_SHARE) * t || dense <= psgd {
            let share = DENSE_SHARE * 100.0;
            let why = format!(
                "dense: its step {} within {share:.0}% of {} (PowerSGD r=2: {})",
                ms(dense),
                ms(t),
                ms(psgd)
            );
            (CompressorConfig::dense(), why)
        } else {
            let why = format!(
                "powersgd r=2: its step {} against dense's {} (free: {})",
                ms(psgd),
                ms(dense),
                ms(t)
            );
            (sync_powersgd(), why)
        };
        let (value, reason) = if steps == 0 {
            let reason = format!(
                "a synchronous phase cost steps on the tuning seed (ALGORITHMS.md §2.5); one would go {why}"
            );
            ("none".to_string(), reason)
        } else {
            let share = SYNC_FRACTION * 100.0;
            let total = self.inputs.total_steps;
            (format!("{steps} steps, {}", c.name()), format!("{share:.0}% of the run's {total} steps; {why}"))
        };
        (steps, c, Decision { key: "strategy.sync", value, reason })
    }
}

/// The outer optimizer: DiLoCo's Nesterov, warmed up from averaging over
/// OUTER_WARMUP_ROUNDS rounds, in a run of NESTEROV_MIN_ROUNDS rounds or
/// more; plain averaging in a shorter one.
fn outer_for(rounds: u64) -> (OuterConfig, Decision) {
    if rounds < NESTEROV_MIN_ROUNDS {
        let outer = OuterConfig { name: Some(OuterKind::Sgd), ..OuterConfig::default() };
        let reason = format!(
            "plain averaging (outer SGD, lr 1): the run's {rounds} outer rounds are fewer than DiLoCo's Nesterov \
             needs ({NESTEROV_MIN_ROUNDS}: its {OUTER_WARMUP_ROUNDS}-round warm-up and two momentum horizons)"
        );
        return (outer, Decision { key: "strategy.outer", value: "sgd".into(), reason });
    }
    let warmup = OUTER_WARMUP_ROUNDS;
    let outer = OuterConfig { warmup_rounds: warmup, ..OuterConfig::nesterov() };
    let reason = format!(
        "DiLoCo's Nesterov (lr 0.7, μ 0.9), warmed up from averaging over {warmup} of the run's {rounds} outer rounds"
    );
    (outer, Decision { key: "strategy.outer", value: format!("nesterov, warmup_rounds = {warmup}"), reason })
}

/// The rule (ALGORITHMS.md §2.5), on `costs` measured for `inputs.shapes`.
pub fn choose(inputs: &PlanInputs, costs: &PlanCosts) -> AutoPlan {
    let pricer = Pricer { inputs, costs, work: Workload::new(inputs.step_seconds, inputs.shapes.clone()) };
    let (change, topology, d_route) = pricer.route();
    let (fragments, delay, round_seconds, d_overlap) = pricer.overlap(change);
    let (period, d_period) = pricer.period(fragments, delay, round_seconds);
    let (sync_steps, sync_compressor, d_sync) = pricer.sync();
    let (outer, d_outer) = outer_for(inputs.total_steps.saturating_sub(sync_steps) / period);
    let mut strategy = StrategyConfig::local(period)
        .with_streaming(fragments, delay)
        .with_compress_change(true)
        .with_outer(outer)
        .with_period_rule(PeriodRule::Fixed);
    if sync_steps > 0 {
        strategy = strategy.with_sync_phase(SyncPhase::new(sync_steps, sync_compressor));
    }
    AutoPlan {
        strategy,
        compressor: change.compressor.clone(),
        topology,
        decisions: vec![d_route, d_overlap, d_period, d_sync, d_outer],
        local_step_seconds: pricer.local(change, period, fragments, delay).step_seconds,
    }
}

/// How far the measured step may move from the one a plan was chosen for
/// before the plan is decided again (a quarter: within it, the rule's
/// choices move by less than a factor two of H, its coarsest step).
pub const DRIFT_MARGIN: f64 = 0.25;

/// Whether a step measured at `measured` seconds moved from the plan's
/// `planned` by more than [`DRIFT_MARGIN`].
pub fn drifted(planned: f64, measured: f64) -> bool {
    (measured / planned - 1.0).abs() > DRIFT_MARGIN
}

/// The period the rule gives a running plan for the inputs measured now,
/// with its decision: its route, fragments and τ kept (changing them would
/// cut a round in flight), H decided again by [`choose`]'s rule
/// ([`crate::strategy::LocalUpdates::set_period_from`] applies it).
pub fn replan_period(
    inputs: &PlanInputs,
    costs: &PlanCosts,
    running: &StrategyConfig,
    topology: Topology,
) -> (u64, Decision) {
    let pricer = Pricer { inputs, costs, work: Workload::new(inputs.step_seconds, inputs.shapes.clone()) };
    let change = if topology == Topology::ReduceScatter { &costs.fp4_scatter } else { &costs.fp4_gather };
    let (p, d) = (running.fragments.max(1), running.delay);
    let round_seconds = pricer.local(change, MIN_PERIOD, p, d).round_seconds;
    pricer.period(p, d, round_seconds)
}

#[cfg(test)]
mod tests;
