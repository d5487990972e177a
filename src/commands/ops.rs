//! The operator's verbs that change a loop: `pause`, `resume`, `approve`,
//! `reject` and `rm`. Each takes the loop's lock in the ordinary way.

use std::collections::BTreeMap;
use std::io::Write;

use super::render::{number, safe};
use crate::cli::{ApproveArgs, PauseArgs, RejectArgs, ResumeArgs, RmArgs};
use crate::error::{Error, Exit, Result};
use crate::gate::{Decision, GateHost, Phase};
use crate::history::EventKind;
use crate::lock::Holder;
use crate::root::Root;
use crate::state::{Refusal, State, Status};
use crate::store::LoopStore;
use crate::tick::gates;
use crate::{bounds, who};

fn refused(dir: &dyn LoopStore) -> impl FnOnce(Refusal) -> Error + '_ {
    move |r| Error::Refused {
        name: dir.name().to_string(),
        message: r.0,
    }
}

/// The command's line (what it quotes, a reason or a user, shown as
/// [`safe`] shows text), or the loop's view as JSON.
fn report(dir: &dyn LoopStore, state: &State, json: bool, line: String, out: &mut dyn Write) -> Result<Exit> {
    if json {
        super::emit_json(out, &super::status::view(dir, state))?;
    } else {
        super::emit(out, &format!("{}\n", safe(&line)))?;
    }
    Ok(Exit::Ok)
}

pub fn pause(root: &Root, args: &PauseArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = crate::store::open(root, &t.name)?;
    let dir = &*dir;
    let reason = bounds::opt_text(args.reason.clone());
    let mut already = false;
    let state = super::update_loop(dir, "pause", t.wait.wait(), |s| {
        // Paused already: nothing changes, nothing is recorded.
        if s.status == Status::Paused {
            already = true;
            return Ok(Vec::new());
        }
        s.pause(reason.clone()).map_err(refused(dir))?;
        Ok(vec![EventKind::Paused {
            by: who::user(),
            reason,
        }])
    })?;
    let line = match (already, &state.status_reason) {
        (true, Some(r)) => format!("loop {} is already paused ({r}); nothing changed", dir.name()),
        (true, None) => format!("loop {} is already paused; nothing changed", dir.name()),
        (false, _) => format!("paused loop {}", dir.name()),
    };
    report(dir, &state, t.json.json, line, out)
}

pub fn resume(root: &Root, args: &ResumeArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = crate::store::open(root, &t.name)?;
    let dir = &*dir;
    let by = who::user();
    let mut from = Status::Active;
    let mut dropped = BTreeMap::new();
    let state = super::update_loop(dir, "resume", t.wait.wait(), |s| {
        let mut events = Vec::new();
        // Active already: nothing changes (not even the failure count) and
        // nothing is recorded, unless the totals are to start over.
        if s.status != Status::Active {
            from = s.resume();
            events.push(EventKind::Resumed { by: by.clone(), from });
        }
        if args.reset_budget && !s.totals.is_empty() {
            dropped = s.reset_totals();
            events.push(EventKind::TotalsReset {
                by: by.clone(),
                totals: dropped.clone(),
            });
        }
        Ok(events)
    })?;
    // Outside the lock: a schedule a halt or completion disabled runs again.
    crate::tick::after::follow(root, crate::tick::after::Change::Resumed(dir.name()));
    let mut line = if from == Status::Active {
        format!("loop {} is already active", dir.name())
    } else {
        format!("resumed loop {} (was {from})", dir.name())
    };
    line += &match (dropped.is_empty(), from == Status::Active) {
        (false, _) => format!("; its totals start over (they were {})", totals(&dropped)),
        (true, true) => "; nothing changed".to_owned(),
        (true, false) => String::new(),
    };
    if from != Status::Active
        && let Some(warning) = stops_again(root, dir, &state)
    {
        tracing::warn!("{warning}");
    }
    report(dir, &state, t.json.json, line, out)
}

/// `cost_usd=20.5 tokens=1200`.
fn totals(t: &BTreeMap<String, f64>) -> String {
    let shown: Vec<String> = t.iter().map(|(k, v)| format!("{k}={}", number(*v))).collect();
    shown.join(" ")
}

/// What a resumed loop's gates would do to it at its next tick, evaluated
/// now on its resumed state: a warning when one would halt or complete it
/// again (a budget still spent, say), with what clears it.
fn stops_again(root: &Root, dir: &dyn LoopStore, state: &State) -> Option<String> {
    let config = dir.config().ok()?;
    if config.gates.is_empty() {
        return None;
    }
    let host = GateHost::new(Some(root.cache_dir())).ok()?;
    let name = dir.name().as_str();
    let verdict = [Phase::BeforeStep, Phase::AfterStep]
        .into_iter()
        .find_map(|phase| {
            gates::evaluate_phase(&host, name, dir.base_dir(), &config, state, phase)
                .verdicts
                .into_iter()
                .find(|v| matches!(v.decision, Decision::Halt(_) | Decision::Complete(_)))
        })?;
    let when = match verdict.phase {
        Phase::BeforeStep => "at its next tick",
        Phase::AfterStep => "after its next step",
    };
    Some(format!(
        "loop {name:?} is active, but gate {} would {} it again {when}: {}; {}",
        verdict.gate,
        verdict.decision.name(),
        verdict.decision.reason(),
        super::status::clears(name, &verdict.gate)
    ))
}

pub fn approve(root: &Root, args: &ApproveArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = crate::store::open(root, &t.name)?;
    let dir = &*dir;
    let by = who::user();
    let mut id = String::new();
    let mut required = 1;
    let state = super::update_loop(dir, "approve", t.wait.wait(), |s| {
        let rules = dir.config()?.approval;
        required = rules.required;
        let now = crate::clock::now();
        let mut events: Vec<EventKind> = s
            .drop_expired(now, rules.expires.map(|d| d.0))
            .into_iter()
            .map(|a| EventKind::ApprovalExpired {
                id: a.id,
                by: a.by,
                approved_at: a.at,
            })
            .collect();
        // An approval for a loop that is not waiting would be used silently
        // by a later await: only on purpose. (Halted and completed loops are
        // refused by `approve` itself.)
        let may_approve = rules.approvers.as_deref().is_none_or(|a| a.contains(&by));
        if may_approve && matches!(s.status, Status::Active | Status::Paused) && !args.ahead {
            return Err(refused(dir)(Refusal(format!(
                "it is {}, not awaiting approval; pass --ahead to approve its next await in advance",
                s.status
            ))));
        }
        let approval = s
            .approve(
                &by,
                bounds::opt_text(args.note.clone()),
                now,
                rules.approvers.as_deref(),
            )
            .map_err(refused(dir))?;
        id = approval.id.clone();
        events.push(EventKind::Approved {
            by: by.clone(),
            id: approval.id,
            note: approval.note,
        });
        Ok(events)
    })?;
    let mut line = format!("approved loop {} as {by} ({id})", dir.name());
    if required > 1 {
        line += &format!("; {} of {required} approvers so far", state.distinct_approvers());
    }
    report(dir, &state, t.json.json, line, out)
}

pub fn reject(root: &Root, args: &RejectArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = crate::store::open(root, &t.name)?;
    let dir = &*dir;
    let by = who::user();
    let reason = bounds::opt_text(args.reason.clone());
    let state = super::update_loop(dir, "reject", t.wait.wait(), |s| {
        s.reject(&by, reason.as_deref());
        Ok(vec![EventKind::Rejected {
            by: by.clone(),
            reason,
        }])
    })?;
    // Outside the lock: a halted loop's OS schedule stops firing it.
    if state.status == Status::Halted {
        crate::tick::after::follow(root, crate::tick::after::Change::Stopped(dir.name()));
    }
    report(
        dir,
        &state,
        t.json.json,
        format!("rejected loop {}: it is halted", dir.name()),
        out,
    )
}

pub fn rm(root: &Root, args: &RmArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = crate::store::open(root, &t.name)?;
    let dir = &*dir;
    let mut session = dir.lock(Holder::me("rm"), t.wait.wait())?;
    if !args.force {
        let state = session.load()?.state;
        if state.status.is_runnable() {
            return Err(Error::Refused {
                name: dir.name().to_string(),
                message: format!(
                    "it is {}; pause it first, or pass --force to remove it anyway",
                    state.status
                ),
            });
        }
    }
    session.remove()?;
    crate::schedule::loop_removed(root, dir.name());
    if t.json.json {
        super::emit_json(
            out,
            &serde_json::json!({ "name": dir.name().as_str(), "removed": true }),
        )?;
    } else {
        super::emit(out, &format!("removed loop {}\n", dir.name()))?;
    }
    Ok(Exit::Ok)
}
