//! `tick`: run one tick of a loop, as a scheduler does.

use std::io::{IsTerminal, Write};

use super::render::safe;
use crate::cli::TickArgs;
use crate::domain::{Decision, Phase};
use crate::error::{Exit, Result};
use crate::fires::FiredBy;
use crate::ops::tick::Tick;
use crate::root::Root;
use crate::state::Outcome;
use crate::store::Stores;
use crate::tick::{TickReport, View};

pub(super) fn run(root: &Root, stores: &Stores, args: &TickArgs, out: &mut dyn Write) -> Result<Exit> {
    // A tick run by hand, or by an OS schedule installed as its user.
    let req = Tick {
        name: args.name.clone(),
        timeout: args.timeout,
        process_exits: true,
        fired_by: args
            .fired_by
            .unwrap_or_else(|| fired_by_default(root, &args.name)),
    };
    let report = crate::ops::tick::tick(&super::ops::ctx(root, stores), req, &mut |r| {
        answer(r, args.json.json, out)
    })?;
    Ok(report.exit())
}

/// What fired a tick whose command did not say: a person, unless no one
/// is at a terminal and the loop's schedule is installed in an OS
/// scheduler (whose entries, written by an older build, do not say).
fn fired_by_default(root: &Root, name: &str) -> FiredBy {
    if std::io::stdin().is_terminal() {
        return FiredBy::Person;
    }
    match crate::schedule::record::read(root, name) {
        Ok(Some(r)) => r.backend.into(),
        _ => FiredBy::Person,
    }
}

/// The tick's report, written and flushed before its follow-ups.
pub(super) fn answer(report: &TickReport, json: bool, out: &mut dyn Write) -> Result<()> {
    match json {
        true => super::emit_json(out, report),
        false => super::emit(out, &human(report)),
    }
    .and_then(|()| out.flush().map_err(crate::Error::Output))
}

/// The tick's line, then one line a gate that did not simply proceed; what
/// a gate or a step said is shown as [`safe`] shows it.
fn human(r: &TickReport) -> String {
    let mut line = r.line(View::Command);
    line.push('\n');
    if r.outcome == Outcome::Failed && r.step.is_some() {
        let stream = if r.step.as_ref().is_some_and(|s| !s.success()) || r.verifier.is_none() {
            ""
        } else {
            " --verifier"
        };
        line += &format!(
            "  output: automaton logs {} {}{stream} (--stderr for its errors)\n",
            r.loop_name, r.tick
        );
    }
    for v in r
        .decisions
        .iter()
        .filter(|v| v.decision.strength() > 0 || v.error.is_some())
    {
        // On a gate error the decision's reason is the error: say it once.
        let gate = safe(&v.gate);
        // A before-step await the step ran past was approved: the gate
        // asked, and an approval let the tick go on.
        let approved = if r.step.is_some()
            && v.phase == Phase::BeforeStep
            && matches!(v.decision, Decision::AwaitApproval(_))
        {
            " (approved, so the step ran)"
        } else {
            ""
        };
        let name = v.decision.name();
        match &v.error {
            Some(e) => {
                line += &format!("  {} {gate}: {name}{approved} on error: {}", v.phase, safe(e));
            }
            None if approved.is_empty() => {
                line += &format!("  {} {gate}: {}", v.phase, safe(&v.decision.to_string()));
            }
            None => {
                let reason = safe(v.decision.reason());
                line += &format!("  {} {gate}: {name}{approved}: {reason}", v.phase);
            }
        }
        line.push('\n');
    }
    line
}
