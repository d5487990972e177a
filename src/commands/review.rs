//! `review`: what an approver decides on. The pending await (which gates
//! asked, why, since when), every tick since the last approval released
//! one (its outcome, step and verifier, the last lines of each output, its
//! gates' decisions), the metrics those ticks reported against the loop's
//! totals, the commits from the last approved commit to the worktree's
//! HEAD, and what is not committed in the worktree (the range and the sums
//! as `crate::since` computes them, for the notices too), and the config
//! changes recorded since the last approval, with a change not yet
//! recorded. Reads only; takes no lock.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};

use serde::Serialize;

use super::render::safe;
use crate::cli::ReviewArgs;
use crate::error::{Exit, Result};
use crate::gate::Decision;
use crate::history::{Event, EventKind};
use crate::root::Root;
use crate::rules::{self, ConfigChange, Current, Hashes, Via};
use crate::runs::{self, Runs};
use crate::since::{Range, Since};
use crate::state::{Await, Head, Outcome, ProcessOutcome};
use crate::store::{LoopStore, Stores};

/// The most lines of each output a review shows.
const TAIL_LINES: usize = 20;
/// The most bytes read from the end of an output for its last lines.
const TAIL_BYTES: u64 = 64 * 1024;
/// The width the text fits.
const WIDTH: usize = 80;

#[derive(Debug, Serialize)]
pub struct Review {
    #[serde(rename = "loop")]
    loop_name: String,
    status: crate::state::Status,
    /// The pending await, if one is.
    awaiting: Option<Await>,
    /// The version of the last commit that released an await with
    /// approvals (`approvals-used`); none when none ever did.
    since_version: Option<u64>,
    ticks: Vec<TickReview>,
    /// Sums of the metrics the ticks above reported.
    metrics_since: BTreeMap<String, f64>,
    /// The loop's running totals.
    totals: BTreeMap<String, f64>,
    work: Option<Work>,
    /// The changes to loop.toml and automaton.toml recorded since the last
    /// approval, oldest first.
    config_changes: Vec<ConfigChangeReview>,
    /// The sha256 of the config's files as they are now, when they differ
    /// from those last recorded (a change no command recorded yet).
    unrecorded_config: Option<Hashes>,
    /// This review's page in the console, when `[server] url` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<String>,
}

#[derive(Debug, Serialize)]
struct TickReview {
    tick: u64,
    outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    step: Option<ProcessOutcome>,
    verifier: Option<ProcessOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    head: Option<Head>,
    /// How its step ran: confined (and how) or unconfined.
    #[serde(skip_serializing_if = "Option::is_none")]
    confinement: Option<crate::step::confine::Confinement>,
    /// Gates that did not simply proceed.
    gates: Vec<GateReview>,
    /// The last lines of each output kept (`step.out`, `step.err`, ...).
    output: BTreeMap<String, Vec<String>>,
}

/// A recorded change to the config: when, who committed it, and what
/// changed.
#[derive(Debug, Serialize)]
pub struct ConfigChangeReview {
    pub v: u64,
    pub at: jiff::Timestamp,
    /// Who made the change (`edit`), or whose command found it.
    pub actor: Option<String>,
    #[serde(flatten)]
    pub change: ConfigChange,
}

#[derive(Debug, Serialize)]
struct GateReview {
    gate: String,
    #[serde(flatten)]
    decision: Decision,
}

/// The worktree's commits since the last approved one.
#[derive(Debug, Serialize)]
struct Work {
    /// `branch`, `from` (the commit the first tick since the last approval
    /// started on, or the pending await's), `head`.
    #[serde(flatten)]
    range: Range,
    /// `git log --oneline from..head`.
    commits: Vec<String>,
    /// `git diff --stat from head`.
    diffstat: String,
    /// `git diff from head`, with `--diff`.
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    /// The uncommitted changes and untracked files in the worktree, `XY
    /// path` as `git status --short` has them (at most
    /// [`crate::worktree::MAX_DIRTY_LISTED`]; `uncommitted_more` counts
    /// the rest): part of the work, and of what an approval with `bind =
    /// "commit"` is bound to.
    uncommitted: Vec<String>,
    #[serde(skip_serializing_if = "is_zero")]
    uncommitted_more: usize,
    /// Their patch (untracked files as added), with `--diff`; bounded
    /// ([`crate::worktree::MAX_UNCOMMITTED_PATCH`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    uncommitted_patch: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

pub fn run(root: &Root, stores: &Stores, args: &ReviewArgs, out: &mut dyn Write) -> Result<Exit> {
    let dir = stores.get(&args.name)?;
    let mut review = build(root, dir.as_ref(), args.diff)?;
    review.link = link(root, dir.as_ref());
    if args.json.json {
        super::emit_json(out, &review)?;
    } else {
        super::emit(out, &human(&review))?;
    }
    Ok(Exit::Ok)
}

/// The console's page of loop `dir`'s review, when loop.toml or the root's
/// automaton.toml sets `[server] url`.
fn link(root: &Root, dir: &dyn LoopStore) -> Option<String> {
    let config = dir.config().ok()?;
    let settings = root.settings();
    let server = config.server.url.as_ref().or(settings.server.url.as_ref())?;
    Some(crate::notify::review_url(server, dir.name().as_str()))
}

pub(crate) fn build(root: &Root, dir: &dyn LoopStore, with_patch: bool) -> Result<Review> {
    let state = dir.load()?;
    let history = dir.history()?;
    let since = Since::of(&history.events);
    let recent = since.events;
    let mut ticks = Vec::new();
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
                    outputs(dir, *tick)
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

/// The words for a recorded change: how it came, and who.
pub(crate) fn change_line(c: &ConfigChangeReview) -> String {
    let who = c.actor.as_deref().unwrap_or("someone");
    let how = match c.change.via {
        Via::Edit => format!("changed with `automaton edit` by {who}"),
        Via::Outside => format!("changed outside automaton (found by {who})"),
    };
    let rules = match c.change.rules.as_slice() {
        [] => "no rules".to_owned(),
        r => format!("rules: {}", rules::names(r)),
    };
    let awaits = if c.change.awaits { "; awaits approval" } else { "" };
    format!(
        "{}: config {how}; {rules}; loop.toml {} -> {}{awaits}",
        super::render::local(c.at),
        rules::short(&c.change.before.loop_toml),
        rules::short(&c.change.after.loop_toml)
    )
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

/// The last lines of each output tick `tick` kept on this host.
fn outputs(dir: &dyn LoopStore, tick: u64) -> BTreeMap<String, Vec<String>> {
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
                    let lines = tail(&String::from_utf8_lossy(&text), start > 0);
                    if !lines.is_empty() {
                        found.insert(name, lines);
                    }
                }
            }
        }
    }
    found
}

/// The last [`TAIL_LINES`] lines of `text`; a first line cut by where the
/// read started is left out.
fn tail(text: &str, cut: bool) -> Vec<String> {
    let mut lines: Vec<&str> = text.lines().collect();
    if cut && !lines.is_empty() {
        lines.remove(0);
    }
    let skip = lines.len().saturating_sub(TAIL_LINES);
    lines[skip..].iter().map(|l| (*l).to_owned()).collect()
}

fn work(range: Range, with_patch: bool) -> Work {
    let patch = (with_patch && range.ends().is_some()).then(|| range.diff(false));
    let snapshot = range.snapshot();
    let mut uncommitted = snapshot.as_ref().map(|s| s.dirty()).unwrap_or_default();
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

/// The review as text that fits [`WIDTH`] columns.
fn human(r: &Review) -> String {
    let mut text = Lines::default();
    text.line(format!("loop {} is {}", r.loop_name, r.status));
    if let Some(link) = &r.link {
        text.line(format!("review in the console: {link}"));
    }
    awaiting(&mut text, r);
    text.line(String::new());
    ticks(&mut text, r);
    text.line(String::new());
    metrics(&mut text, r);
    config_lines(&mut text, r);
    work_lines(&mut text, r);
    let mut text = text.0;
    let work = r.work.as_ref();
    for patch in [
        work.and_then(|w| w.patch.as_ref()),
        work.and_then(|w| w.uncommitted_patch.as_ref()),
    ]
    .into_iter()
    .flatten()
    {
        // The patch is shown whole, line by line: cutting its lines would
        // break it.
        text.push('\n');
        for l in patch.lines() {
            text += &safe(l);
            text.push('\n');
        }
    }
    text
}

/// The review's text, one escaped line at a time, each fitted to 80 columns.
#[derive(Default)]
struct Lines(String);

impl Lines {
    fn line(&mut self, s: String) {
        self.0 += &fit(&safe(&s));
        self.0.push('\n');
    }
}

fn awaiting(text: &mut Lines, r: &Review) {
    let Some(a) = &r.awaiting else {
        return text.line("no await is pending".to_owned());
    };
    text.line(format!(
        "await {} since {} (tick {})",
        a.id,
        super::render::local(a.since),
        a.tick
    ));
    for g in &a.gates {
        let version = g.version.as_deref().map(|v| format!(" {v}")).unwrap_or_default();
        text.line(format!("  {}{version}: {}", g.gate, g.reason));
    }
    if let Some(h) = &a.head {
        text.line(format!("  on commit {}", short(h)));
    }
}

fn ticks(text: &mut Lines, r: &Review) {
    match r.since_version {
        Some(v) => text.line(format!("ticks since the last approval (version {v}):")),
        None => text.line("ticks (no approval yet):".to_owned()),
    }
    if r.ticks.is_empty() {
        text.line("  none".to_owned());
    }
    for t in &r.ticks {
        let mut head = format!("tick {}: {}", t.tick, t.outcome);
        if let Some(s) = &t.step {
            head += &format!(", step {s}");
        }
        if t.confinement == Some(crate::step::confine::Confinement::Unconfined) {
            head += ", unconfined";
        }
        if let Some(v) = &t.verifier {
            head += if v.success() {
                ", verifier passed"
            } else {
                ", verifier failed"
            };
        }
        text.line(head);
        if let Some(reason) = t.reason.as_ref().filter(|_| t.outcome != Outcome::Ran) {
            text.line(format!("  reason: {reason}"));
        }
        if let Some(h) = &t.head {
            text.line(format!(
                "  {}: {} -> {}",
                h.branch,
                h.before.as_deref().map_or("none", short),
                h.after.as_deref().map_or("none", short)
            ));
        }
        for g in &t.gates {
            text.line(format!("  gate {}: {}", g.gate, g.decision));
        }
        for (name, lines) in &t.output {
            text.line(format!("  {name} (last {} lines):", lines.len()));
            for l in lines {
                text.line(format!("    {l}"));
            }
        }
    }
}

fn metrics(text: &mut Lines, r: &Review) {
    text.line("metrics since the last approval / overall:".to_owned());
    let keys: std::collections::BTreeSet<&String> = r.metrics_since.keys().chain(r.totals.keys()).collect();
    if keys.is_empty() {
        text.line("  none".to_owned());
    }
    for k in keys {
        let since = r.metrics_since.get(k).copied().unwrap_or(0.0);
        let all = r.totals.get(k).copied().unwrap_or(0.0);
        text.line(format!("  {k}: {since} / {all}"));
    }
}

fn config_lines(text: &mut Lines, r: &Review) {
    text.line(String::new());
    text.line("config changes since the last approval:".to_owned());
    if let Some(h) = &r.unrecorded_config {
        let root = match &h.automaton_toml {
            rules::RootFile::Absent => "absent".to_owned(),
            rules::RootFile::Sha256(hex) => rules::short(hex).to_owned(),
        };
        text.line(format!(
            "  {UNRECORDED}: loop.toml {}, automaton.toml {root}",
            rules::short(&h.loop_toml)
        ));
    }
    if r.config_changes.is_empty() && r.unrecorded_config.is_none() {
        text.line("  none".to_owned());
    }
    for c in &r.config_changes {
        text.line(format!("  {}", change_line(c)));
        for l in c.change.diff.lines() {
            text.line(format!("    {l}"));
        }
    }
}

fn work_lines(text: &mut Lines, r: &Review) {
    let Some(w) = &r.work else { return };
    text.line(String::new());
    let branch = &w.range.branch;
    match w.range.ends() {
        Some((f, h)) => text.line(format!("{branch}: {}..{}", short(f), short(h))),
        None => text.line(format!("{branch}: no approved commit to compare with")),
    }
    if w.commits.is_empty() {
        text.line("  no commits".to_owned());
    }
    for c in &w.commits {
        text.line(format!("  {c}"));
    }
    for l in w.diffstat.lines() {
        text.line(format!(" {l}"));
    }
    if w.uncommitted.is_empty() {
        return;
    }
    text.line("uncommitted in the worktree (part of the work):".to_owned());
    for l in &w.uncommitted {
        text.line(format!("  {l}"));
    }
    if w.uncommitted_more > 0 {
        text.line(format!("  and {} more", w.uncommitted_more));
    }
}

/// A commit's first 12 hex digits.
fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// `s` cut to [`WIDTH`] characters, with `…` where it was cut.
fn fit(s: &str) -> String {
    if s.chars().count() <= WIDTH {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(WIDTH - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_last_lines_and_drop_a_cut_first_one() {
        let text: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let t = tail(&text, false);
        assert_eq!(
            (t.len(), t[0].as_str(), t[19].as_str()),
            (20, "line 10", "line 29")
        );
        assert_eq!(tail("ne 1\nline 2\n", true), ["line 2"]);
        assert_eq!(fit(&"x".repeat(100)).chars().count(), WIDTH);
    }
}
