//! The work since the last approval: the history from the last commit that
//! released an await with approvals, the metrics its ticks reported, and
//! the worktree's commits from the one the first of them started on to
//! HEAD, and what is not committed in it. What an approver decides on,
//! computed here once for both who show it: `review` and the notices
//! (docs/notify.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::history::{Event, EventKind};
use crate::runs::{self, Runs};
use crate::state::State;
use crate::store::LoopStore;
use crate::worktree::Snapshot;

/// The history since the last approval.
pub(crate) struct Since<'a> {
    /// The version of the last commit that released an await with
    /// approvals (`approvals-used`); none when none ever did.
    pub version: Option<u64>,
    /// The events from that commit on; the whole history when none did.
    pub events: &'a [Event],
}

/// A rejection since the last approval: who turned the work down, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Rejection {
    pub v: u64,
    pub at: jiff::Timestamp,
    pub by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The await it rejected.
    #[serde(rename = "await", skip_serializing_if = "Option::is_none")]
    pub await_id: Option<String>,
}

impl<'a> Since<'a> {
    /// The part of `events` (a loop's history, oldest first) since the
    /// last approval.
    pub(crate) fn of(events: &'a [Event]) -> Since<'a> {
        let at = events
            .iter()
            .rposition(|e| matches!(e.kind, EventKind::ApprovalsUsed { .. }));
        Since {
            version: at.map(|i| events[i].v),
            events: &events[at.unwrap_or(0)..],
        }
    }

    /// The last rejection since the last approval, if any.
    pub(crate) fn rejection(&self) -> Option<Rejection> {
        self.events.iter().rev().find_map(|e| match &e.kind {
            EventKind::Rejected { by, reason, await_id } => Some(Rejection {
                v: e.v,
                at: e.at,
                by: by.clone(),
                reason: reason.clone(),
                await_id: await_id.clone(),
            }),
            _ => None,
        })
    }

    /// The events since the last approval that no rejection has turned
    /// down yet: those after the last rejection, or all of them.
    pub(crate) fn unrejected(&self) -> &'a [Event] {
        let after = self
            .events
            .iter()
            .rposition(|e| matches!(e.kind, EventKind::Rejected { .. }))
            .map_or(0, |i| i + 1);
        &self.events[after..]
    }

    /// The events since the last approval and since the last reset of the
    /// totals (`resume --reset-budget`), whichever is later: the metrics
    /// since are never counted from before the totals started over.
    fn since_reset(&self) -> &'a [Event] {
        let after = self
            .events
            .iter()
            .rposition(|e| matches!(e.kind, EventKind::TotalsReset { .. }))
            .map_or(0, |i| i + 1);
        &self.events[after..]
    }

    /// The sums of the metrics that the ticks since whose step ran
    /// reported, as their tick events keep them: whichever host ran the
    /// ticks and whatever became of their run directories. A tick recorded
    /// by an older build keeps its metrics only in its `runs/<tick>/` on
    /// the host that ran it, read here if it is this one.
    pub(crate) fn metrics(&self, dir: &dyn LoopStore) -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        let mut runs = None;
        for e in self.since_reset() {
            if let EventKind::Tick {
                tick,
                step: Some(_),
                metrics,
                ..
            } = &e.kind
            {
                if !metrics.is_empty() {
                    crate::metrics::add_totals(&mut sums, metrics);
                    continue;
                }
                let runs = runs.get_or_insert_with(|| Runs::open(dir.base_dir()).ok().flatten());
                if let Some(m) = runs.as_ref().and_then(|r| metrics_of(r, *tick)) {
                    crate::metrics::add_totals(&mut sums, &m);
                }
            }
        }
        sums
    }

    /// The worktree's commits since the last approval, with `state`'s
    /// worktree: from the HEAD the first tick since started its step on
    /// (or, before any, the one the pending await opened on) to the
    /// worktree's HEAD now.
    pub(crate) fn range(&self, state: &State) -> Option<Range> {
        let worktree = state.worktree.as_ref()?;
        let from = self
            .events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::Tick { head: Some(h), .. } => h.before.clone(),
                _ => None,
            })
            .or_else(|| state.awaiting.as_ref().and_then(|a| a.head.clone()));
        Some(Range {
            branch: worktree.branch.clone(),
            from,
            head: crate::worktree::head(&worktree.path).ok().flatten(),
            path: worktree.path.clone(),
        })
    }
}

fn metrics_of(runs: &Runs, tick: u64) -> Option<BTreeMap<String, f64>> {
    let run = runs.run(tick).ok()??;
    crate::metrics::read_metrics_in(&run, runs::METRICS).ok()
}

/// A range of the worktree's commits: `from..head` on `branch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Range {
    pub branch: String,
    /// The commit the work started on, if known.
    pub from: Option<String>,
    /// The worktree's HEAD; none on a branch with no commit.
    pub head: Option<String>,
    #[serde(skip)]
    path: PathBuf,
}

impl Range {
    /// Both ends, when both are known.
    pub(crate) fn ends(&self) -> Option<(&str, &str)> {
        Some((self.from.as_deref()?, self.head.as_deref()?))
    }

    /// `git log --oneline from..head`, newest first; none without both ends.
    pub(crate) fn commits(&self) -> Vec<String> {
        self.ends()
            .and_then(|(f, h)| crate::worktree::log(&self.path, f, h).ok())
            .unwrap_or_default()
    }

    /// `git diff from head`: its `--stat` (`stat`) or the patch; empty
    /// without both ends.
    pub(crate) fn diff(&self, stat: bool) -> String {
        self.ends()
            .and_then(|(f, h)| crate::worktree::diff(&self.path, f, h, stat).ok())
            .unwrap_or_default()
    }

    /// The worktree's snapshot now: what is not committed in it is part
    /// of the work too (and of what an approval with `bind = "commit"` is
    /// bound to). None when git cannot read it.
    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        crate::worktree::snapshot(&self.path)
            .inspect_err(|e| tracing::warn!("{e}"))
            .ok()
    }

    /// The uncommitted changes in `snapshot` (this range's worktree) as a
    /// patch, untracked files as added; bounded
    /// ([`crate::worktree::MAX_UNCOMMITTED_PATCH`]). Empty when git cannot
    /// say.
    pub(crate) fn uncommitted_diff(&self, snapshot: &Snapshot) -> String {
        crate::worktree::uncommitted_diff(&self.path, snapshot)
            .inspect_err(|e| tracing::warn!("{e}"))
            .unwrap_or_default()
    }
}
