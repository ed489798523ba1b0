//! [`Buckets`]: the exchanges of a model's DDP buckets, each gradcomp-exchange's
//! [`GradientExchange`] over one bucket's tensors, with state that follows
//! the tensor.
//!
//! A bucket is named by its tensors' keys (a tensor's key is its order of
//! first appearance in the hook, the same in every run of the same model);
//! a key also keys the tensor's random stream. When a bucket of new keys
//! arrives (DDP rebuilds its buckets after the first step), the state of
//! every bucket it shares a tensor with is parked by tensor and the new
//! bucket takes what is its own. Checkpoints hold the same per-tensor
//! state, so a resumed run whose DDP cuts its buckets anew continues
//! bit-exactly. The hook and [`replay`](crate::replay) run this one code.

use std::collections::{BTreeMap, HashMap};

use gradcomp_comm::Collective;
use gradcomp_exchange::grad_stages::CompleteGrad;
use gradcomp_exchange::{DataParallelConfig, GradientLayout};
use gradcomp_exchange::{
    ExchangeStats, Gradient, GradientExchange, StateBuffers, StateKey, StateKind, StepInput,
};

/// Each tensor's (or global unit's) buffers: `{"memory.0": [...], "compressor.0": [...]}`.
pub type UnitState = BTreeMap<String, Vec<f32>>;

/// One bucket's exchange and its units' storage names.
struct Bucket {
    exchange: GradientExchange,
    /// Per unit: the name its state is stored under (a tensor's key, or
    /// `global:` and the bucket's keys for a global unit).
    names: Vec<String>,
}

/// The exchanges of one worker's buckets.
pub struct Buckets {
    cfg: DataParallelConfig,
    world: usize,
    live: HashMap<Vec<u32>, Bucket>,
    parked: BTreeMap<String, UnitState>,
}

impl Buckets {
    pub fn new(cfg: DataParallelConfig, world: usize) -> Self {
        Buckets { cfg, world, live: HashMap::new(), parked: BTreeMap::new() }
    }

    /// Averages the bucket of tensors `keys` (of `shapes`) over the workers:
    /// `grad` in, `out` averaged, through `c`.
    pub fn exchange(
        &mut self,
        keys: &[u32],
        shapes: &[Vec<usize>],
        grad: &[f32],
        out: &mut [f32],
        input: &StepInput,
        c: &mut dyn Collective,
    ) -> Result<ExchangeStats, String> {
        let b = self.bucket(keys, shapes)?;
        b.exchange.exchange(Gradient::Host(&mut CompleteGrad(grad)), input, out, c).map_err(|e| e.to_string())
    }

    /// The state of the bucket of tensors `keys` (built if new), for
    /// [`Buckets::restore_bucket`] after an exchange that is skipped.
    pub fn snapshot(&mut self, keys: &[u32], shapes: &[Vec<usize>]) -> Result<StateBuffers, String> {
        let mut state = StateBuffers::new();
        self.bucket(keys, shapes)?.exchange.state("", &mut state).map_err(|e| e.to_string())?;
        Ok(state)
    }

    /// Puts back the bucket's state from [`Buckets::snapshot`].
    pub fn restore_bucket(&mut self, keys: &[u32], state: &StateBuffers) -> Result<(), String> {
        let b = self.live.get_mut(keys).ok_or("restoring a bucket that was never exchanged")?;
        b.exchange.restore("", state).map_err(|e| e.to_string())
    }

    /// The live bucket of tensors `keys`, built if new.
    fn bucket(&mut self, keys: &[u32], shapes: &[Vec<usize>]) -> Result<&mut Bucket, String> {
        if keys.len() != shapes.len() {
            return Err(format!("{} keys for {} shapes", keys.len(), shapes.len()));
        }
        if !self.live.contains_key(keys) {
            self.open(keys, shapes)?;
        }
        Ok(self.live.get_mut(keys).expect("opened above"))
    }

    /// Builds the bucket of `keys`, parking the state of the buckets it
    /// overlaps and taking its own.
    fn open(&mut self, keys: &[u32], shapes: &[Vec<usize>]) -> Result<(), String> {
        let overlapping: Vec<Vec<u32>> =
            self.live.keys().filter(|b| b.iter().any(|k| keys.contains(k))).cloned().collect();
        for old in overlapping {
            let b = self.live.remove(&old).expect("listed above");
            self.parked.extend(unit_states(&b)?);
        }
        let layout = GradientLayout::new(keys.iter().map(|k| k.to_string()).zip(shapes.iter().cloned()));
        let mut exchange = GradientExchange::new(&layout, &self.cfg, self.world, self.cfg.seed);
        // A global unit (the whole bucket) is keyed by its first tensor.
        let ids = if exchange.units().len() == 1 { &keys[..1.min(keys.len())] } else { keys };
        exchange.set_unit_ids(ids).map_err(|e| e.to_string())?;
        let names = exchange
            .units()
            .iter()
            .map(|u| match u.name.as_str() {
                "global" => {
                    format!("global:{}", keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(","))
                }
                name => name.to_string(),
            })
            .collect();
        let mut b = Bucket { exchange, names };
        restore(&mut b, &mut self.parked)?;
        self.live.insert(keys.to_vec(), b);
        Ok(())
    }

    /// Every tensor's state: the live buckets' and the parked.
    pub fn state(&self) -> Result<BTreeMap<String, UnitState>, String> {
        let mut all = self.parked.clone();
        for b in self.live.values() {
            all.extend(unit_states(b)?);
        }
        Ok(all)
    }

    /// Replaces all state with `state` (as [`Buckets::state`] gave it); the
    /// buckets take it as they are built.
    pub fn load(&mut self, state: BTreeMap<String, UnitState>) {
        self.live.clear();
        self.parked = state;
    }
}

/// A unit's buffer name in the hook's per-tensor state: `memory.{i}` or
/// `compressor.{i}` (the exchange's [`StateKey`] without the unit).
fn tensor_key(kind: StateKind, buffer: usize) -> String {
    format!("{}.{buffer}", kind.name())
}

/// [`tensor_key`] read back: `None` for a name that is not one.
fn parse_tensor_key(name: &str) -> Option<(StateKind, usize)> {
    let (kind, buffer) = name.split_once('.')?;
    Some((StateKind::named(kind)?, buffer.parse().ok()?))
}

/// A bucket's state by storage name: its exchange's `memory.{u}.{i}` is
/// unit u's `memory.{i}`.
fn unit_states(b: &Bucket) -> Result<BTreeMap<String, UnitState>, String> {
    let mut flat = StateBuffers::new();
    b.exchange.state("", &mut flat).map_err(|e| e.to_string())?;
    let mut out: BTreeMap<String, UnitState> = BTreeMap::new();
    for (name, v) in flat {
        let key = StateKey::parse(&name)
            .ok_or_else(|| format!("the exchange's state holds {name}, not a unit's"))?;
        let tensor =
            b.names.get(key.unit).ok_or_else(|| format!("the exchange's state names unit {}", key.unit))?;
        out.entry(tensor.clone()).or_default().insert(tensor_key(key.kind, key.buffer), v);
    }
    Ok(out)
}

/// Gives the bucket the parked state of its units (taking it out of
/// `parked`); units with none keep their fresh state.
fn restore(b: &mut Bucket, parked: &mut BTreeMap<String, UnitState>) -> Result<(), String> {
    let mut flat = StateBuffers::new();
    b.exchange.state("", &mut flat).map_err(|e| e.to_string())?;
    let mut any = false;
    for (u, name) in b.names.iter().enumerate() {
        let Some(bufs) = parked.remove(name) else { continue };
        for (k, v) in bufs {
            let (kind, i) = parse_tensor_key(&k).ok_or_else(|| format!("tensor {name}: no buffer {k}"))?;
            let key = StateKey::new("", kind, u, i).to_string();
            if !flat.contains_key(&key) {
                return Err(format!(
                    "tensor {name}: the state holds {k}, which this compressor does not keep"
                ));
            }
            flat.insert(key, v);
            any = true;
        }
    }
    if any {
        b.exchange.restore("", &flat).map_err(|e| format!("restoring the hook's state: {e}"))?;
    }
    Ok(())
}
