//! A notification's content: the one [`Notice`] that the command gets in
//! its environment and the webhook as its JSON body (docs/notify.md).

use std::collections::BTreeMap;
use std::path::Path;

use jiff::Timestamp;
use serde::Serialize;

use super::Kind;
use crate::state::{Head, State, Status};
use crate::who::Actor;

/// The loop as a tick or an operator's command left it: what a notice
/// says of it besides what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
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
    pub fn of(state: &State) -> Facts {
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
pub struct Operation {
    /// `pause`, `resume`, `approve`, `reject` or `cancel`.
    pub action: &'static str,
    pub actor: Actor,
}

/// One notification, as the webhook's body serialises it.
#[derive(Debug, Clone, Serialize)]
pub struct Notice {
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
    pub head: Option<Head>,
    pub totals: BTreeMap<String, f64>,
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
    pub fn new(event: Kind, name: &str, facts: Facts, reason: Option<String>, root: &Path) -> Notice {
        Notice {
            event,
            loop_name: name.to_owned(),
            status: facts.status,
            reason,
            tick: facts.tick,
            await_id: facts.await_id,
            head: facts.head,
            totals: facts.totals,
            consecutive_failures: facts.consecutive_failures,
            action: None,
            actor: None,
            review_url: None,
            root: root.to_string_lossy().into_owned(),
            at: crate::clock::now(),
        }
    }

    /// The notice of an operator's `op` on loop `name`, as it left `state`.
    pub fn operator(name: &str, state: &State, op: Operation, reason: Option<String>, root: &Path) -> Notice {
        let mut notice = Notice::new(Kind::Operator, name, Facts::of(state), reason, root);
        notice.action = Some(op.action);
        notice.actor = Some(op.actor);
        notice
    }

    /// The webhook's body.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("notices serialise")
    }

    /// The command's environment: every variable always set (empty when
    /// it has no value), so none is inherited from the runner's.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let head = self.head.as_ref();
        let text = |v: Option<&String>| v.cloned().unwrap_or_default();
        let actor = self.actor.as_ref();
        vec![
            ("AUTOMATON_EVENT", self.event.as_str().to_owned()),
            ("AUTOMATON_LOOP", self.loop_name.clone()),
            ("AUTOMATON_STATUS", self.status.as_str().to_owned()),
            ("AUTOMATON_REASON", text(self.reason.as_ref())),
            ("AUTOMATON_TICK", self.tick.to_string()),
            ("AUTOMATON_AWAIT", text(self.await_id.as_ref())),
            ("AUTOMATON_BRANCH", text(head.map(|h| &h.branch))),
            (
                "AUTOMATON_HEAD_BEFORE",
                text(head.and_then(|h| h.before.as_ref())),
            ),
            ("AUTOMATON_HEAD_AFTER", text(head.and_then(|h| h.after.as_ref()))),
            (
                "AUTOMATON_TOTALS",
                serde_json::to_string(&self.totals).expect("totals serialise"),
            ),
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
