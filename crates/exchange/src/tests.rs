use std::ops::Range;

use gradcomp_comm::{
    Aggregate, Collective, CommError, Gathered, InProcessCollective, InProcessGroup, Reduction,
    ServerPlacement,
};
use gradcomp_compress::{codec, CompressorConfig};

use super::*;
use crate::config::{CompressionConfig, DataParallelConfig, Granularity, Topology};
use crate::error::ExchangeError;
use crate::grad_stages::{CompleteGrad, GradStages};
use crate::layout::GradientLayout;

#[test]
fn buckets_are_cut_from_the_last_unit_and_never_split_one() {
    let u = [10, 20, 30, 40];
    // 4-byte values: 160, 120, 80, 40 bytes from the back.
    assert_eq!(cut_buckets(&u, 1 << 30), vec![0..4]);
    assert_eq!(cut_buckets(&u, 100), vec![3..4, 2..3, 0..2]);
    assert_eq!(cut_buckets(&u, 1), vec![3..4, 2..3, 1..2, 0..1]);
    assert_eq!(cut_buckets(&u, 280), vec![2..4, 0..2]);
    // The first unit always stays with the last bucket, even when small.
    assert_eq!(cut_buckets(&[1, 1000], 100), vec![1..2, 0..1]);
    assert_eq!(cut_buckets(&[1000], 1), vec![0..1]);
    assert_eq!(cut_buckets(&[], 1), vec![0..0]);
}

/// Five tensors of 1200, 40, 800, 20 and 200 values: at 0.0002 MiB
/// (52 values) three buckets.
fn layout() -> GradientLayout {
    GradientLayout::new([
        ("a.weight".to_string(), vec![40, 30]),
        ("a.bias".to_string(), vec![40]),
        ("b.weight".to_string(), vec![20, 40]),
        ("b.bias".to_string(), vec![20]),
        ("c.weight".to_string(), vec![10, 20]),
    ])
}

/// Runs `f` on three in-process workers, one thread each; results in rank order.
fn on_workers<T: Send>(f: impl Fn(InProcessCollective) -> T + Sync) -> Vec<T> {
    let group = InProcessGroup::new(3).timeout(std::time::Duration::from_secs(20));
    group.run(f).unwrap().into_iter().map(|r| r.unwrap()).collect()
}

/// The exchange of `compressor` over `topology` among three workers, at
/// layer granularity, with the rest of `cfg`.
fn exchange_of(
    layout: &GradientLayout,
    compressor: &CompressorConfig,
    cfg: &CompressionConfig,
    topology: Topology,
) -> GradientExchange {
    let dp = DataParallelConfig::new(compressor.clone())
        .with_compression(cfg.clone())
        .with_granularity(Granularity::Layer)
        .with_topology(topology);
    GradientExchange::new(layout, &dp, 3, 7)
}

/// One step's input: learning rate 0.1, loss 1.5 (eSGD reads it).
fn input(step: u64, measure: bool) -> StepInput {
    StepInput { step, lr: 0.1, loss: Some(1.5), measure }
}

/// An exchange of Top-k ρ = 0.1 over allgather in the test layout's three buckets, pipelined.
fn pipelined_topk(layout: &GradientLayout) -> GradientExchange {
    let cfg = CompressionConfig { bucket_mb: 0.0002, pipeline: true, ..Default::default() };
    exchange_of(layout, &CompressorConfig::topk(0.1), &cfg, Topology::Allgather)
}

/// What one worker saw over a few steps: per step the averaged gradient's
/// bits and every unit's encoded message, then its memories' state.
type Trace = (Vec<(Vec<u32>, Vec<u8>, u64)>, StateBuffers);

/// A gradient revealed `chunk` values at a time from the end, as a
/// staged backward pass yields it (chunks straddle units and buckets).
struct Revealed {
    full: Vec<f32>,
    grad: Vec<f32>,
    end: usize,
    chunk: usize,
}

impl GradStages for Revealed {
    fn grad(&self) -> &[f32] {
        &self.grad
    }
    fn next_stage(&mut self, filled: &mut Vec<Range<usize>>) -> Result<bool, ExchangeError> {
        if self.end == 0 {
            return Ok(false);
        }
        let start = self.end.saturating_sub(self.chunk);
        self.grad[start..self.end].copy_from_slice(&self.full[start..self.end]);
        filled.push(start..self.end);
        self.end = start;
        Ok(true)
    }
}

/// Three workers exchange four steps of made-up gradients; with
/// `staged`, the gradient arrives that many values at a time.
fn trace(
    compressor: &CompressorConfig,
    topology: Topology,
    bucket_mb: f64,
    pipeline: bool,
    staged: Option<usize>,
) -> Vec<Trace> {
    let layout = layout();
    let cfg = CompressionConfig { bucket_mb, pipeline, ..Default::default() };
    on_workers(|mut c| {
        let mut x = exchange_of(&layout, compressor, &cfg, topology);
        if bucket_mb < 1.0 {
            assert_eq!(x.buckets(), &[4..5, 2..4, 0..2]);
        }
        let rank = c.rank();
        let mut steps = Vec::new();
        for step in 0..4u64 {
            let grad: Vec<f32> = (0..layout.total())
                .map(|i| {
                    let h = (i as u64 * 2654435761 + step * 97 + rank as u64 * 13) % 1000;
                    (h as f32 - 500.0) / 250.0
                })
                .collect();
            let mut out = vec![f32::NAN; grad.len()];
            let st = match staged {
                None => x.exchange(
                    Gradient::Host(&mut CompleteGrad(&grad)),
                    &input(step, step == 3),
                    &mut out,
                    &mut c,
                ),
                Some(chunk) => {
                    let (end, zeros) = (grad.len(), vec![0.0; grad.len()]);
                    let mut stages = Revealed { full: grad.clone(), grad: zeros, end, chunk };
                    x.exchange(Gradient::Host(&mut stages), &input(step, step == 3), &mut out, &mut c)
                }
            }
            .unwrap();
            assert_eq!(st.pipelined, pipeline && x.buckets().len() > 1);
            assert_eq!(st.buckets.len(), x.buckets().len());
            let mut wire = Vec::new();
            for (u, unit) in x.units().iter().enumerate() {
                codec::encode(x.message(u), unit.id, &mut wire);
            }
            steps.push((out.iter().map(|v| v.to_bits()).collect(), wire, st.wire_bytes));
        }
        let mut state = StateBuffers::new();
        x.state("", &mut state).unwrap();
        (steps, state)
    })
}

#[test]
fn buckets_pipelining_and_stages_leave_every_message_and_result_bit_identical() {
    for name in CompressorConfig::NAMES {
        let mut compressor = CompressorConfig::named(name).unwrap();
        if let CompressorConfig::Powersgd(p) = &mut compressor {
            p.start_iter = 2; // steps 2 and 3 compress (the others are its warm-up)
        }
        let gathers = compressor.build().combine().per_worker();
        let topologies: &[Topology] = if gathers {
            &[Topology::Allgather, Topology::ParameterServer]
        } else {
            &[Topology::Allreduce, Topology::Allgather, Topology::ParameterServer]
        };
        for &topology in topologies {
            let whole = trace(&compressor, topology, 25.0, true, None);
            for pipeline in [false, true] {
                // Whole, and in stages that straddle units (300 values)
                // or hold several buckets (2000 of 2260).
                for staged in [None, Some(300), Some(2000)] {
                    let bucketed = trace(&compressor, topology, 0.0002, pipeline, staged);
                    assert!(
                        whole == bucketed,
                        "{name} over {topology:?}: buckets (pipeline {pipeline}, stages {staged:?}) \
                         changed a message or result"
                    );
                }
            }
            // Replicas agree, and the result is a real average (not left unwritten).
            assert!(whole.iter().all(|w| w.0.iter().zip(&whole[0].0).all(|(a, b)| a.0 == b.0)));
            assert!(whole[0].0.iter().all(|s| s.0.iter().all(|&b| f32::from_bits(b).is_finite())));
        }
    }
}

#[test]
fn a_peer_that_leaves_mid_pipeline_is_an_error_on_every_other_worker_not_a_hang() {
    let layout = layout();
    let start = std::time::Instant::now();
    let results = on_workers(|mut c| {
        let mut x = pipelined_topk(&layout);
        let grad = vec![1.0f32; layout.total()];
        let mut out = vec![0.0; grad.len()];
        for step in 0..3u64 {
            // Worker 2 leaves after the first step (its collective is dropped).
            if c.rank() == 2 && step == 1 {
                return None;
            }
            let step = StepInput { step, lr: 0.1, loss: None, measure: false };
            if let Err(e) = x.exchange(Gradient::Host(&mut CompleteGrad(&grad)), &step, &mut out, &mut c) {
                return Some(e.to_string());
            }
        }
        Some("no error".into())
    });
    assert!(start.elapsed() < std::time::Duration::from_secs(15), "took {:?}", start.elapsed());
    for (rank, r) in results.iter().take(2).enumerate() {
        let e = r.as_deref().unwrap();
        assert!(e.contains("worker 2"), "rank {rank}: {e}");
    }
}

/// A worker whose allgatherv contributions arrive cut short (a corrupt
/// message on the wire).
struct Truncating(InProcessCollective);

impl Collective for Truncating {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn world_size(&self) -> usize {
        self.0.world_size()
    }
    fn allreduce(&mut self, r: Reduction<'_>) -> Result<(), CommError> {
        self.0.allreduce(r)
    }
    fn allgatherv(&mut self, send: &[u8], recv: &mut Gathered) -> Result<(), CommError> {
        self.0.allgatherv(&send[..send.len() / 2], recv)
    }
    fn alltoallv(&mut self, send: &Gathered, recv: &mut Gathered) -> Result<(), CommError> {
        let mut cut = Gathered::default();
        send.iter().for_each(|m| cut.push(&m[..m.len() / 2]));
        self.0.alltoallv(&cut, recv)
    }
    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        self.0.broadcast(buf, root)
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        self.0.barrier()
    }
    fn push_pull(
        &mut self,
        placement: ServerPlacement,
        upload: &[u8],
        aggregate: &mut Aggregate<'_>,
        download: &mut Vec<u8>,
    ) -> Result<(), CommError> {
        self.0.push_pull(placement, upload, aggregate, download)
    }
}

/// Every worker's error when worker 1's messages arrive cut short
/// (`Truncating`), in an exchange `make` builds; each must be a codec
/// error naming worker 1.
fn errors_of_a_corrupt_sender(make: impl Fn() -> GradientExchange + Sync) -> Vec<String> {
    on_workers(|c| {
        let mut x = make();
        let grad = vec![1.0f32; layout().total()];
        let mut out = vec![0.0; grad.len()];
        let step = StepInput { step: 0, lr: 0.1, loss: None, measure: false };
        let grad = Gradient::Host(&mut CompleteGrad(&grad));
        let result = if c.rank() == 1 {
            x.exchange(grad, &step, &mut out, &mut Truncating(c))
        } else {
            let mut c = c;
            x.exchange(grad, &step, &mut out, &mut c)
        };
        match result {
            Err(e @ ExchangeError::Codec { rank: 1, .. }) => e.to_string(),
            other => panic!("expected a codec error naming worker 1, got {other:?}"),
        }
    })
}

#[test]
fn a_corrupt_message_in_a_pipelined_bucket_names_its_sender_on_every_worker() {
    let errors = errors_of_a_corrupt_sender(|| pipelined_topk(&layout()));
    assert!(errors.iter().all(|e| e.contains("worker 1")), "{errors:?}");
}

/// On the reduce-scatter a worker's cut-short shards fail every owner's
/// decoding, naming it, before the averages' allgather: no worker waits.
#[test]
fn a_corrupt_shard_on_the_reduce_scatter_names_its_sender_on_every_worker() {
    let fp4 = CompressorConfig::named("fp4").unwrap();
    let cfg = CompressionConfig::default();
    let errors = errors_of_a_corrupt_sender(|| exchange_of(&layout(), &fp4, &cfg, Topology::ReduceScatter));
    assert!(errors.iter().all(|e| e.contains("worker 1")), "{errors:?}");
}
