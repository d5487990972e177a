//! A notification's content: the one [`Notice`] that the command gets in
//! its environment and the webhook as its JSON body (docs/notify.md).

use std::collections::BTreeMap;
use std::path::Path;

use jiff::Timestamp;
use serde::Serialize;

use crate::config::notify::Kind;
use crate::since::Range;
use crate::state::{Head, State, Status};
use crate::who::Actor;

/// The loop as a tick or an operator's command left it: what a notice
/// says of it besides what happened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Facts {
    pub status: Status,
    /// The number of the loop's last tick.
    pub tick: u64,
    /// The await pending, if any.
    pub await_id: Option<String>,
    /// The worktree's branch and HEAD before and after the last step.
    pub head: Option<Head>,
    pub totals: BTreeMap<String, f64>,
    pub consecutive_failures: u32,
}

impl Facts {
    pub(crate) fn of(state: &State) -> Facts {
        Facts {
            status: state.status,
            tick: state.tick,
            await_id: state.awaiting.as_ref().map(|a| a.id.clone()),
            head: state.last_tick.as_ref().and_then(|l| l.head.clone()),
            totals: state.totals.clone(),
            consecutive_failures: state.consecutive_failures,
        }
    }
}

/// What an operator did, and who.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    /// `pause`, `resume`, `approve`, `reject` or `cancel`.
    pub action: &'static str,
    pub actor: Actor,
}

/// The worktree's commits since the last approval, as `review` shows them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Work {
    /// `branch`, `from` and `head`.
    #[serde(flatten)]
    pub range: Range,
    /// How many commits `from..head` holds; none without both ends.
    pub commit_count: Option<usize>,
}

impl Work {
    pub(crate) fn of(range: Range) -> Work {
        let commit_count = range.ends().map(|_| range.commits().len());
        Work { range, commit_count }
    }
}

/// One notification, as the webhook's body serialises it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Notice {
    pub event: Kind,
    #[serde(rename = "loop")]
    pub loop_name: String,
    /// The loop's status now.
    pub status: Status,
    pub reason: Option<String>,
    /// The tick that notified, or the loop's last one for an operator's.
    pub tick: u64,
    #[serde(rename = "await")]
    pub await_id: Option<String>,
    /// The worktree's branch and HEAD before and after the last step.
    pub head: Option<Head>,
    /// The worktree's commits since the last approval.
    pub work: Option<Work>,
    pub totals: BTreeMap<String, f64>,
    /// The metrics the ticks since the last approval reported, summed.
    pub metrics_since: BTreeMap<String, f64>,
    pub consecutive_failures: u32,
    /// The operator's command (`pause`, …), for `operator` notices.
    pub action: Option<&'static str>,
    /// Who ran it, and how they were identified.
    pub actor: Option<Actor>,
    /// The console's review page, when `[server] url` is set.
    pub review_url: Option<String>,
    pub root: String,
    pub at: Timestamp,
}

impl Notice {
    /// The notice of `event` on loop `name`, whose state `facts` tells.
    pub(crate) fn new(event: Kind, name: &str, facts: Facts, reason: Option<String>, root: &Path) -> Notice {
        Notice {
            event,
            loop_name: name.to_owned(),
            status: facts.status,
            reason,
            tick: facts.tick,
            await_id: facts.await_id,
            head: facts.head,
            work: None,
            totals: facts.totals,
            metrics_since: BTreeMap::new(),
            consecutive_failures: facts.consecutive_failures,
            action: None,
            actor: None,
            review_url: None,
            root: root.to_string_lossy().into_owned(),
            at: crate::clock::now(),
        }
    }

    /// The notice of an operator's `op` on loop `name`, as it left `state`.
    pub(crate) fn operator(
        name: &str,
        state: &State,
        op: Operation,
        reason: Option<String>,
        root: &Path,
    ) -> Notice {
        let mut notice = Notice::new(Kind::Operator, name, Facts::of(state), reason, root);
        notice.action = Some(op.action);
        notice.actor = Some(op.actor);
        notice
    }

    /// The webhook's body.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).expect("notices serialise")
    }

    /// The command's environment: every variable always set (empty when
    /// it has no value), so none is inherited from the runner's.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        let head = self.head.as_ref();
        let work = self.work.as_ref().map(|w| &w.range);
        let text = |v: Option<&String>| v.cloned().unwrap_or_default();
        let json = |v: &BTreeMap<String, f64>| serde_json::to_string(v).expect("metrics serialise");
        let actor = self.actor.as_ref();
        let branch = head.map(|h| &h.branch).or(work.map(|w| &w.branch));
        vec![
            ("AUTOMATON_EVENT", self.event.as_str().to_owned()),
            ("AUTOMATON_LOOP", self.loop_name.clone()),
            ("AUTOMATON_STATUS", self.status.as_str().to_owned()),
            ("AUTOMATON_REASON", text(self.reason.as_ref())),
            ("AUTOMATON_TICK", self.tick.to_string()),
            ("AUTOMATON_AWAIT", text(self.await_id.as_ref())),
            ("AUTOMATON_BRANCH", text(branch)),
            (
                "AUTOMATON_HEAD_BEFORE",
                text(head.and_then(|h| h.before.as_ref())),
            ),
            ("AUTOMATON_HEAD_AFTER", text(head.and_then(|h| h.after.as_ref()))),
            ("AUTOMATON_WORK_FROM", text(work.and_then(|w| w.from.as_ref()))),
            ("AUTOMATON_WORK_HEAD", text(work.and_then(|w| w.head.as_ref()))),
            (
                "AUTOMATON_WORK_COMMITS",
                (self.work.as_ref().and_then(|w| w.commit_count))
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
            ),
            ("AUTOMATON_TOTALS", json(&self.totals)),
            ("AUTOMATON_METRICS_SINCE", json(&self.metrics_since)),
            ("AUTOMATON_FAILURES", self.consecutive_failures.to_string()),
            ("AUTOMATON_ACTION", self.action.unwrap_or_default().to_owned()),
            ("AUTOMATON_ACTOR", text(actor.map(|a| &a.user))),
            (
                "AUTOMATON_VIA",
                actor.map(|a| a.via.as_str()).unwrap_or_default().to_owned(),
            ),
            ("AUTOMATON_REVIEW_URL", text(self.review_url.as_ref())),
            ("AUTOMATON_NOTICE", self.to_json()),
        ]
    }
}
