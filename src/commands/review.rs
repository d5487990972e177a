//! `review`: what an approver decides on. The pending await (which gates
//! asked, why, since when), every tick since the last approval released
//! one (its outcome, step and verifier, the last lines of each output, its
//! gates' decisions), the metrics those ticks reported against the loop's
//! totals, and the commits from the last approved commit to the
//! worktree's HEAD (the range and the sums as `crate::since` computes
//! them, for the notices too). Reads only; takes no lock.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};

use serde::Serialize;

use super::render::safe;
use crate::cli::ReviewArgs;
use crate::error::{Exit, Result};
use crate::gate::Decision;
use crate::history::{Event, EventKind};
use crate::root::Root;
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
}

pub fn run(root: &Root, stores: &Stores, args: &ReviewArgs, out: &mut dyn Write) -> Result<Exit> {
    let dir = stores.get(&args.name)?;
    let mut review = build(dir.as_ref(), args.diff)?;
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

pub(crate) fn build(dir: &dyn LoopStore, with_patch: bool) -> Result<Review> {
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
        link: None,
    })
}

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
    Work {
        commits: range.commits(),
        diffstat: range.diff(true),
        patch,
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
    work_lines(&mut text, r);
    let mut text = text.0;
    if let Some(patch) = r.work.as_ref().and_then(|w| w.patch.as_ref()) {
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
