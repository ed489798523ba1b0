//! `plan = "auto"` deciding again on the burn handle: the handle times its
//! steps (from the end of one `begin_step` to the start of the next: the
//! step's work, the rounds' own time left out) and, at each period's end
//! from the second, asks the core (`auto_plan::Replan::decide`, the PyTorch
//! front's decision too) whether the period should change.

use std::time::Instant;

use super::{DataParallel, Replanning};
use crate::exchange::auto_plan::{PlanInputs, Replan};
use crate::DataParallelError;

impl DataParallel {
    /// Decide the period again while the run goes (`plan = "auto"`,
    /// ALGORITHMS.md §2.5): `inputs` are the ones the running plan was chosen
    /// for (`auto_plan::resolve_in_group` and `gradcomp train` choose it).
    /// From then on, at each period's end from the second, rank 0 compares
    /// its measured step with the plan's and, past the core's margin, decides
    /// H again; every worker takes it from that boundary. Every worker calls
    /// this, before its first step.
    pub fn decide_again_from(&mut self, inputs: PlanInputs) {
        let replan = Replan::new(inputs);
        self.replanning = Some(Replanning { replan, times: Vec::new(), since: None, lines: Vec::new() });
    }

    /// Rank 0's lines of the decisions taken since the last call (each says
    /// the step measured, the plan's, and the period decided).
    pub fn take_plan_lines(&mut self) -> Vec<String> {
        self.replanning.as_mut().map(|r| std::mem::take(&mut r.lines)).unwrap_or_default()
    }

    /// At the start of `begin_step`: the step just done, timed.
    pub(super) fn time_step(&mut self) {
        if let Some(r) = &mut self.replanning {
            if let Some(t) = r.since {
                r.times.push(t.elapsed().as_secs_f64());
            }
        }
    }

    /// At the end of `begin_step`: the next step's timing starts.
    pub(super) fn restart_step_timer(&mut self) {
        if let Some(r) = &mut self.replanning {
            r.since = Some(Instant::now());
        }
    }

    /// After the outer round at this step: a decision where a period other
    /// than the first ends here (the same on every worker).
    pub(super) fn decide_again(&mut self) -> Result<(), DataParallelError> {
        let (step, rank) = (self.step, self.rank());
        let Some(r) = &mut self.replanning else { return Ok(()) };
        let Some(schedule) = self.strategy.averaging().and_then(|a| a.schedule()) else { return Ok(()) };
        if !matches!(schedule.period_ended(step), Some(k) if k > 1) {
            return Ok(());
        }
        let period = schedule.period_at(step);
        let times = std::mem::take(&mut r.times);
        let decided = r
            .replan
            .decide(step, &times, period, &self.cfg, self.c.unmetered())
            .map_err(|e| DataParallelError::from_exchange(rank, e))?;
        r.lines.extend(decided.line);
        if let Some(h) = decided.period {
            let averaging = self.strategy.averaging_mut().expect("a schedule is local updates'");
            averaging.set_period_from(step, h).map_err(|e| DataParallelError::from_exchange(rank, e))?;
        }
        Ok(())
    }
}
