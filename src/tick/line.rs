//! The line for a tick, `NAME tick N: OUTCOME (step exited 0 in 2s): REASON`:
//! the one renderer behind what the `tick` command prints and what the
//! daemon logs for each tick it ran.

use super::TickReport;
use crate::state::Outcome;
use crate::term::safe;

/// Where the line is shown, which decides what it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    /// The `tick` command's first line: it also says how the verifier
    /// ended and which crashed tick this one recorded, and leaves out a
    /// reason that a gate line printed under it says.
    Command,
    /// The daemon's log: one line a tick, nothing under it.
    Log,
}

impl TickReport {
    /// The line for this tick, without its newline. What a gate or a step
    /// said is shown as [`safe`] shows it.
    pub(crate) fn line(&self, view: View) -> String {
        let mut line = format!("{} tick {}: {}", self.loop_name, self.tick, self.outcome);
        if let Some(step) = &self.step {
            line += &format!(" (step {step}");
            if let Some(v) = self.verifier.as_ref().filter(|_| view == View::Command) {
                line += if v.success() {
                    ", verifier passed"
                } else {
                    ", verifier failed"
                };
            }
            line += ")";
        }
        if let Some(reason) = &self.reason
            && self.outcome != Outcome::Ran
            && !self.said_elsewhere(reason, view)
        {
            line += &format!(": {}", safe(reason));
        }
        if let Some(t) = self.recovered_crash.filter(|_| view == View::Command) {
            line += &format!(" [tick {t} had crashed; recorded]");
        }
        line
    }

    /// Whether `reason` is said already: it is how the step ended, or, on
    /// the command's view, what a gate line under it says.
    fn said_elsewhere(&self, reason: &str, view: View) -> bool {
        self.step.as_ref().is_some_and(|s| reason == format!("step {s}"))
            || view == View::Command
                && self
                    .decisions
                    .iter()
                    .any(|v| v.error.as_deref() == Some(reason) || v.decision.reason() == reason)
    }
}
