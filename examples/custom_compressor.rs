//! A compressor of your own, in your own crate, handed to gradcomp: block
//! top-k, which keeps the 1/8 of 16-value blocks with the largest norm (so
//! the kept values stay contiguous, as GPU-friendly sparsifiers want), with
//! gradcomp's error feedback as its memory. It trains the model of
//! `custom_model.rs` on 4 in-process workers and prints the accuracy and the
//! bytes sent, beside TernGrad's and dense's.
//!
//! ```text
//! cargo run --release -p gradcomp-dp --example custom_compressor
//! ```

#[path = "custom_model.rs"]
mod custom_model;

use gradcomp_dp::prelude::*;

/// Values per block.
const BLOCK: usize = 16;

/// Keeps the `1/keep_one_in` of blocks with the largest squared norm.
pub struct BlockTopK {
    keep_one_in: usize,
    /// (squared norm, block) per block, reused.
    norms: Vec<(f32, usize)>,
}

impl BlockTopK {
    pub fn new(keep_one_in: usize) -> Self {
        Self { keep_one_in, norms: Vec::new() }
    }
}

impl Compressor for BlockTopK {
    fn name(&self) -> &'static str {
        "block-topk"
    }

    /// Every worker keeps different blocks: the messages are gathered.
    fn combine(&self) -> Combine {
        Combine::Gather
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        self.norms.clear();
        self.norms.extend(input.chunks(BLOCK).enumerate().map(|(b, x)| (x.iter().map(|v| v * v).sum(), b)));
        let keep = self.norms.len().div_ceil(self.keep_one_in).max(1);
        // The `keep` largest norms, then in block order (a message's indices ascend).
        self.norms.select_nth_unstable_by(keep - 1, |a, b| b.0.total_cmp(&a.0));
        self.norms.truncate(keep);
        self.norms.sort_unstable_by_key(|&(_, b)| b);
        let m = out.sparse_mut();
        m.len = input.len();
        m.indices.clear();
        m.values.clear();
        for &(_, b) in &self.norms {
            let start = b * BLOCK;
            let end = (start + BLOCK).min(input.len());
            m.indices.extend(start as u32..end as u32);
            m.values.extend_from_slice(&input[start..end]);
        }
    }
}

fn main() {
    let block_topk = DataParallelConfig::custom(
        CustomCompressor::new("block-topk", || Box::new(BlockTopK::new(8)))
            .with_memory(|| Box::new(ErrorFeedback::new(ResidualForm::Raw))),
    )
    .with_seed(custom_model::SEED);
    let dense = DataParallelConfig::new(CompressorConfig::dense()).with_seed(custom_model::SEED);
    for (name, config) in
        [("block top-k (1/8)", block_topk), ("TernGrad", custom_model::terngrad()), ("dense", dense)]
    {
        let (acc, sent) = custom_model::run(4, config);
        println!("{name}: test accuracy {:.2}%, bytes sent {:.3} MB", acc * 100.0, sent as f64 / 1e6);
    }
}
