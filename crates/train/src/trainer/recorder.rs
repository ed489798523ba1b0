//! Step and epoch records: each worker keeps what it measured per step;
//! at the end of an epoch (or an interrupt) the workers' steps are gathered
//! to rank 0, which writes `steps.jsonl` with the predicted step time at
//! every configured link speed, and the epoch's line in `epochs.jsonl`.

use std::collections::BTreeMap;

use gradcomp_comm::{Gathered, NetworkModel, OpKind};
use gradcomp_compress::k_for;
use gradcomp_compress::stats::ContractionBounds;
use serde::{Deserialize, Serialize};

use super::checkpoint::Counters;
use super::run::{io, Shared, TrainError};
use crate::config::TrainConfig;
use crate::records::{link_key, EpochRecord, JsonLines, StepRecord};
use gradcomp_comm::CollectiveCall;
use gradcomp_dp::exchange::BucketTimes;
use gradcomp_dp::{DataParallel, DataParallelError, StepStats};

const OPS: usize = OpKind::ALL.len();

/// What one worker measured in one step (gathered to rank 0 each epoch).
/// The fields after `sent` are filled on rank 0 only: they describe the
/// step as a whole.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct WorkerStep {
    step: u64,
    epoch: u32,
    loss: Option<f64>,
    compute_seconds: f64,
    compress_seconds: f64,
    communicate_seconds: f64,
    decode_seconds: f64,
    optimizer_seconds: f64,
    wire_bytes: u64,
    selected: u64,
    elements: u64,
    sent: [u64; OPS],
    received: [u64; OPS],
    // Rank 0 only.
    lr: f64,
    density: Option<f64>,
    wall_seconds: f64,
    skipped: bool,
    residual_norm: f64,
    contraction: Option<f64>,
    bound_ratio: Vec<f64>,
    histogram: Option<(Vec<f32>, Vec<u64>)>,
    calls: [u64; OPS],
    /// The exchange's collectives and per-bucket stage times.
    wire_calls: Vec<CollectiveCall>,
    buckets: Vec<BucketTimes>,
    pipelined: bool,
    /// Seconds of each backward stage computed inside the exchange.
    #[serde(default)]
    backward_seconds: Vec<f64>,
    extra: BTreeMap<String, f64>,
}

/// Seconds a step spent outside the handle, measured by the step loop.
pub(super) struct LoopTimes {
    pub forward_backward_seconds: f64,
    pub optimizer_seconds: f64,
    pub wall_seconds: f64,
}

impl WorkerStep {
    pub(super) fn new(rank: usize, epoch: u32, s: &StepStats, t: &LoopTimes) -> Self {
        let x = &s.exchange;
        let mut w = WorkerStep {
            step: s.step,
            epoch,
            loss: s.loss.filter(|_| !s.skipped),
            compute_seconds: t.forward_backward_seconds + s.backward_seconds + s.read_seconds,
            compress_seconds: x.compress_seconds,
            communicate_seconds: x.communicate_seconds,
            decode_seconds: x.decode_seconds,
            optimizer_seconds: s.write_seconds + t.optimizer_seconds,
            wire_bytes: x.wire_bytes,
            selected: x.selected,
            elements: x.elements,
            ..Default::default()
        };
        for (k, o) in s.bytes.iter() {
            w.sent[k as usize] = o.sent;
            w.received[k as usize] = o.received;
        }
        if rank == 0 {
            w.lr = s.lr;
            w.density = s.density;
            w.wall_seconds = t.wall_seconds;
            w.skipped = s.skipped;
            w.residual_norm = x.residual_norm;
            w.contraction = x.contraction;
            w.bound_ratio.clone_from(&x.bound_ratios);
            w.histogram = s.histogram.as_ref().map(|h| (h.edges(), h.counts.clone()));
            for (k, o) in s.bytes.iter() {
                w.calls[k as usize] = o.calls;
            }
            w.wire_calls.clone_from(&x.calls);
            w.buckets.clone_from(&x.buckets);
            w.pipelined = x.pipelined;
            w.backward_seconds.clone_from(&x.backward_seconds);
            w.extra = s.extra.iter().chain(&x.extra).map(|(k, v)| (k.to_string(), *v)).collect();
        }
        w
    }
}

/// This worker's records between flushes, the run's totals, and (rank 0)
/// the record files.
pub(super) struct Recorder {
    steps: Vec<WorkerStep>,
    pub(super) totals: Counters,
    /// Network models for the configured link speeds, keyed by bit/s.
    links: Vec<(String, NetworkModel)>,
    /// Elements in compressed units (the d of the contraction bounds).
    compressed_elems: usize,
    steps_out: Option<JsonLines>,
    epochs_out: Option<JsonLines>,
    evals_out: Option<JsonLines>,
}

/// Network models for the configured link speeds, keyed as the records key them.
fn link_models(cfg: &TrainConfig) -> Result<Vec<(String, NetworkModel)>, TrainError> {
    Ok(cfg.network.models()?.into_iter().map(|(b, m)| (link_key(b), m)).collect())
}

/// The predicted communication time a step adds to its local work (rank
/// 0's view of its collectives): every exchange call priced on its own;
/// with pipelining, less what the measured compression and decoding of the
/// other buckets and a staged backward pass hide
/// ([`NetworkModel::staged_timeline`]); plus the step's
/// other collectives (CELGC's model averaging), one call per kind.
fn predicted_comm(m: &NetworkModel, s: &WorkerStep, n: usize, cfg: &TrainConfig) -> f64 {
    let mut t = 0.0;
    let mut wire = vec![0.0; s.buckets.len()];
    let mut counted = [0u64; OPS];
    for call in &s.wire_calls {
        let p = m.price(call, n, cfg.comm.server);
        match call.bucket {
            Some(b) if (b as usize) < wire.len() => wire[b as usize] += p,
            _ => t += p,
        }
        counted[call.op as usize] += 1;
    }
    let stages: Vec<[f64; 3]> =
        s.buckets.iter().zip(&wire).map(|(b, &w)| [b.compress_seconds, w, b.decode_seconds]).collect();
    // A staged backward pass inside the exchange is part of both.
    let serial: f64 = stages.iter().flatten().sum::<f64>() + s.backward_seconds.iter().sum::<f64>();
    let span = if s.pipelined {
        let ready: Vec<u32> = s.buckets.iter().map(|b| b.ready_after).collect();
        NetworkModel::staged_timeline(&s.backward_seconds, &ready, &stages).last().map_or(0.0, |b| b[2][1])
    } else {
        serial
    };
    // The local work (compression, decoding) is already in the step's local time.
    t += wire.iter().sum::<f64>() - (serial - span);
    // Collectives outside the exchange (CELGC's averaging): one call per kind.
    let size = |op: OpKind| s.sent[op as usize].max(s.received[op as usize]);
    let other = |op: OpKind| s.calls[op as usize] > 0 && counted[op as usize] == 0;
    for op in [OpKind::AllreduceSumF32, OpKind::AllreduceSumI32, OpKind::AllreduceMaxF32] {
        if other(op) {
            t += m.allreduce(n, size(op));
        }
    }
    if other(OpKind::Allgatherv) {
        t += m.allgatherv_uniform(n, size(OpKind::Allgatherv) / n.max(1) as u64);
    }
    t
}

impl Recorder {
    /// Opens the record files on rank 0; resuming from the checkpoint at
    /// step `resume_at`, appends to them after dropping the records of
    /// later steps (they run again).
    pub(super) fn new(
        sh: &Shared<'_>,
        rank: usize,
        dp: &DataParallel,
        resume_at: Option<u64>,
    ) -> Result<Self, TrainError> {
        let compressed_elems = dp.units().iter().filter(|u| !u.excluded).map(|u| u.len).sum();
        let mut r = Recorder {
            steps: Vec::new(),
            totals: Counters { workers: sh.cfg.workers, ..Default::default() },
            links: link_models(sh.cfg)?,
            compressed_elems,
            steps_out: None,
            epochs_out: None,
            evals_out: None,
        };
        if rank == 0 {
            let dir = &sh.run_dir;
            let open = |name: &str, field: &str, done: fn(u64) -> u64| {
                let path = dir.join(name);
                match resume_at {
                    // Step records count from 0, epoch and evaluation records the steps done.
                    Some(at) => JsonLines::open_kept(&path, |v| {
                        v.get(field).and_then(|s| s.as_u64()).is_some_and(|s| done(s) <= at)
                    }),
                    None => JsonLines::open(&path, false),
                }
                .map_err(io(dir))
            };
            r.steps_out = Some(open("steps.jsonl", "step", |s| s + 1)?);
            r.epochs_out = Some(open("epochs.jsonl", "steps", |s| s)?);
            r.evals_out = Some(open("evals.jsonl", "steps", |s| s)?);
        }
        Ok(r)
    }

    pub(super) fn push(&mut self, step: WorkerStep) {
        self.steps.push(step);
    }

    /// Gathers every worker's steps since the last flush to rank 0 and
    /// writes them to `steps.jsonl`; the totals advance on rank 0.
    pub(super) fn flush(&mut self, dp: &mut DataParallel, sh: &Shared<'_>) -> Result<(), TrainError> {
        let rank = dp.rank();
        let mine = serde_json::to_vec(&self.steps).expect("step records serialize");
        let mut g = Gathered::default();
        let c = dp.collective_mut();
        c.allgatherv(&mine, &mut g).map_err(|source| DataParallelError::Comm { rank, source })?;
        let steps = std::mem::take(&mut self.steps);
        if rank != 0 {
            return Ok(());
        }
        let per_worker: Vec<Vec<WorkerStep>> = g
            .iter()
            .map(serde_json::from_slice)
            .collect::<Result<_, _>>()
            .map_err(|e| TrainError::Records(format!("a worker's step records did not decode: {e}")))?;
        if let Some(r) = per_worker.iter().position(|w| w.len() != steps.len()) {
            return Err(TrainError::Records(format!(
                "worker {r} recorded {} steps since the last epoch, worker 0 {}",
                per_worker[r].len(),
                steps.len()
            )));
        }
        for (s, main) in steps.iter().enumerate() {
            let ws: Vec<&WorkerStep> = per_worker.iter().map(|w| &w[s]).collect();
            let r = self.step_record(main, &ws, sh.cfg);
            self.totals.bytes_sent += r.bytes_sent();
            self.totals.bytes_received += r.bytes_down.values().sum::<u64>();
            self.totals.wall_seconds += main.wall_seconds;
            for (k, t) in &r.predicted_seconds {
                *self.totals.predicted_wall_seconds.entry(k.clone()).or_default() += t;
            }
            if !main.skipped {
                self.totals.epoch_loss_sum += r.loss;
                self.totals.epoch_loss_steps += 1;
            }
            self.steps_out.as_mut().expect("rank 0 writes records").write(&r).map_err(io(&sh.run_dir))?;
        }
        Ok(())
    }

    /// The record of one step from rank 0's entry and every worker's.
    fn step_record(&self, main: &WorkerStep, ws: &[&WorkerStep], cfg: &TrainConfig) -> StepRecord {
        let n = ws.len();
        let per = |f: fn(&WorkerStep) -> f64| ws.iter().map(|w| f(w)).collect::<Vec<f64>>();
        let losses: Vec<f64> = ws.iter().filter_map(|w| w.loss).collect();
        let mut r = StepRecord {
            step: main.step,
            epoch: main.epoch,
            lr: main.lr,
            loss: losses.iter().sum::<f64>() / losses.len().max(1) as f64,
            density: main.density,
            sent_fraction: ws.iter().map(|w| w.selected as f64 / w.elements.max(1) as f64).sum::<f64>()
                / n as f64,
            wire_bytes: ws.iter().map(|w| w.wire_bytes).sum(),
            compute_seconds: per(|w| w.compute_seconds),
            compress_seconds: per(|w| w.compress_seconds),
            communicate_seconds: per(|w| w.communicate_seconds),
            decode_seconds: per(|w| w.decode_seconds),
            optimizer_seconds: per(|w| w.optimizer_seconds),
            wall_seconds: main.wall_seconds,
            backward_stages: main.backward_seconds.len() as u32,
            residual_norm: main.residual_norm,
            contraction: main.contraction,
            bound_ratio: main.bound_ratio.clone(),
            histogram: main.histogram.clone(),
            extra: main.extra.clone(),
            skipped: main.skipped,
            ..Default::default()
        };
        if let (Some(_), Some(rho)) = (main.contraction, main.density) {
            let b = ContractionBounds::new(k_for(rho, self.compressed_elems), self.compressed_elems);
            r.bound_classic = Some(b.classic);
            r.bound_tight = Some(b.tight);
        }
        for op in OpKind::ALL {
            let up: u64 = ws.iter().map(|w| w.sent[op as usize]).sum();
            let down: u64 = ws.iter().map(|w| w.received[op as usize]).sum();
            if up > 0 || down > 0 {
                r.bytes_up.insert(op.name().to_string(), up);
                r.bytes_down.insert(op.name().to_string(), down);
            }
        }
        let local = r.slowest_local().unwrap_or(0.0);
        for (key, m) in &self.links {
            r.predicted_seconds.insert(key.clone(), local + predicted_comm(m, main, n, cfg));
        }
        r
    }

    /// Ends an epoch on rank 0: its record from the totals and the
    /// evaluation, written to `epochs.jsonl` (and, evaluated, to
    /// `evals.jsonl`). The epoch's loss sums restart.
    pub(super) fn epoch_record(
        &mut self,
        sh: &Shared<'_>,
        epoch: u32,
        step: u64,
        eval: Option<&super::eval::Evaluation>,
    ) -> Result<EpochRecord, TrainError> {
        let r = self.eval_record(sh, epoch, step, eval)?;
        self.totals.epoch_loss_sum = 0.0;
        self.totals.epoch_loss_steps = 0;
        self.epochs_out.as_mut().expect("rank 0 writes records").write(&r).map_err(io(&sh.run_dir))?;
        Ok(r)
    }

    /// An evaluation's record on rank 0, in the form of an epoch's (the
    /// epoch so far: training loss since its start, cumulative bytes and
    /// times), written to `evals.jsonl`: the accuracy against wall-clock
    /// curve of `train.eval_every`, epoch ends included.
    pub(super) fn eval_record(
        &mut self,
        sh: &Shared<'_>,
        epoch: u32,
        step: u64,
        eval: Option<&super::eval::Evaluation>,
    ) -> Result<EpochRecord, TrainError> {
        let t = &self.totals;
        let lm = sh.cfg.is_language_model();
        let r = EpochRecord {
            epoch,
            steps: step,
            train_loss: t.epoch_loss_sum / t.epoch_loss_steps.max(1) as f64,
            test_accuracy: eval.filter(|_| !lm).map(|e| e.test.accuracy()),
            test_perplexity: eval.filter(|_| lm).map(|e| e.test.perplexity()),
            test_loss: eval.map(|e| e.test.mean_loss()),
            valid_perplexity: eval.and_then(|e| e.valid).map(|v| v.perplexity()),
            valid_loss: eval.and_then(|e| e.valid).map(|v| v.mean_loss()),
            bytes_sent: t.bytes_sent,
            bytes_received: t.bytes_received,
            wall_seconds: t.wall_seconds,
            predicted_wall_seconds: t.predicted_wall_seconds.clone(),
        };
        if eval.is_some() {
            self.evals_out.as_mut().expect("rank 0 writes records").write(&r).map_err(io(&sh.run_dir))?;
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two buckets of one 1 MB allreduce each, 10 ms compression and 1 ms
    /// decoding each, on a 1 Gbit/s link without latency (8 ms per bucket).
    fn step(pipelined: bool) -> WorkerStep {
        let call = |b| CollectiveCall {
            bucket: Some(b),
            op: OpKind::AllreduceSumF32,
            sizes: vec![1_000_000],
            download: 0,
        };
        WorkerStep {
            wire_calls: vec![call(0), call(1)],
            buckets: vec![
                BucketTimes {
                    compress_seconds: 0.010,
                    wire_seconds: 0.0,
                    decode_seconds: 0.001,
                    ready_after: 0
                };
                2
            ],
            pipelined,
            ..Default::default()
        }
    }

    #[test]
    fn a_pipelined_step_is_predicted_with_what_the_pipeline_hides() {
        let cfg = TrainConfig::default();
        let m = NetworkModel::from_bits_per_second(1e9, 0.0);
        let serial = predicted_comm(&m, &step(false), 2, &cfg);
        assert!((serial - 0.016).abs() < 1e-12, "{serial}");
        // compress 0 [0, 10], wire 0 [10, 18], compress 1 [10, 20], decode 0
        // [20, 21], wire 1 [20, 28], decode 1 [28, 29]: 29 ms against 38 in series.
        let pipelined = predicted_comm(&m, &step(true), 2, &cfg);
        assert!((pipelined - (0.016 - 0.009)).abs() < 1e-12, "{pipelined}");
    }

    #[test]
    fn a_staged_step_is_predicted_with_the_backward_pass_the_wire_hides() {
        let cfg = TrainConfig::default();
        let m = NetworkModel::from_bits_per_second(1e9, 0.0);
        let mut s = step(true);
        s.buckets.iter_mut().for_each(|b| b.compress_seconds = 0.001);
        // Whole: compress 0 [0, 1], wire 0 [1, 9], compress 1 [1, 2], decode 0
        // [9, 10], wire 1 [9, 17], decode 1 [17, 18]: 2 ms hidden, 14 ms added.
        let whole = predicted_comm(&m, &s, 2, &cfg);
        assert!((whole - 0.014).abs() < 1e-12, "{whole}");
        // Two backward stages of 20 ms inside the exchange; bucket 0 is
        // complete after the first, bucket 1 after the second: stage 1
        // [0, 20], compress 0 [20, 21], wire 0 [21, 29] beside stage 2
        // [21, 41], compress 1 [41, 42], wire 1 [42, 50], decode 0 [42, 43],
        // decode 1 [50, 51]: 51 ms against 60 in series, 7 ms added.
        s.backward_seconds = vec![0.020, 0.020];
        s.buckets[0].ready_after = 1;
        s.buckets[1].ready_after = 2;
        let staged = predicted_comm(&m, &s, 2, &cfg);
        assert!((staged - 0.007).abs() < 1e-12, "{staged}");
    }
}
