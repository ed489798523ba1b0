//! The strategy a configuration describes.

use super::base::Strategy;
use super::celgc::Celgc;
use super::sync::Synchronous;
use crate::config::{ConfigError, DataParallelConfig, StrategyKind};
use crate::layout::GradientLayout;
use crate::GradientExchange;

/// The strategy `cfg` describes, for a model of `layout` among `workers`
/// workers. Errors (naming the key) where the configuration does not fit
/// the model: more Streaming fragments than tensors.
pub fn build(
    cfg: &DataParallelConfig,
    layout: &GradientLayout,
    workers: usize,
) -> Result<Box<dyn Strategy>, ConfigError> {
    Ok(match cfg.strategy.kind {
        StrategyKind::Sync => Box::new(Synchronous::new(
            GradientExchange::new(layout, cfg, workers, cfg.seed),
            cfg.compression.local_clip,
        )),
        StrategyKind::Celgc | StrategyKind::Local => Box::new(Celgc::new(cfg, layout, workers)?),
    })
}

/// The local-update strategy `cfg` describes (`kind = "local"` or
/// `"celgc"`), for a front that drives its model rounds itself.
pub fn build_local(
    cfg: &DataParallelConfig,
    layout: &GradientLayout,
    workers: usize,
) -> Result<Celgc, ConfigError> {
    Celgc::new(cfg, layout, workers)
}
