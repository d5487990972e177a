//! What a tick did: the report the `tick` command prints (`--json` as
//! is), the daemon logs, and what follows a tick (the schedule, the
//! notifications) reads.

use jiff::Timestamp;
use serde::Serialize;

use crate::notify::Facts;
use crate::state::{Outcome, ProcessOutcome};

use crate::domain::Verdict;

/// What a tick did; `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TickReport {
    #[serde(rename = "loop")]
    pub loop_name: String,
    /// The tick's number: the one that ran, or the one that would have.
    pub tick: u64,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub decisions: Vec<Verdict>,
    /// Left out when the step did not run, as the verifier is when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<ProcessOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifier: Option<ProcessOutcome>,
    /// A tick found dead mid-way (and recorded as crashed) by this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered_crash: Option<u64>,
    /// When that crashed tick started: the daemon's ledger records the
    /// firing it filled as crashed.
    #[serde(skip)]
    pub crashed_started: Option<Timestamp>,
    /// This tick made the loop start awaiting approval (it was not before).
    #[serde(skip)]
    pub started_waiting: bool,
    /// The loop as the tick left it, for its notifications (none when the
    /// tick found the lock held).
    #[serde(skip)]
    pub facts: Option<Box<Facts>>,
    /// The shadow gates that disagreed with the live side for the first
    /// time in this tick (`[notify] on = ["shadow"]`).
    #[serde(skip)]
    pub first_disagreed: Vec<String>,
}

impl TickReport {
    /// Whether this tick stopped the loop (halted or completed it): its
    /// caller then disables the loop's OS schedule, outside the lock.
    pub(crate) fn stopped(&self) -> bool {
        matches!(self.outcome, Outcome::Halted | Outcome::Completed)
    }

    /// Whether this tick's step, its verifier or its worktree failed.
    pub(crate) fn failed(&self) -> bool {
        let failed = |p: &Option<ProcessOutcome>| p.as_ref().is_some_and(|p| !p.success());
        self.outcome == Outcome::Failed || failed(&self.step) || failed(&self.verifier)
    }

    /// How the `tick` command exits for this tick (docs/ticks.md).
    pub(crate) fn exit(&self) -> crate::error::Exit {
        self.outcome.into()
    }
}
