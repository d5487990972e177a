//! The loop's state (`.state.loop`): its typed shape and the pure transitions
//! that commands apply to it. Reading and writing files is `store`'s job.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::gate::Decision;

/// The `schema` number this build reads and writes.
pub const SCHEMA: u32 = 1;

/// Where a loop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Active,
    Paused,
    AwaitingApproval,
    Halted,
    Completed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Paused => "paused",
            Status::AwaitingApproval => "awaiting_approval",
            Status::Halted => "halted",
            Status::Completed => "completed",
        }
    }

    /// Whether a tick may run gates and steps in this status.
    pub fn is_runnable(self) -> bool {
        matches!(self, Status::Active | Status::AwaitingApproval)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator's approval, waiting to be used by a tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub by: String,
    pub at: Timestamp,
    #[serde(default)]
    pub note: Option<String>,
}

/// How a step or verifier process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessOutcome {
    /// The exit code; none when a signal ended it.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub timed_out: bool,
}

impl ProcessOutcome {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// How a tick ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Ran,
    Failed,
    Skipped,
    AwaitingApproval,
    Halted,
    Completed,
    Busy,
    Inactive,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ran => "ran",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::AwaitingApproval => "awaiting-approval",
            Outcome::Halted => "halted",
            Outcome::Completed => "completed",
            Outcome::Busy => "busy",
            Outcome::Inactive => "inactive",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The last tick whose step ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastTick {
    pub number: u64,
    pub started_at: Timestamp,
    pub ended_at: Timestamp,
    pub outcome: Outcome,
    /// The combined before-step decision.
    pub decision: Decision,
    pub step: Option<ProcessOutcome>,
    pub verifier: Option<ProcessOutcome>,
    #[serde(default)]
    pub worktree_changed: Option<bool>,
}

/// Set just before the step starts and cleared when the tick's state is
/// written: a later tick that finds it knows the runner died mid-step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub tick: u64,
    pub pid: u32,
    pub host: String,
    pub started_at: Timestamp,
}

/// The git worktree a loop's step runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    pub repo: PathBuf,
    pub branch: String,
    pub path: PathBuf,
    pub created_at: Timestamp,
}

/// `.state.loop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub schema: u32,
    /// Bumped by every write, so a lost update shows.
    pub version: u64,
    pub status: Status,
    #[serde(default)]
    pub status_reason: Option<String>,
    /// Ticks whose step ran.
    pub tick: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default)]
    pub last_tick: Option<LastTick>,
    #[serde(default)]
    pub consecutive_failures: u32,
    /// Ticks in a row whose step left the worktree unchanged.
    #[serde(default)]
    pub unchanged_ticks: u32,
    #[serde(default)]
    pub pending_approvals: Vec<Approval>,
    /// The metrics the step reported on its last run.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Running sums of every metric.
    #[serde(default)]
    pub totals: BTreeMap<String, f64>,
    #[serde(default)]
    pub in_flight: Option<InFlight>,
    #[serde(default)]
    pub worktree: Option<Worktree>,
}

impl State {
    /// The state of a loop that was just made.
    pub fn new(now: Timestamp) -> State {
        State {
            schema: SCHEMA,
            version: 0,
            status: Status::Active,
            status_reason: None,
            tick: 0,
            created_at: now,
            updated_at: now,
            last_tick: None,
            consecutive_failures: 0,
            unchanged_ticks: 0,
            pending_approvals: Vec::new(),
            metrics: BTreeMap::new(),
            totals: BTreeMap::new(),
            in_flight: None,
            worktree: None,
        }
    }

    /// Sets the status and its reason together.
    pub fn set_status(&mut self, status: Status, reason: Option<String>) {
        self.status = status;
        self.status_reason = reason;
    }
}
