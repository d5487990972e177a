//! `review`: the view an approver decides on
//! ([`crate::ops::views::review`]), as text that fits 80 columns or as
//! JSON.

use std::io::Write;

use super::render::safe;
use crate::cli::ReviewArgs;
use crate::error::{Exit, Result};
use crate::ops::Ctx;
pub(crate) use crate::ops::views::review::{ConfigChangeReview, UNRECORDED};
use crate::ops::views::review::{Review, review};
use crate::root::Root;
use crate::rules::{self, Via};
use crate::state::Outcome;
use crate::store::Stores;

/// The width the text fits.
const WIDTH: usize = 80;

pub(crate) fn run(root: &Root, stores: &Stores, args: &ReviewArgs, out: &mut dyn Write) -> Result<Exit> {
    let ctx = Ctx::own(root, stores);
    let review = review(&ctx, &args.name, args.diff)?;
    if args.json.json {
        super::emit_json(out, &review)?;
    } else {
        super::emit(out, &human(&review))?;
    }
    Ok(Exit::Ok)
}

/// The words for a recorded change: how it came, and who.
pub(crate) fn change_line(c: &ConfigChangeReview) -> String {
    let who = c.actor.as_deref().unwrap_or("someone");
    let how = match c.change.via {
        Via::Edit => format!("changed with `automaton edit` by {who}"),
        Via::Promote => format!("changed with `automaton gate promote` by {who}"),
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

/// The review as text that fits [`WIDTH`] columns.
fn human(r: &Review) -> String {
    let mut text = Lines::default();
    text.line(format!("loop {} is {}", r.loop_name, r.status));
    if let Some(link) = &r.link {
        text.line(format!("review in the console: {link}"));
    }
    awaiting(&mut text, r);
    rejected(&mut text, r);
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

fn rejected(text: &mut Lines, r: &Review) {
    let Some(j) = &r.rejected else { return };
    let what = j.await_id.as_deref().map(|a| format!(" {a}")).unwrap_or_default();
    let why = j.reason.as_deref().map(|s| format!(": {s}")).unwrap_or_default();
    text.line(format!(
        "rejected{what} by {} at {}{why}",
        j.by,
        super::render::local(j.at)
    ));
    text.line("  the ticks it turned down are not listed again".to_owned());
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
    fn long_lines_are_cut_to_the_width() {
        assert_eq!(fit(&"x".repeat(100)).chars().count(), WIDTH);
    }
}
