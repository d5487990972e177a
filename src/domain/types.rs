//! The gate vocabulary the rest of the program speaks: phases, decisions,
//! error policies, limits and the evaluation context. Nothing here knows about
//! wasmtime; the gate host maps these onto the WIT types in `wit/gate.wit`.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// An operator's approval, waiting to be used by a tick: gates see the
/// pending ones in their context, and the loop's state keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub by: String,
    pub at: Timestamp,
    #[serde(default)]
    pub note: Option<String>,
    /// The await it counts for; none for the next await that opens (an
    /// approval given `--ahead`, or by an older build).
    #[serde(rename = "await", default, skip_serializing_if = "Option::is_none")]
    pub await_id: Option<String>,
    /// The worktree's HEAD when it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// With `bind = "commit"`: the digest of the worktree's whole snapshot
    /// (HEAD, uncommitted changes, untracked files) when it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// When a gate is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    BeforeStep,
    AfterStep,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::BeforeStep => "before-step",
            Phase::AfterStep => "after-step",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A gate's answer. Serialised as `{"decision": "halt", "reason": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", content = "reason", rename_all = "kebab-case")]
pub enum Decision {
    Proceed,
    Skip(String),
    AwaitApproval(String),
    Halt(String),
    Complete(String),
}

impl Decision {
    /// The rank used to combine decisions: the strongest wins.
    pub(crate) fn strength(&self) -> u8 {
        match self {
            Decision::Proceed => 0,
            Decision::Skip(_) => 1,
            Decision::AwaitApproval(_) => 2,
            Decision::Complete(_) => 3,
            Decision::Halt(_) => 4,
        }
    }

    /// The decision's name as it appears in history and `--json`.
    pub fn name(&self) -> &'static str {
        match self {
            Decision::Proceed => "proceed",
            Decision::Skip(_) => "skip",
            Decision::AwaitApproval(_) => "await-approval",
            Decision::Halt(_) => "halt",
            Decision::Complete(_) => "complete",
        }
    }

    /// The reason the gate gave; empty for `proceed`.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Proceed => "",
            Decision::Skip(r) | Decision::AwaitApproval(r) | Decision::Halt(r) | Decision::Complete(r) => r,
        }
    }

    /// Combines the decisions of one phase: the strongest wins, and among
    /// equals the first (in config order) gives the reason. No decisions at
    /// all means proceed.
    pub(crate) fn combine<'a>(decisions: impl IntoIterator<Item = &'a Decision>) -> Decision {
        let mut best = Decision::Proceed;
        for d in decisions {
            if d.strength() > best.strength() {
                best = d.clone();
            }
        }
        best
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Proceed => f.write_str("proceed"),
            other => write!(f, "{}: {}", other.name(), other.reason()),
        }
    }
}

/// What a gate error turns into (`on_error` in loop.toml).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Fail closed: the loop halts with the gate's error as the reason.
    #[default]
    Halt,
    /// The tick is skipped; the loop stays active.
    Skip,
    /// The error is recorded and the gate counts as `proceed`.
    Proceed,
}

/// Whether a gate's decision counts (`mode` in loop.toml): `enforce`, or
/// `shadow`, evaluated beside the live gates and recorded, never enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    #[default]
    Enforce,
    Shadow,
}

/// Where a gate's component comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateSource {
    /// A gate shipped inside the binary, by name (`approve-every`).
    Stock(String),
    /// A component file; relative paths are resolved against the loop dir
    /// before they get here. `sha256` (lower-case hex) pins its content.
    File { path: PathBuf, sha256: Option<String> },
}

impl fmt::Display for GateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateSource::Stock(name) => write!(f, "stock:{name}"),
            GateSource::File { path, .. } => write!(f, "{}", path.display()),
        }
    }
}

/// Per-evaluation bounds. The timeout clock starts when the call starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    pub timeout: Duration,
    /// Bytes of linear memory (summed over the instance's memories).
    pub memory: u64,
}

impl Limits {
    pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
    pub(crate) const DEFAULT_MEMORY: u64 = 128 * 1024 * 1024;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Self::DEFAULT_TIMEOUT,
            memory: Self::DEFAULT_MEMORY,
        }
    }
}

/// What happened when a tick's step ran; mirrors `run-result` in the WIT.
/// Missing fields take their defaults, so a hand-written context for
/// `gate test` may give only the fields a gate reads; an unknown one (a typo)
/// is an error naming it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunResult {
    pub tick: u64,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub verifier_passed: Option<bool>,
    pub worktree_changed: Option<bool>,
    pub ended_at: Timestamp,
}

impl Default for RunResult {
    fn default() -> Self {
        RunResult {
            tick: 0,
            exit_code: Some(0),
            duration_ms: 0,
            timed_out: false,
            verifier_passed: None,
            worktree_changed: None,
            ended_at: Timestamp::UNIX_EPOCH,
        }
    }
}

/// The worktree's branch and its HEAD before and after the last tick's
/// step; mirrors `commits` in the WIT (new in 0.2.0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Commits {
    pub branch: String,
    pub head_before: Option<String>,
    pub head_after: Option<String>,
}

/// A gate that asked for approval, and why; mirrors `asked` in the WIT.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Asker {
    pub gate: String,
    pub version: Option<String>,
    pub reason: String,
}

/// The wait for approval pending now, with the approvals given for it;
/// mirrors `pending-await` in the WIT (new in 0.2.0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PendingAwait {
    pub id: String,
    pub tick: u64,
    pub asked: Vec<Asker>,
    pub since: Timestamp,
    pub head: Option<String>,
    pub approvals: Vec<Approval>,
}

impl Default for PendingAwait {
    fn default() -> Self {
        PendingAwait {
            id: String::new(),
            tick: 0,
            asked: Vec::new(),
            since: Timestamp::UNIX_EPOCH,
            head: None,
            approvals: Vec::new(),
        }
    }
}

/// Everything a gate sees; mirrors `context` in the WIT. It is recorded in
/// history with every evaluation, so `gate replay` can evaluate it again, and
/// `gate test --context FILE` reads it (missing fields take their defaults;
/// an unknown one, a typo, is an error naming it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Context {
    pub loop_name: String,
    pub phase: Phase,
    pub tick: u64,
    pub now: Timestamp,
    pub last_run: Option<RunResult>,
    pub consecutive_failures: u32,
    pub unchanged_ticks: u32,
    pub pending_approvals: Vec<Approval>,
    pub params: serde_json::Value,
    pub state: serde_json::Value,
    pub metrics: serde_json::Value,
    pub totals: serde_json::Value,
    /// Seen by gates built against 0.2.0 on; a gate of 0.1.0 is called
    /// without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commits: Option<Commits>,
    /// As `commits`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_await: Option<PendingAwait>,
    /// The runs and windows the gate asked for in `describe`; seen by gates
    /// built against 0.3.0 on (recorded only when it asked for any).
    #[serde(skip_serializing_if = "GateHistory::is_empty")]
    pub history: GateHistory,
    /// The loop's spend budgets, where they stand; seen by gates built
    /// against 0.3.0 on.
    pub budgets: Vec<GateBudget>,
}

/// A budget the loop belongs to, as a gate sees it (`budget` in the WIT,
/// new in 0.3.0): what its current window has spent and holds reserved
/// against its cap, and when the window ends (`None`: a tick window).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GateBudget {
    pub name: String,
    pub metric: String,
    pub window: String,
    pub spent: f64,
    pub reserved: f64,
    pub cap: f64,
    pub window_end_ms: Option<i64>,
}

/// What of the loop's history a gate asks for; mirrors `history-request`
/// in the WIT (new in 0.3.0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryRequest {
    /// How many of the last runs.
    pub runs: u32,
    /// The windows to sum the metrics over, in milliseconds.
    pub windows_ms: Vec<u64>,
}

impl HistoryRequest {
    /// The most runs the host gives.
    pub const MAX_RUNS: u32 = 1000;
    /// The most windows the host sums over.
    pub const MAX_WINDOWS: usize = 16;

    /// Whether it asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.runs == 0 && self.windows_ms.is_empty()
    }

    /// The request within the host's bounds: at most [`Self::MAX_RUNS`]
    /// runs and the first [`Self::MAX_WINDOWS`] windows.
    #[must_use]
    pub fn bounded(&self) -> HistoryRequest {
        HistoryRequest {
            runs: self.runs.min(Self::MAX_RUNS),
            windows_ms: self.windows_ms.iter().copied().take(Self::MAX_WINDOWS).collect(),
        }
    }
}

/// One past run (a tick whose step ran); mirrors `past-run` in the WIT.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PastRun {
    pub tick: u64,
    pub ended_at_ms: u64,
    /// False when the step or verifier failed.
    pub ok: bool,
    pub metrics: std::collections::BTreeMap<String, f64>,
}

/// Each metric's sum over one window; mirrors `window-sums` in the WIT.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WindowSums {
    pub window_ms: u64,
    pub runs: u32,
    pub failures: u32,
    pub sums: std::collections::BTreeMap<String, f64>,
}

/// What a gate asked to see of the loop's history; mirrors `history` in
/// the WIT (new in 0.3.0).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GateHistory {
    /// The last runs, oldest first.
    pub runs: Vec<PastRun>,
    /// One entry a window asked for, in the order asked.
    pub windows: Vec<WindowSums>,
}

impl GateHistory {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.windows.is_empty()
    }
}

impl Default for Context {
    fn default() -> Self {
        Context {
            loop_name: "example".to_owned(),
            phase: Phase::BeforeStep,
            tick: 0,
            now: Timestamp::try_from(std::time::SystemTime::now()).unwrap_or(Timestamp::MAX),
            last_run: None,
            consecutive_failures: 0,
            unchanged_ticks: 0,
            pending_approvals: Vec::new(),
            params: serde_json::json!({}),
            state: serde_json::json!({}),
            metrics: serde_json::json!({}),
            totals: serde_json::json!({}),
            commits: None,
            pending_await: None,
            history: GateHistory::default(),
            budgets: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strongest_decision_wins() {
        let ds = [
            Decision::Skip("a".into()),
            Decision::Proceed,
            Decision::Halt("b".into()),
            Decision::AwaitApproval("c".into()),
            Decision::Complete("d".into()),
        ];
        assert_eq!(Decision::combine(&ds), Decision::Halt("b".into()));
        assert_eq!(
            Decision::combine(&ds[..2]),
            Decision::Skip("a".into()),
            "skip beats proceed"
        );
        assert_eq!(
            Decision::combine(&[ds[3].clone(), ds[4].clone()]),
            Decision::Complete("d".into())
        );
        assert_eq!(Decision::combine(&[]), Decision::Proceed);
    }

    #[test]
    fn first_of_equals_gives_the_reason() {
        let ds = [Decision::Skip("first".into()), Decision::Skip("second".into())];
        assert_eq!(Decision::combine(&ds), Decision::Skip("first".into()));
    }

    #[test]
    fn decision_json_shape() {
        let j = serde_json::to_string(&Decision::Halt("x".into())).unwrap();
        assert_eq!(j, r#"{"decision":"halt","reason":"x"}"#);
        let p: Decision = serde_json::from_str(r#"{"decision":"proceed"}"#).unwrap();
        assert_eq!(p, Decision::Proceed);
    }
}
