//! Learning-rate schedules, as a function of the global step.

use crate::config::{ScheduleConfig, ScheduleKind, TrainConfig};
use crate::data::{Loader, TrainData};

/// lr at a step, given the steps per epoch and the total number of steps.
#[derive(Clone, Debug, PartialEq)]
pub struct LrSchedule {
    base: f64,
    c: ScheduleConfig,
    steps_per_epoch: u64,
    total_steps: u64,
}

impl LrSchedule {
    pub fn new(base: f64, c: &ScheduleConfig, steps_per_epoch: u64, total_steps: u64) -> Self {
        Self { base, c: c.clone(), steps_per_epoch: steps_per_epoch.max(1), total_steps: total_steps.max(1) }
    }

    pub fn lr(&self, step: u64) -> f64 {
        let epoch = step / self.steps_per_epoch;
        let decayed = match self.c.kind {
            ScheduleKind::Constant => self.base,
            ScheduleKind::Step => {
                self.base * self.c.gamma.powi((epoch / u64::from(self.c.step_epochs)) as i32)
            }
            ScheduleKind::Poly => {
                self.base * (1.0 - step as f64 / self.total_steps as f64).max(0.0).powf(self.c.power)
            }
            ScheduleKind::InverseEpoch => self.base / (2.0 * (epoch as f64 + 1.0)),
        };
        let warm = self.c.warmup_epochs * self.steps_per_epoch as f64;
        if warm > 0.0 && (step as f64) < warm {
            decayed * (step as f64 + 1.0) / warm
        } else {
            decayed
        }
    }
}

/// Resolves a QSR period rule (`strategy.period_rule = { name = "qsr" }`)
/// from this run's `[schedule]` before the workers start, so the periods
/// land in the run's `config.toml` and a resume reads them back. The
/// plateau factor (`train.lr_plateau`), decided as the run goes, is not
/// part of it.
pub fn resolve_period_rule(cfg: &mut TrainConfig, data: &TrainData) {
    if cfg.strategy.period_rule.resolved() {
        return;
    }
    let steps_per_epoch = Loader::new(data, cfg, 0).batches_per_epoch() as u64;
    let planned = steps_per_epoch * u64::from(cfg.train.epochs.max(1));
    let total = if cfg.train.max_steps > 0 { cfg.train.max_steps.min(planned) } else { planned };
    let lr = LrSchedule::new(cfg.optimizer.lr, &cfg.schedule, steps_per_epoch, total);
    let st = &cfg.strategy;
    cfg.strategy.period_rule = st.period_rule.resolve(st.period, st.sync_steps(), total, &|t| lr.lr(t));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let step =
            ScheduleConfig { kind: ScheduleKind::Step, step_epochs: 2, gamma: 0.5, ..Default::default() };
        let s = LrSchedule::new(1.0, &step, 10, 100);
        assert_eq!((s.lr(0), s.lr(19), s.lr(20), s.lr(45)), (1.0, 1.0, 0.5, 0.25));
        let poly = ScheduleConfig { kind: ScheduleKind::Poly, power: 0.5, ..Default::default() };
        let p = LrSchedule::new(1.0, &poly, 10, 100);
        assert!((p.lr(75) - 0.5).abs() < 1e-12);
        let inv = ScheduleConfig { kind: ScheduleKind::InverseEpoch, ..Default::default() };
        let i = LrSchedule::new(0.1, &inv, 10, 100);
        assert!((i.lr(0) - 0.05).abs() < 1e-12 && (i.lr(10) - 0.025).abs() < 1e-12);
        let warm = ScheduleConfig { warmup_epochs: 1.0, ..Default::default() };
        let w = LrSchedule::new(1.0, &warm, 10, 100);
        assert!((w.lr(0) - 0.1).abs() < 1e-12 && w.lr(9) == 1.0 && w.lr(50) == 1.0);
    }
}
