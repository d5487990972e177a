//! The loop's events: what each change to a loop did, committed with the
//! state it produced (the store writes and reads them; `history.jsonl` is
//! one JSON object a line).

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::access::{Action, Role};
use crate::domain::{Context, ShadowVerdict, Verdict};
use crate::state::{Await, Head, Outcome, ProcessOutcome, Status};
use crate::who::Actor;

/// One line of history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The state version this event was committed with (0 in lines written
    /// before versions were recorded).
    #[serde(default)]
    pub v: u64,
    pub at: Timestamp,
    /// Who committed it, and how they were identified (none in lines
    /// written before actors were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Event {
    pub fn now(kind: EventKind, by: &Actor) -> Event {
        Event::stamped(kind, 0, crate::clock::now(), by)
    }

    /// An event of the commit of `version`, made at `at` by `by`: the
    /// actor the commit was given, never one found on the way.
    pub fn stamped(kind: EventKind, version: u64, at: Timestamp, by: &Actor) -> Event {
        Event {
            v: version,
            at,
            actor: Some(by.clone()),
            kind,
        }
    }

    /// The event as one line of JSON, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("events serialise");
        line.push(b'\n');
        line
    }
}

/// What happened. Serialised with a `kind` field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EventKind {
    Created {
        by: String,
    },
    Paused {
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    Resumed {
        by: String,
        from: Status,
    },
    Approved {
        by: String,
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// The await it was given for; none for the next await (`--ahead`).
        #[serde(rename = "await", default, skip_serializing_if = "Option::is_none")]
        await_id: Option<String>,
        /// The worktree's HEAD it was given on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head: Option<String>,
        /// With `bind = "commit"`: the digest of the worktree's snapshot
        /// it was given on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
    },
    ApprovalExpired {
        id: String,
        by: String,
        approved_at: Timestamp,
    },
    Rejected {
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The await it rejected; none for `reject --halt` of a loop that
        /// was not awaiting.
        #[serde(rename = "await", default, skip_serializing_if = "Option::is_none")]
        await_id: Option<String>,
    },
    /// A command its actor does not hold the role for; nothing else changed.
    Refused {
        by: String,
        action: Action,
        role: Role,
        holders: Vec<String>,
        /// The same person's refusals on the loop since the last one
        /// recorded that were counted, not recorded (at most one a minute
        /// is, where a server keeps count).
        #[serde(default, skip_serializing_if = "is_zero")]
        unrecorded: u32,
    },
    /// The loop started awaiting approval: the await, the gates that asked
    /// and the worktree's HEAD.
    Awaiting {
        #[serde(flatten)]
        awaiting: Await,
    },
    /// Approvals that no longer count, and why.
    ApprovalsDropped {
        #[serde(rename = "await", default, skip_serializing_if = "Option::is_none")]
        await_id: Option<String>,
        ids: Vec<String>,
        by: Vec<String>,
        why: Dropped,
        /// With `why = "new-commit"` or `"worktree-changed"`: the HEAD
        /// that voided them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head: Option<String>,
        /// With `why = "worktree-changed"`: the digest of the snapshot
        /// that voided them, and the uncommitted changes and untracked
        /// files it holds (`XY path`, as `git status --short` has them;
        /// at most [`crate::worktree::MAX_DIRTY_LISTED`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dirty: Vec<String>,
    },
    /// `resume --reset-budget` started the metric totals over: what they were.
    TotalsReset {
        by: String,
        totals: std::collections::BTreeMap<String, f64>,
    },
    /// An operator let the loop run an older signed build of a gate: its
    /// rollback floor went from `from` to `to`.
    RollbackAllowed {
        by: String,
        gate: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        to: String,
    },
    /// A tick found the previous one dead mid-way (its `in_flight` marker).
    Crashed {
        tick: u64,
        pid: u32,
        host: String,
        started_at: Timestamp,
    },
    /// One gate's evaluation, with the context it saw (for `gate replay`),
    /// and the shadow gates evaluated beside it.
    Gate {
        tick: u64,
        #[serde(flatten)]
        verdict: Verdict,
        context: Box<Context>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        shadow: Vec<ShadowVerdict>,
    },
    /// Approvals a tick used to release an await.
    ApprovalsUsed {
        tick: u64,
        ids: Vec<String>,
        by: Vec<String>,
        /// The await they released.
        #[serde(rename = "await", default, skip_serializing_if = "Option::is_none")]
        await_id: Option<String>,
        /// With an await for a change to the rules: the sha256 of the
        /// loop.toml they approved.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approved_config: Option<String>,
    },
    /// loop.toml or the root's automaton.toml changed: how, the sha256 of
    /// each before and after, loop.toml's bounded diff, the rules it
    /// touches and whether it awaits an approval.
    ConfigChanged {
        #[serde(flatten)]
        change: crate::rules::ConfigChange,
    },
    /// A tick reserved `amount` in these budgets' accounts before its
    /// step (`approved`: past a cap, a person having approved it).
    BudgetReserved {
        tick: u64,
        amount: f64,
        budgets: Vec<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        approved: bool,
    },
    /// A tick's reservation settled at what its step cost, by account
    /// (`died`: the tick died, and is counted at its reservation).
    BudgetSettled {
        tick: u64,
        reserved: f64,
        costs: std::collections::BTreeMap<String, f64>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        died: bool,
    },
    /// A budget's spend passed its `warn_at` share of the cap.
    BudgetWarning {
        budget: String,
        window: String,
        spent: f64,
        cap: f64,
        warn_at: f64,
    },
    /// A tick's reservation did not fit in a budget: what it did is
    /// `on_cap`.
    BudgetCapped {
        tick: u64,
        budget: String,
        window: String,
        spent: f64,
        reserved: f64,
        cap: f64,
        amount: f64,
        on_cap: crate::budget::OnCap,
    },
    /// `resume --reset-budget` started the loop's own budgets' spend
    /// over: what each had spent.
    BudgetReset {
        by: String,
        budgets: std::collections::BTreeMap<String, f64>,
    },
    /// The step's metrics file could not be read.
    MetricsWarning {
        tick: u64,
        message: String,
    },
    WorktreeCreated {
        path: std::path::PathBuf,
        branch: String,
    },
    /// `gate promote` made a shadow gate live: who, the gate it replaced
    /// and what became of it, and the evidence (its agreeing evaluations,
    /// its disagreements), or that it was forced.
    GatePromoted {
        #[serde(flatten)]
        promotion: Promotion,
    },
    /// `check-gate --apply` recorded a decision without running the step.
    CheckGate {
        by: String,
        decision: crate::domain::Decision,
    },
    /// How a tick ended (busy ticks are not recorded, nor inactive ones
    /// unless they recovered a crash).
    Tick {
        tick: u64,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<ProcessOutcome>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verifier: Option<ProcessOutcome>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worktree_changed: Option<bool>,
        /// The host whose `runs/<tick>/` holds the step's output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        /// The worktree's branch and HEAD before and after the step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head: Option<Head>,
        /// What the step reported (`runs/<tick>/metrics`), as the tick
        /// took it in: kept with the tick, so whoever reads the history
        /// (on another host, or once the run directory is pruned) sums
        /// the same figures. Empty when it reported none (or the tick was
        /// recorded by an older build).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        metrics: BTreeMap<String, f64>,
        /// The sha256 of the loop.toml and of the root's automaton.toml it
        /// ran with (none in lines written before they were recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        config: Option<crate::rules::Hashes>,
        /// How the step ran: confined (by what, at which ABI level,
        /// enforcing what) or unconfined; none when it did not start (or
        /// the tick was recorded by an older build).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confinement: Option<crate::step::confine::Confinement>,
        /// What fired the tick: the daemon, an OS scheduler, a person
        /// (none in lines written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fired_by: Option<crate::fires::FiredBy>,
        /// Who cancelled it (`automaton cancel`), and why, when someone did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancelled: Option<crate::state::Cancellation>,
    },
}

/// What became of the gate a promoted one replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Replaced {
    /// It runs on as a shadow.
    Shadow,
    /// It was removed from loop.toml.
    Removed,
}

/// The promotion made: the `gate-promoted` event's fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Promotion {
    pub by: String,
    pub gate: String,
    /// The live gate it replaces, when it was recorded beside one of its
    /// name; none for a gate that replaces none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<Replaced>,
    /// Its evaluations counted, and those that agreed.
    pub evaluations: usize,
    pub agreed: usize,
    /// The disagreements among them (tick, phase, both decisions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<crate::domain::Disagreement>,
    /// Promoted without enough agreeing evaluations.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
}

/// Why approvals stopped counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dropped {
    /// Their await was released by others: they were not needed.
    Released,
    /// Their await ended without them (the gates stopped asking).
    Ended,
    /// Their await was rejected.
    Rejected,
    /// A commit came after the one they were given on (`bind = "commit"`).
    NewCommit,
    /// The worktree changed since they were given, on the same commit:
    /// uncommitted changes or untracked files differ (`bind = "commit"`).
    WorktreeChanged,
    /// The rules changed while their await was open: a new await asks for
    /// an approval of the change.
    ConfigChanged,
}

/// Every kind's name, as [`EventKind::name`] gives it (what `history
/// --kind` accepts).
pub(crate) const KINDS: &[&str] = &[
    "created",
    "paused",
    "resumed",
    "approved",
    "approval-expired",
    "rejected",
    "refused",
    "awaiting",
    "approvals-dropped",
    "totals-reset",
    "crashed",
    "gate",
    "approvals-used",
    "config-changed",
    "metrics-warning",
    "budget-reserved",
    "budget-settled",
    "budget-warning",
    "budget-capped",
    "budget-reset",
    "worktree-created",
    "gate-promoted",
    "check-gate",
    "tick",
];

impl EventKind {
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Created { .. } => "created",
            EventKind::Paused { .. } => "paused",
            EventKind::Resumed { .. } => "resumed",
            EventKind::Approved { .. } => "approved",
            EventKind::ApprovalExpired { .. } => "approval-expired",
            EventKind::Rejected { .. } => "rejected",
            EventKind::Refused { .. } => "refused",
            EventKind::Awaiting { .. } => "awaiting",
            EventKind::ApprovalsDropped { .. } => "approvals-dropped",
            EventKind::TotalsReset { .. } => "totals-reset",
            EventKind::RollbackAllowed { .. } => "rollback-allowed",
            EventKind::Crashed { .. } => "crashed",
            EventKind::Gate { .. } => "gate",
            EventKind::ApprovalsUsed { .. } => "approvals-used",
            EventKind::ConfigChanged { .. } => "config-changed",
            EventKind::MetricsWarning { .. } => "metrics-warning",
            EventKind::BudgetReserved { .. } => "budget-reserved",
            EventKind::BudgetSettled { .. } => "budget-settled",
            EventKind::BudgetWarning { .. } => "budget-warning",
            EventKind::BudgetCapped { .. } => "budget-capped",
            EventKind::BudgetReset { .. } => "budget-reset",
            EventKind::WorktreeCreated { .. } => "worktree-created",
            EventKind::GatePromoted { .. } => "gate-promoted",
            EventKind::CheckGate { .. } => "check-gate",
            EventKind::Tick { .. } => "tick",
        }
    }
}

/// The committed `events` with the `refusals` kept apart from them merged
/// in (both oldest first): a refusal, stamped with the version it saw,
/// comes after the events of that version.
pub fn merge(events: Vec<Event>, refusals: Vec<Event>) -> Vec<Event> {
    if refusals.is_empty() {
        return events;
    }
    let mut merged = Vec::with_capacity(events.len() + refusals.len());
    let mut refusals = refusals.into_iter().peekable();
    for e in events {
        while let Some(r) = refusals.next_if(|r| r.v < e.v) {
            merged.push(r);
        }
        merged.push(e);
    }
    merged.extend(refusals);
    merged
}

/// A history line that could not be read, kept so readers can say so.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    pub path: PathBuf,
    pub line: usize,
    pub reason: String,
}

/// A loop's committed history, oldest event first, and the lines that
/// could not be read (damage, or an event kind from a newer version).
#[derive(Debug, Default)]
pub struct History {
    pub events: Vec<Event>,
    pub bad: Vec<BadLine>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_before_actors_still_read() {
        let line = r#"{"v":3,"at":"2026-01-01T00:00:00Z","kind":"approved","by":"ann","id":"ap-3"}"#;
        let e: Event = serde_json::from_str(line).unwrap();
        assert_eq!(e.actor, None);
        assert!(matches!(e.kind, EventKind::Approved { await_id: None, .. }));
        let tick = r#"{"v":4,"at":"2026-01-01T00:00:00Z","kind":"tick","tick":1,"outcome":"ran","worktree_changed":true}"#;
        let e: Event = serde_json::from_str(tick).unwrap();
        assert!(matches!(e.kind, EventKind::Tick { head: None, .. }));
    }

    fn ann() -> Actor {
        crate::who::identify("ann", None, &[])
    }

    #[test]
    fn events_carry_kind_and_at() {
        let e = Event::now(
            EventKind::Approved {
                by: "ann".into(),
                id: "ap-3".into(),
                note: None,
                await_id: None,
                head: None,
                snapshot: None,
            },
            &ann(),
        );
        let v: serde_json::Value = serde_json::from_slice(&e.to_line()).unwrap();
        assert_eq!(v["kind"], "approved");
        assert!(v["at"].is_string());
        assert!(v.get("note").is_none());
        assert!(v["actor"]["user"].is_string(), "{v}");
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn gate_events_round_trip_with_their_context() {
        use crate::domain::{Decision, Phase};
        for decision in [Decision::Proceed, Decision::Halt("too much".into())] {
            let verdict = Verdict {
                gate: "stock:budget".into(),
                version: Some("0.1.0".into()),
                name: Some("budget".into()),
                sha256: Some("ab".repeat(32)),
                phase: Phase::AfterStep,
                decision,
                micros: 42,
                error: None,
                logs: Vec::new(),
            };
            let shadow = ShadowVerdict {
                verdict: Verdict {
                    gate: "gates/budget.wasm".into(),
                    decision: Decision::Halt("over".into()),
                    ..verdict.clone()
                },
                agrees: false,
            };
            let e = Event::now(
                EventKind::Gate {
                    tick: 3,
                    verdict,
                    context: Box::default(),
                    shadow: vec![shadow],
                },
                &ann(),
            );
            let line = e.to_line();
            let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(v["kind"], "gate");
            assert_eq!(v["gate"], "stock:budget");
            assert!(v["decision"].is_string(), "{v}");
            assert_eq!(
                (v["name"].as_str(), v["version"].as_str()),
                (Some("budget"), Some("0.1.0"))
            );
            assert_eq!(v["shadow"][0]["decision"], "halt", "{v}");
            assert_eq!(v["shadow"][0]["agrees"], false);
            let back: Event = serde_json::from_slice(&line).unwrap();
            assert_eq!(back, e);
        }
    }
}
