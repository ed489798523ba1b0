//! The strategy a configuration describes.

use super::base::Strategy;
use super::local_updates::LocalUpdates;
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
        StrategyKind::Synchronous => Box::new(Synchronous::new(
            GradientExchange::new(layout, cfg, workers, cfg.seed),
            cfg.compression.local_clip,
        )),
        StrategyKind::ClippedAveraging | StrategyKind::Local => {
            Box::new(LocalUpdates::new(cfg, layout, workers)?)
        }
    })
}

/// The local-update strategy `cfg` describes (`kind = "local"` or
/// `"celgc"`), for a front that keeps the strategy as its own type (the PyTorch front).
pub fn build_local(
    cfg: &DataParallelConfig,
    layout: &GradientLayout,
    workers: usize,
) -> Result<LocalUpdates, ConfigError> {
    LocalUpdates::new(cfg, layout, workers)
}
