//! The rule's choice priced on this machine, and the lines that say it:
//! what `gradcomp train` and `gradcomp model --plan` print, and what the
//! burn front's group resolution returns.

use super::{choose, AutoPlan, PlanCosts, PlanInputs};

/// The plan for `inputs`, priced with the methods measured on this CPU.
pub fn choose_here(inputs: &PlanInputs) -> AutoPlan {
    choose(inputs, &PlanCosts::measure(&inputs.shapes))
}

impl AutoPlan {
    /// The inputs' summary and each decision with its reason, one line
    /// each; `step_was` and `link_was` say how the step and the link were
    /// had (the step's in parentheses; the link's appended to its rate).
    pub fn explain(&self, inputs: &PlanInputs, step_was: &str, link_was: &str) -> Vec<String> {
        let mut out = vec![format!(
            "plan = \"auto\": step {:.1} ms ({step_was}), {} workers, {:.0} Mbit/s{link_was}, {} tensors, {} steps",
            inputs.step_seconds * 1e3,
            inputs.workers,
            inputs.link.bandwidth * 8.0 / 1e6,
            inputs.shapes.len(),
            inputs.total_steps
        )];
        out.extend(self.decisions.iter().map(|d| format!("  {d}")));
        out
    }
}
