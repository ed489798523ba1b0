//! The strategy a configuration describes.

use super::base::Strategy;
use super::celgc::Celgc;
use super::sync::Synchronous;
use crate::config::{DataParallelConfig, StrategyKind};
use crate::layout::GradientLayout;
use crate::GradientExchange;

/// The strategy `cfg` describes, for a model of `layout` among `workers` workers.
pub fn build(cfg: &DataParallelConfig, layout: &GradientLayout, workers: usize) -> Box<dyn Strategy> {
    let exchange = |seed| GradientExchange::new(layout, cfg, workers, seed);
    match cfg.strategy.kind {
        StrategyKind::Sync => Box::new(Synchronous::new(exchange(cfg.seed), cfg.compression.local_clip)),
        StrategyKind::Celgc => {
            // The model delta's random stream differs from a gradient exchange's.
            let delta = cfg.strategy.compress_delta.then(|| exchange(cfg.seed ^ 0xCE16C));
            Box::new(Celgc::new(&cfg.strategy, cfg.base_lr.unwrap_or(1.0), delta))
        }
    }
}
