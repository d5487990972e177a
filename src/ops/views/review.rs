//! The view an approver decides on (`review`). The pending await (which
//! gates asked, why, since when), the last rejection, every tick since the
//! last approval released an await and since that rejection, an await
//! recorded again at the same tick once (its outcome, step and verifier,
//! the last lines of each output, its gates' decisions), the metrics those
//! ticks reported against
//! the loop's totals, the commits from the last approved commit to the
//! worktree's HEAD, and what is not committed in the worktree (the range
//! and the sums as `crate::since` computes them, for the notices too), and
//! the config changes recorded since the last approval, with a change not
//! yet recorded. Reads only; takes no lock.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

use serde::Serialize;

use crate::domain::Decision;
use crate::error::Result;
use crate::history::{Event, EventKind};
use crate::ops::Ctx;
use crate::root::Root;
use crate::rules::{ConfigChange, Current, Hashes};
use crate::runs::{self, Runs};
use crate::since::{Range, Rejection, Since};
use crate::state::{Await, Head, Outcome, ProcessOutcome};
use crate::store::LoopStore;

/// The most lines of each output a review shows.
const TAIL_LINES: usize = 20;
/// The most bytes read from the end of an output for its last lines.
const TAIL_BYTES: u64 = 64 * 1024;

#[derive(Debug, Serialize)]
pub(crate) struct Review {
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub status: crate::state::Status,
    /// The pending await, if one is.
    pub awaiting: Option<Await>,
    /// The version of the last commit that released an await with
    /// approvals (`approvals-used`); none when none ever did.
    pub since_version: Option<u64>,
    /// The last rejection since the last approval: the ticks it turned
    /// down are not listed again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<Rejection>,
    /// The ticks since the last approval and the last rejection; a tick
    /// that awaited the same await again is listed once.
    pub ticks: Vec<TickReview>,
    /// Sums of the metrics the ticks since the last approval reported,
    /// counted from the last reset of the totals when one came after it.
    pub metrics_since: BTreeMap<String, f64>,
    /// The loop's running totals.
    pub totals: BTreeMap<String, f64>,
    pub work: Option<Work>,
    /// The changes to loop.toml and automaton.toml recorded since the last
    /// approval, oldest first.
    pub config_changes: Vec<ConfigChangeReview>,
    /// The sha256 of the config's files as they are now, when they differ
    /// from those last recorded (a change no command recorded yet).
    pub unrecorded_config: Option<Hashes>,
    /// This review's page in the console, when `[server] url` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct TickReview {
    pub tick: u64,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub step: Option<ProcessOutcome>,
    pub verifier: Option<ProcessOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<Head>,
    /// How its step ran: confined (and how) or unconfined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confinement: Option<crate::step::confine::Confinement>,
    /// Gates that did not simply proceed.
    pub gates: Vec<GateReview>,
    /// The last lines of each output kept (`step.out`, `step.err`, ...).
    pub output: BTreeMap<String, Vec<String>>,
}

/// A recorded change to the config: when, who committed it, and what
/// changed.
#[derive(Debug, Serialize)]
pub(crate) struct ConfigChangeReview {
    pub v: u64,
    pub at: jiff::Timestamp,
    /// Who made the change (`edit`), or whose command found it.
    pub actor: Option<String>,
    #[serde(flatten)]
    pub change: ConfigChange,
}

#[derive(Debug, Serialize)]
pub(crate) struct GateReview {
    pub gate: String,
    #[serde(flatten)]
    pub decision: Decision,
}

/// The worktree's commits since the last approved one.
#[derive(Debug, Serialize)]
pub(crate) struct Work {
    /// `branch`, `from` (the commit the first tick since the last approval
    /// started on, or the pending await's), `head`.
    #[serde(flatten)]
    pub range: Range,
    /// `git log --oneline from..head`.
    pub commits: Vec<String>,
    /// `git diff --stat from head`.
    pub diffstat: String,
    /// `git diff from head`, with `--diff`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// The uncommitted changes and untracked files in the worktree, `XY
    /// path` as `git status --short` has them (at most
    /// [`crate::worktree::MAX_DIRTY_LISTED`]; `uncommitted_more` counts
    /// the rest): part of the work, and of what an approval with `bind =
    /// "commit"` is bound to.
    pub uncommitted: Vec<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub uncommitted_more: usize,
    /// Their patch (untracked files as added), with `--diff`; bounded
    /// ([`crate::worktree::MAX_UNCOMMITTED_PATCH`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncommitted_patch: Option<String>,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The console's page of loop `dir`'s review, when loop.toml or the root's
/// automaton.toml sets `[server] url`.
pub(crate) fn link(root: &Root, dir: &dyn LoopStore) -> Option<String> {
    let config = dir.config().ok()?;
    let settings = root.settings();
    let server = config.server.url.as_ref().or(settings.server.url.as_ref())?;
    Some(crate::config::notify::review_url(server, dir.name().as_str()))
}

/// `review NAME`: what an approver decides on, with the work's patch when
/// `with_patch`, and the link to its page in the console.
pub(crate) fn review(ctx: &Ctx, name: &str, with_patch: bool) -> Result<Review> {
    let dir = ctx.stores.get(name)?;
    super::may_view(ctx, dir.as_ref())?;
    let mut review = build(ctx.root, dir.as_ref(), with_patch)?;
    review.link = link(ctx.root, dir.as_ref());
    Ok(review)
}

fn build(root: &Root, dir: &dyn LoopStore, with_patch: bool) -> Result<Review> {
    let state = dir.load()?;
    let history = dir.history()?;
    let since = Since::of(&history.events);
    let recent = since.unrejected();
    let mut ticks: Vec<TickReview> = Vec::new();
    for (i, e) in recent.iter().enumerate() {
        if let EventKind::Tick {
            tick,
            outcome,
            reason,
            step,
            verifier,
            head,
            confinement,
            ..
        } = &e.kind
        {
            // A tick that awaited again the await it awaited (after a
            // pause and resume, a restart) is one await: shown once, as
            // last recorded.
            if *outcome == Outcome::AwaitingApproval
                && ticks
                    .last()
                    .is_some_and(|t| t.tick == *tick && t.outcome == Outcome::AwaitingApproval)
            {
                ticks.pop();
            }
            ticks.push(TickReview {
                tick: *tick,
                outcome: *outcome,
                reason: reason.clone(),
                step: step.clone(),
                verifier: verifier.clone(),
                head: head.clone(),
                confinement: confinement.clone(),
                gates: gates_of(&recent[..=i], *tick),
                output: if step.is_some() {
                    outputs(dir, *tick, TAIL_LINES)
                } else {
                    BTreeMap::new()
                },
            });
        }
    }
    Ok(Review {
        loop_name: dir.name().to_string(),
        status: state.status,
        awaiting: state.awaiting.clone(),
        since_version: since.version,
        rejected: since.rejection(),
        ticks,
        metrics_since: since.metrics(dir),
        totals: state.totals.clone(),
        work: since.range(&state).map(|r| work(r, with_patch)),
        config_changes: config_changes(&history.events),
        unrecorded_config: unrecorded(root, dir, &state),
        link: None,
    })
}

/// The config changes recorded since the last approval: those after the
/// last `approvals-used`, and those committed with it unless it approved a
/// config change (they were found by the tick it released, unseen).
pub(crate) fn config_changes(events: &[Event]) -> Vec<ConfigChangeReview> {
    let last = events
        .iter()
        .rposition(|e| matches!(e.kind, EventKind::ApprovalsUsed { .. }));
    let unseen = |i: usize, e: &Event| match last.map(|l| (l, &events[l])) {
        None => true,
        Some((l, used)) => {
            let approved = matches!(
                used.kind,
                EventKind::ApprovalsUsed {
                    approved_config: Some(_),
                    ..
                }
            );
            i > l || (e.v == used.v && !approved)
        }
    };
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.kind {
            EventKind::ConfigChanged { change } if unseen(i, e) => Some(ConfigChangeReview {
                v: e.v,
                at: e.at,
                actor: e.actor.as_ref().map(crate::who::Actor::describe),
                change: change.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// The config's files as they are now, when they differ from those the
/// loop last recorded (read only: recording them is a committer's job).
pub(crate) fn unrecorded(root: &Root, dir: &dyn LoopStore, state: &crate::state::State) -> Option<Hashes> {
    let config = dir.config().ok()?;
    let now = Current::of(root.path(), &config);
    now.unrecorded(state).then_some(now.hashes)
}

/// The line `status` and `review` show for a change not yet recorded.
pub(crate) const UNRECORDED: &str = "loop.toml changed since it was last recorded (not yet recorded)";

/// The decisions of tick `tick`'s gates that did not proceed, from the
/// events up to its own.
fn gates_of(events: &[Event], tick: u64) -> Vec<GateReview> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Gate { tick: t, verdict, .. }
                if *t == tick && verdict.decision != Decision::Proceed =>
            {
                Some(GateReview {
                    gate: verdict.gate.clone(),
                    decision: verdict.decision.clone(),
                })
            }
            _ => None,
        })
        .collect()
}

/// The last `lines` lines of each output tick `tick` kept on this host,
/// by file (`step.out`, `step.err`, ...); an empty one is left out.
pub(crate) fn outputs(dir: &dyn LoopStore, tick: u64, lines: usize) -> BTreeMap<String, Vec<String>> {
    let mut found = BTreeMap::new();
    let Ok(Some(runs)) = Runs::open(dir.base_dir()) else {
        return found;
    };
    let Ok(Some(run)) = runs.run(tick) else {
        return found;
    };
    for what in ["step", "verifier"] {
        for stderr in [false, true] {
            let name = runs::output_name(what, stderr);
            if let Ok(Some((mut file, len))) = run.open_read(&name) {
                let start = len.saturating_sub(TAIL_BYTES);
                let mut text = Vec::new();
                if file.seek(SeekFrom::Start(start)).is_ok() && file.read_to_end(&mut text).is_ok() {
                    let last = tail(&String::from_utf8_lossy(&text), start > 0, lines);
                    if !last.is_empty() {
                        found.insert(name, last);
                    }
                }
            }
        }
    }
    found
}

/// The last `n` lines of `text`; a first line cut by where the
/// read started is left out.
fn tail(text: &str, cut: bool, n: usize) -> Vec<String> {
    let mut lines: Vec<&str> = text.lines().collect();
    if cut && !lines.is_empty() {
        lines.remove(0);
    }
    let skip = lines.len().saturating_sub(n);
    lines[skip..].iter().map(|l| (*l).to_owned()).collect()
}

fn work(range: Range, with_patch: bool) -> Work {
    let patch = (with_patch && range.ends().is_some()).then(|| range.diff(false));
    let snapshot = range.snapshot();
    let mut uncommitted = snapshot
        .as_ref()
        .map(crate::worktree::Snapshot::dirty)
        .unwrap_or_default();
    let uncommitted_more = uncommitted
        .len()
        .saturating_sub(crate::worktree::MAX_DIRTY_LISTED);
    uncommitted.truncate(crate::worktree::MAX_DIRTY_LISTED);
    let uncommitted_patch = snapshot
        .filter(|_| with_patch && !uncommitted.is_empty())
        .map(|s| range.uncommitted_diff(&s));
    Work {
        commits: range.commits(),
        diffstat: range.diff(true),
        patch,
        uncommitted,
        uncommitted_more,
        uncommitted_patch,
        range,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_last_lines_and_drop_a_cut_first_one() {
        let text: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let t = tail(&text, false, 20);
        assert_eq!(
            (t.len(), t[0].as_str(), t[19].as_str()),
            (20, "line 10", "line 29")
        );
        assert_eq!(tail("ne 1\nline 2\n", true, 20), ["line 2"]);
    }
}
