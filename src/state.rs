//! The loop's state (`.state.loop`): its typed shape and the pure transitions
//! that commands apply to it. Reading and writing files is `store`'s job.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::domain::{Approval, Decision};

/// The `schema` number this build reads and writes.
pub const SCHEMA: u32 = 1;

/// The most approvals a loop keeps waiting, so its state stays small.
pub(crate) const MAX_PENDING_APPROVALS: usize = 1000;

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
    pub(crate) fn is_runnable(self) -> bool {
        matches!(self, Status::Active | Status::AwaitingApproval)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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

/// How a process ended, in the words every view uses: `exited 0 in 12ms`,
/// `killed by SIGKILL after 3s`, `timed out after 30m`.
impl std::fmt::Display for ProcessOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let took = crate::duration::format(std::time::Duration::from_millis(self.duration_ms));
        match (self.timed_out, self.exit_code, self.signal) {
            (true, ..) => write!(f, "timed out after {took}"),
            (false, Some(code), _) => write!(f, "exited {code} in {took}"),
            #[cfg(unix)]
            (false, None, Some(sig)) => match nix::sys::signal::Signal::try_from(sig) {
                Ok(name) => write!(f, "killed by {name} after {took}"),
                Err(_) => write!(f, "killed by signal {sig} after {took}"),
            },
            // Windows has no signals: a step ended with its job is
            // recorded as SIGKILL would be on Unix (9).
            #[cfg(windows)]
            (false, None, Some(9)) => write!(f, "killed (its job terminated) after {took}"),
            #[cfg(windows)]
            (false, None, Some(sig)) => write!(f, "killed by signal {sig} after {took}"),
            (false, None, None) => write!(f, "ended without a status after {took}"),
        }
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
    /// The host that ran it: its output is in `runs/<number>/` there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// With a worktree: its branch, and its HEAD before and after the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<Head>,
    /// Who cancelled it (`automaton cancel`), and why, when someone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<Cancellation>,
}

/// Who cancelled a tick, and the reason they gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancellation {
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `ann`, or `ann: the reason`.
impl std::fmt::Display for Cancellation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.by)?;
        match &self.reason {
            Some(r) => write!(f, ": {r}"),
            None => Ok(()),
        }
    }
}

/// A worktree's branch and the commit checked out before and after a step
/// (none on a branch with no commit yet, or when git could not say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub branch: String,
    #[serde(default)]
    pub before: Option<String>,
    #[serde(default)]
    pub after: Option<String>,
}

/// A gate that asked for the approval an await waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    /// As loop.toml names it.
    pub gate: String,
    /// The version the gate says it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub reason: String,
}

/// One wait for approval, from the moment a gate asked until approvals
/// release it or it ends: what approvals are given for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Await {
    /// `aw-<version>`: the state version that opened it.
    pub id: String,
    pub since: Timestamp,
    /// The tick that asked.
    pub tick: u64,
    #[serde(default)]
    pub gates: Vec<Asked>,
    /// The worktree's HEAD when it opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The digest of the worktree's whole snapshot (HEAD, uncommitted
    /// changes, untracked files) when it opened, with `bind = "commit"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// Where the worktree stood when an await opened or an approval was
/// given: its HEAD, and with `bind = "commit"` the digest of its whole
/// snapshot ([`crate::worktree::Snapshot::digest`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct At {
    pub head: Option<String>,
    pub snapshot: Option<String>,
}

impl At {
    /// At HEAD `head`, its snapshot not taken.
    pub fn head(head: Option<String>) -> At {
        At { head, snapshot: None }
    }
}

/// Approvals [`State::void_other_worktrees`] voided, by why.
#[derive(Debug, Default)]
pub struct Voided {
    /// Given on another commit.
    pub new_commit: Vec<Approval>,
    /// Given on this commit, but the worktree changed since.
    pub worktree_changed: Vec<Approval>,
}

/// Set just before the step starts and cleared when the tick's state is
/// written: a later tick that finds it knows the runner died mid-step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub tick: u64,
    pub pid: u32,
    pub host: String,
    pub started_at: Timestamp,
    /// The process group the step runs in (made before this record is
    /// written, so `cancel` can signal it), when it could be made then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<i32>,
    /// When the group's leader started: what proves to `cancel` that the
    /// group is still the step's, not another that took its id. A record
    /// without it (an older build's, or a system without `/proc`) proves
    /// nothing, and `cancel` signals nothing on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_start: Option<ProcessStart>,
}

/// When a process started, as the kernel counts it: clock ticks since
/// boot (field 22 of `/proc/<pid>/stat`), and which boot (the kernel's
/// boot id), so that a process that took its id later, or on another
/// boot, is told from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStart {
    pub ticks: u64,
    pub boot: String,
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
    /// The await approvals are given for now, if one is open.
    #[serde(default)]
    pub awaiting: Option<Await>,
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
    /// The gate that failed (could not load, trapped, timed out, refused)
    /// in the last tick whose gates ran, whatever its `on_error` made of
    /// it; cleared by a tick whose gates all answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_error: Option<GateFailure>,
    /// The shadow gates (as loop.toml writes them) that have disagreed with
    /// the live side since they were added or last promoted: the first
    /// disagreement of each is notified (`[notify] on = ["shadow"]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadows_disagreed: Vec<String>,
    /// The config last recorded (its files' sha256 and loop.toml's text),
    /// which the next change is told against; and a change to the rules
    /// that awaits an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_config: Option<crate::rules::Recorded>,
    /// Per gate name, the highest signed version the loop ran (or the one
    /// an operator allowed a rollback to): an older signed build is
    /// refused (docs/writing-gates.md, "Signing a gate").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signed_versions: BTreeMap<String, String>,
}

/// A gate's failure as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateFailure {
    /// The gate as loop.toml names it.
    pub gate: String,
    pub error: String,
    /// When it first failed so (the same gate, the same error).
    pub since: Timestamp,
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
            awaiting: None,
            metrics: BTreeMap::new(),
            totals: BTreeMap::new(),
            in_flight: None,
            worktree: None,
            gate_error: None,
            shadows_disagreed: Vec::new(),
            recorded_config: None,
            signed_versions: BTreeMap::new(),
        }
    }

    /// Sets the status and its reason together.
    pub(crate) fn set_status(&mut self, status: Status, reason: Option<String>) {
        self.status = status;
        self.status_reason = reason;
    }
}

/// When a gate decision is applied to a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// A tick's before-step gates decided; approvals were looked at first
    /// (an await they release is applied as a proceed).
    BeforeStep,
    /// A tick's after-step gates decided; the step has run.
    AfterStep,
    /// `check-gate --apply` records a before-step decision without a tick:
    /// no step runs, and a paused loop stays paused.
    Recorded,
}

impl State {
    /// The one mapping from a gate decision to the loop's status. Returns
    /// the outcome the decision gives the tick when it decides it (a halt,
    /// a completion; before the step also a skip or an await).
    pub fn apply(&mut self, decision: &Decision, moment: Moment) -> Option<Outcome> {
        let reason = || Some(decision.reason().to_owned());
        match decision {
            Decision::Halt(_) => {
                self.set_status(Status::Halted, reason());
                Some(Outcome::Halted)
            }
            Decision::Complete(_) => {
                self.set_status(Status::Completed, reason());
                Some(Outcome::Completed)
            }
            Decision::AwaitApproval(_) => {
                if moment != Moment::Recorded || self.status.is_runnable() {
                    self.set_status(Status::AwaitingApproval, reason());
                }
                (moment == Moment::BeforeStep).then_some(Outcome::AwaitingApproval)
            }
            Decision::Skip(_) | Decision::Proceed => {
                // A skip or a proceed before the step ends an await; after
                // the step it changes nothing, the step already ran.
                if moment != Moment::AfterStep && self.status == Status::AwaitingApproval {
                    self.set_status(Status::Active, None);
                }
                let skipped = matches!(decision, Decision::Skip(_)) && moment == Moment::BeforeStep;
                skipped.then_some(Outcome::Skipped)
            }
        }
    }
}

/// What [`State::settle_await`] did.
#[derive(Debug, Default)]
pub struct Settled {
    pub opened: Option<Await>,
    /// The await that ended, and its approvals, which no longer count.
    pub closed: Option<(Await, Vec<Approval>)>,
}

/// An operator's request the loop's state does not allow, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl State {
    /// `pause`: active, awaiting or already paused loops pause.
    pub fn pause(&mut self, reason: Option<String>) -> Result<(), Refusal> {
        match self.status {
            Status::Halted | Status::Completed => Err(Refusal(format!(
                "it is {}; `resume` it to make it active again",
                self.status
            ))),
            _ => {
                self.set_status(Status::Paused, reason);
                Ok(())
            }
        }
    }

    /// `resume`: any loop becomes active, and its failure count and its
    /// count of unchanged ticks start over (so a failure or no-progress
    /// gate does not halt it again at once). Returns the status it left.
    pub fn resume(&mut self) -> Status {
        let from = self.status;
        self.set_status(Status::Active, None);
        self.consecutive_failures = 0;
        self.unchanged_ticks = 0;
        from
    }

    /// `resume --reset-budget`: the metric totals start over. Returns what
    /// they were.
    pub(crate) fn reset_totals(&mut self) -> BTreeMap<String, f64> {
        std::mem::take(&mut self.totals)
    }

    /// Keeps the open await in step with the status a decision left: a
    /// loop that started awaiting opens one (for `gates`, on `head`), and
    /// one that stopped (proceeding, halted, completed; a pause keeps it)
    /// closes its own.
    pub(crate) fn settle_await(
        &mut self,
        tick: u64,
        gates: impl FnOnce() -> Vec<Asked>,
        at: At,
        now: Timestamp,
    ) -> Settled {
        match self.status {
            Status::AwaitingApproval => Settled {
                opened: self.open_await(tick, gates(), at, now),
                closed: None,
            },
            Status::Paused => Settled::default(),
            _ => Settled {
                opened: None,
                closed: self.close_await(),
            },
        }
    }

    /// `reject`: halts the loop and drops its pending approvals. Returns
    /// the await it rejected (if one was open) and the approvals dropped.
    pub fn reject(&mut self, by: &str, reason: Option<&str>) -> (Option<Await>, Vec<Approval>) {
        let why = match reason {
            Some(r) => format!("rejected by {by}: {r}"),
            None => format!("rejected by {by}"),
        };
        self.set_status(Status::Halted, Some(crate::bounds::text(why)));
        (self.awaiting.take(), std::mem::take(&mut self.pending_approvals))
    }

    /// Opens an await, when none is open, for the gates that asked; the
    /// approvals given for the next await are now this one's. Returns it
    /// when it opened. Its id names the version the next commit makes.
    pub(crate) fn open_await(
        &mut self,
        tick: u64,
        gates: Vec<Asked>,
        at: At,
        now: Timestamp,
    ) -> Option<Await> {
        if self.awaiting.is_some() {
            return None;
        }
        let id = format!("aw-{}", self.version + 1);
        for a in &mut self.pending_approvals {
            if a.await_id.is_none() {
                a.await_id = Some(id.clone());
            }
        }
        let opened = Await {
            id,
            since: now,
            tick,
            gates,
            head: at.head,
            snapshot: at.snapshot,
        };
        self.awaiting = Some(opened.clone());
        Some(opened)
    }

    /// Ends the open await: returns it with the approvals that were given
    /// for it, which no longer count.
    pub(crate) fn close_await(&mut self) -> Option<(Await, Vec<Approval>)> {
        let closed = self.awaiting.take()?;
        let (theirs, rest) = std::mem::take(&mut self.pending_approvals)
            .into_iter()
            .partition(|a| a.await_id.as_deref() == Some(closed.id.as_str()));
        self.pending_approvals = rest;
        Some((closed, theirs))
    }

    /// `approve`: records an approval by `by` for the await `target` names,
    /// if the rules allow it: one person counts once for an await (and once
    /// among the approvals given ahead). The id is unique within the loop
    /// (it names the state version that added it).
    pub fn approve(
        &mut self,
        by: &str,
        note: Option<String>,
        now: Timestamp,
        target: Option<&str>,
        at: At,
    ) -> Result<Approval, Refusal> {
        if matches!(self.status, Status::Halted | Status::Completed) {
            return Err(Refusal(format!(
                "it is {}; an approval would never be used (`resume` it first)",
                self.status
            )));
        }
        if let Some(earlier) = self
            .pending_approvals
            .iter()
            .find(|a| a.by == by && a.await_id.as_deref() == target)
        {
            let what = match target {
                Some(id) => format!("await {id}"),
                None => "the next await".to_owned(),
            };
            return Err(Refusal(format!(
                "{by} has approved {what} already ({}); one person counts once",
                earlier.id
            )));
        }
        if self.pending_approvals.len() >= MAX_PENDING_APPROVALS {
            return Err(Refusal(format!(
                "it already has {MAX_PENDING_APPROVALS} pending approvals; ticks use them, or `reject` drops them"
            )));
        }
        let approval = Approval {
            id: format!("ap-{}", self.version + 1),
            by: by.to_owned(),
            at: now,
            note,
            await_id: target.map(str::to_owned),
            head: at.head,
            snapshot: at.snapshot,
        };
        self.pending_approvals.push(approval.clone());
        Ok(approval)
    }

    /// Drops approvals older than `expires`; returns them, for the record.
    pub(crate) fn drop_expired(
        &mut self,
        now: Timestamp,
        expires: Option<std::time::Duration>,
    ) -> Vec<Approval> {
        let Some(expires) = expires else {
            return Vec::new();
        };
        let (stale, fresh) = std::mem::take(&mut self.pending_approvals)
            .into_iter()
            .partition(|a| now.duration_since(a.at).unsigned_abs() > expires);
        self.pending_approvals = fresh;
        stale
    }

    /// Drops the open await's approvals given on another worktree than
    /// `at` (`bind = "commit"`): on another commit, or on this one with
    /// other uncommitted changes or untracked files (an approval that
    /// records no snapshot, given by an older build, is bound to its
    /// commit alone). Returns them by why, for the record.
    pub(crate) fn void_other_worktrees(&mut self, at: &At) -> Voided {
        let mut voided = Voided::default();
        let Some(open) = self.awaiting.as_ref().map(|a| a.id.clone()) else {
            return voided;
        };
        for a in std::mem::take(&mut self.pending_approvals) {
            if a.await_id.as_deref() != Some(open.as_str()) {
                self.pending_approvals.push(a);
            } else if a.head != at.head {
                voided.new_commit.push(a);
            } else if a.snapshot.is_some() && a.snapshot != at.snapshot {
                voided.worktree_changed.push(a);
            } else {
                self.pending_approvals.push(a);
            }
        }
        voided
    }

    /// Releases the open await if `required` distinct people approved it:
    /// returns the approvals used, and the await ends (its other approvals
    /// are returned by [`State::close_await`]'s caller). None, and nothing
    /// changed, when there are not enough.
    pub fn release(&mut self, required: u32) -> Option<Vec<Approval>> {
        let open = self.awaiting.as_ref()?.id.clone();
        let required = required.max(1) as usize;
        let mut chosen: Vec<usize> = Vec::new();
        for (i, a) in self.pending_approvals.iter().enumerate() {
            if chosen.len() == required {
                break;
            }
            if a.await_id.as_deref() == Some(open.as_str())
                && !chosen.iter().any(|&c| self.pending_approvals[c].by == a.by)
            {
                chosen.push(i);
            }
        }
        if chosen.len() < required {
            return None;
        }
        let mut used = Vec::with_capacity(required);
        for i in chosen.into_iter().rev() {
            used.push(self.pending_approvals.remove(i));
        }
        used.reverse();
        Some(used)
    }

    /// Distinct people who approved the await `target` names (none: the
    /// next await).
    pub(crate) fn approvers_of(&self, target: Option<&str>) -> usize {
        let mut by: Vec<&str> = self
            .pending_approvals
            .iter()
            .filter(|a| a.await_id.as_deref() == target)
            .map(|a| a.by.as_str())
            .collect();
        by.sort_unstable();
        by.dedup();
        by.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn state() -> State {
        State::new(Timestamp::UNIX_EPOCH)
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn asked() -> Vec<Asked> {
        vec![Asked {
            gate: "stock:approve-every".into(),
            version: None,
            reason: "every 5".into(),
        }]
    }

    #[test]
    fn approvals_expire_at_either_end_of_time() {
        let mut s = state();
        s.approve("ann", None, Timestamp::MIN, None, At::default())
            .unwrap();
        s.approve("bob", None, Timestamp::MAX, None, At::default())
            .unwrap();
        let gone = s.drop_expired(Timestamp::MAX, Some(Duration::from_mins(1)));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].by, "ann");
        assert_eq!(s.drop_expired(Timestamp::MIN, Some(Duration::MAX)).len(), 0);
    }
    #[test]
    fn pause_and_resume() {
        let mut s = state();
        s.consecutive_failures = 3;
        s.unchanged_ticks = 4;
        s.pause(Some("lunch".into())).unwrap();
        assert_eq!(
            (s.status, s.status_reason.as_deref()),
            (Status::Paused, Some("lunch"))
        );
        assert_eq!(s.resume(), Status::Paused);
        assert_eq!((s.status, s.status_reason.as_deref()), (Status::Active, None));
        assert_eq!((s.consecutive_failures, s.unchanged_ticks), (0, 0));
    }

    #[test]
    fn halted_loops_are_not_paused_or_approved() {
        let mut s = state();
        let _ = s.reject("ann", Some("wrong approach"));
        assert_eq!(s.status, Status::Halted);
        assert_eq!(
            s.status_reason.as_deref(),
            Some("rejected by ann: wrong approach")
        );
        assert!(s.pause(None).is_err());
        assert!(s.approve("bob", None, at(1), None, At::default()).is_err());
        assert_eq!(s.resume(), Status::Halted);
    }

    #[test]
    fn one_person_counts_once_for_an_await() {
        let mut s = state();
        s.status = Status::AwaitingApproval;
        let id = s.open_await(1, asked(), At::default(), at(1)).unwrap().id;
        s.approve("ann", None, at(2), Some(&id), At::default()).unwrap();
        let twice = s
            .approve("ann", None, at(3), Some(&id), At::default())
            .unwrap_err();
        assert!(twice.0.contains("one person counts once"), "{}", twice.0);
        assert_eq!(s.release(2), None, "one person is not two approvers");
        s.approve("ann", None, at(4), None, At::default()).unwrap();
        assert_eq!(
            s.release(2),
            None,
            "an approval for the next await does not count now"
        );
        s.approve("bob", None, at(5), Some(&id), At::default()).unwrap();
        let used = s.release(2).unwrap();
        assert_eq!(
            used.iter().map(|a| a.by.as_str()).collect::<Vec<_>>(),
            ["ann", "bob"]
        );
        let (closed, left) = s.close_await().unwrap();
        assert_eq!((closed.id, left.len()), (id, 0));
        assert_eq!(s.pending_approvals.len(), 1, "the one for the next await stays");
        let next = s.open_await(9, asked(), At::default(), at(9)).unwrap().id;
        assert_eq!(s.pending_approvals[0].await_id.as_deref(), Some(next.as_str()));
    }

    #[test]
    fn a_new_commit_voids_approvals_given_on_the_old_one() {
        let mut s = state();
        let c1 = At::head(Some("c1".into()));
        let id = s.open_await(1, asked(), c1.clone(), at(1)).unwrap().id;
        s.approve("ann", None, at(2), Some(&id), c1.clone()).unwrap();
        assert!(s.void_other_worktrees(&c1).new_commit.is_empty());
        let void = s.void_other_worktrees(&At::head(Some("c2".into())));
        assert_eq!(void.new_commit.len(), 1);
        assert!(s.pending_approvals.is_empty());
    }

    #[test]
    fn a_changed_worktree_voids_approvals_given_on_its_snapshot() {
        let mut s = state();
        let on = |snapshot: &str| At {
            head: Some("c1".into()),
            snapshot: Some(snapshot.into()),
        };
        let id = s.open_await(1, asked(), on("s1"), at(1)).unwrap().id;
        s.approve("ann", None, at(2), Some(&id), on("s1")).unwrap();
        s.approve("bob", None, at(2), Some(&id), At::head(Some("c1".into())))
            .unwrap();
        assert!(s.void_other_worktrees(&on("s1")).worktree_changed.is_empty());
        let void = s.void_other_worktrees(&on("s2"));
        assert_eq!(void.worktree_changed.len(), 1);
        assert_eq!(void.worktree_changed[0].by, "ann");
        assert!(void.new_commit.is_empty());
        assert_eq!(
            s.pending_approvals.len(),
            1,
            "one without a snapshot binds its commit alone"
        );
    }

    #[test]
    fn decisions_map_to_statuses_the_same_way_everywhere() {
        let halt = Decision::Halt("budget".into());
        let wait = Decision::AwaitApproval("five ticks".into());
        let skip = Decision::Skip("night".into());
        let mut s = state();
        assert_eq!(
            s.apply(&wait, Moment::BeforeStep),
            Some(Outcome::AwaitingApproval)
        );
        assert_eq!(
            (s.status, s.status_reason.as_deref()),
            (Status::AwaitingApproval, Some("five ticks"))
        );
        assert_eq!(
            s.apply(&skip, Moment::AfterStep),
            None,
            "after the step a skip changes nothing"
        );
        assert_eq!(s.status, Status::AwaitingApproval);
        assert_eq!(s.apply(&Decision::Proceed, Moment::BeforeStep), None);
        assert_eq!((s.status, s.status_reason.as_deref()), (Status::Active, None));
        assert_eq!(s.apply(&wait, Moment::AfterStep), None, "the step already ran");
        assert_eq!(s.status, Status::AwaitingApproval);
        assert_eq!(s.apply(&skip, Moment::BeforeStep), Some(Outcome::Skipped));
        assert_eq!(s.status, Status::Active, "a skip ends an await");
        s.pause(None).unwrap();
        assert_eq!(s.apply(&wait, Moment::Recorded), None);
        assert_eq!(
            s.status,
            Status::Paused,
            "a recorded await leaves a paused loop paused"
        );
        assert_eq!(s.apply(&halt, Moment::Recorded), Some(Outcome::Halted));
        assert_eq!(
            (s.status, s.status_reason.as_deref()),
            (Status::Halted, Some("budget"))
        );
    }

    #[test]
    fn pending_approvals_are_bounded() {
        let mut s = state();
        for n in 0..MAX_PENDING_APPROVALS {
            s.approve(&format!("p{n}"), None, at(1), None, At::default())
                .unwrap();
        }
        let err = s.approve("ann", None, at(1), None, At::default()).unwrap_err();
        assert!(err.0.contains("1000 pending approvals"), "{}", err.0);
    }

    #[test]
    fn approval_ids_follow_the_version() {
        let mut s = state();
        s.version = 41;
        assert_eq!(
            s.approve("a", None, at(1), None, At::default()).unwrap().id,
            "ap-42"
        );
        assert_eq!(
            s.open_await(1, asked(), At::default(), at(1)).unwrap().id,
            "aw-42"
        );
    }

    #[test]
    fn expiry_drops_only_stale_approvals() {
        let mut s = state();
        s.approve("old", None, at(0), None, At::default()).unwrap();
        s.approve("new", None, at(90), None, At::default()).unwrap();
        let stale = s.drop_expired(at(100), Some(Duration::from_mins(1)));
        assert_eq!(stale.iter().map(|a| a.by.as_str()).collect::<Vec<_>>(), ["old"]);
        assert_eq!(s.pending_approvals.len(), 1);
        assert!(s.drop_expired(at(10_000), None).is_empty());
    }
}
