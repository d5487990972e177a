//! The operator's verbs that change a loop: `pause`, `resume`, `approve`,
//! `reject` and `rm`. Each takes the loop's lock in the ordinary way.

use std::collections::BTreeMap;
use std::io::Write;

use super::render::{number, safe};
use crate::access::Action;
use crate::bounds;
use crate::cli::{PauseArgs, RejectArgs, ResumeArgs, RmArgs};
use crate::error::{Error, Exit, Result};
use crate::gate::{Decision, GateHost, Phase};
use crate::history::{Dropped, EventKind};
use crate::lock::Holder;
use crate::notify::{Notice, Operation};
use crate::root::Root;
use crate::state::{Refusal, State, Status};
use crate::store::{LoopStore, Stores};
use crate::tick::gates;
use crate::who::Actor;

pub(super) fn refused(dir: &dyn LoopStore) -> impl FnOnce(Refusal) -> Error + '_ {
    move |r| Error::Refused {
        name: dir.name().to_string(),
        message: r.0,
    }
}

/// The command's line (what it quotes, a reason or a user, shown as
/// [`safe`] shows text), or the loop's view as JSON.
pub(super) fn report(
    dir: &dyn LoopStore,
    state: &State,
    json: bool,
    line: String,
    out: &mut dyn Write,
) -> Result<Exit> {
    if json {
        super::emit_json(out, &super::status::view(dir, state))?;
    } else {
        super::emit(out, &format!("{}\n", safe(&line)))?;
    }
    Ok(Exit::Ok)
}

/// What an operator's command did, for the loop's people (`[notify] on =
/// ["operator"]`).
pub(super) fn operated(
    root: &Root,
    dir: &dyn LoopStore,
    state: &State,
    action: &'static str,
    actor: Actor,
) -> Notice {
    let op = Operation { action, actor };
    Notice::operator(dir.name().as_str(), state, op, None, root.path())
}

/// [`report`], then the loop's people hear of `notice`, if there is one.
pub(super) fn tell(
    root: &Root,
    dir: &dyn LoopStore,
    notice: Option<Notice>,
    written: Result<Exit>,
    out: &mut dyn Write,
) -> Result<Exit> {
    if let Some(notice) = notice {
        let _ = out.flush();
        crate::tick::after::follow(root, crate::tick::after::Change::Operated(dir, Box::new(notice)));
    }
    written
}

pub fn pause(root: &Root, stores: &Stores, args: &PauseArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = stores.get(&t.name)?;
    let dir = &*dir;
    let actor = super::allowed(root, dir, Action::Pause, t.wait.wait())?;
    let by = actor.user.clone();
    let reason = bounds::opt_text(args.reason.clone());
    let mut already = false;
    let state = super::update_loop(root, dir, "pause", t.wait.wait(), |s| {
        // Paused already: nothing changes, nothing is recorded.
        if s.status == Status::Paused {
            already = true;
            return Ok(Vec::new());
        }
        s.pause(reason.clone()).map_err(refused(dir))?;
        Ok(vec![EventKind::Paused { by, reason }])
    })?;
    let line = match (already, &state.status_reason) {
        (true, Some(r)) => format!("loop {} is already paused ({r}); nothing changed", dir.name()),
        (true, None) => format!("loop {} is already paused; nothing changed", dir.name()),
        (false, _) => format!("paused loop {}", dir.name()),
    };
    let notice = (!already).then(|| {
        let mut n = operated(root, dir, &state, "pause", actor);
        n.reason = state.status_reason.clone();
        n
    });
    tell(
        root,
        dir,
        notice,
        report(dir, &state, t.json.json, line, out),
        out,
    )
}

pub fn resume(root: &Root, stores: &Stores, args: &ResumeArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = stores.get(&t.name)?;
    let dir = &*dir;
    let actor = super::allowed(root, dir, Action::Resume, t.wait.wait())?;
    let by = actor.user.clone();
    let mut from = Status::Active;
    let mut dropped = BTreeMap::new();
    let state = super::update_loop(root, dir, "resume", t.wait.wait(), |s| {
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
    let changed = from != Status::Active || !dropped.is_empty();
    let notice = changed.then(|| operated(root, dir, &state, "resume", actor));
    tell(
        root,
        dir,
        notice,
        report(dir, &state, t.json.json, line, out),
        out,
    )
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

/// A named await that is not the pending one.
pub(super) fn not_pending(named: &str, pending: Option<&str>) -> Refusal {
    Refusal(match pending {
        Some(p) => format!("await {named} is not pending; {p} is"),
        None => format!("await {named} is not pending; no await is"),
    })
}

pub fn reject(root: &Root, stores: &Stores, args: &RejectArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = stores.get(&t.name)?;
    let dir = &*dir;
    let actor = super::allowed(root, dir, Action::Reject, t.wait.wait())?;
    let by = actor.user.clone();
    let reason = bounds::opt_text(args.reason.clone());
    let mut rejected = None;
    let state = super::update_loop(root, dir, "reject", t.wait.wait(), |s| {
        let pending = s.awaiting.as_ref().map(|a| a.id.clone());
        if let Some(named) = &args.await_id
            && pending.as_ref() != Some(named)
        {
            return Err(refused(dir)(not_pending(named, pending.as_deref())));
        }
        if pending.is_none() && s.status != Status::AwaitingApproval && !args.halt {
            return Err(refused(dir)(Refusal(format!(
                "it is {} and no await is pending; pass --halt to halt it anyway",
                s.status
            ))));
        }
        let (closed, dropped) = s.reject(&by, reason.as_deref());
        rejected = closed.map(|a| a.id);
        let mut events = vec![EventKind::Rejected {
            by: by.clone(),
            reason,
            await_id: rejected.clone(),
        }];
        if !dropped.is_empty() {
            events.push(EventKind::ApprovalsDropped {
                await_id: rejected.clone(),
                ids: dropped.iter().map(|a| a.id.clone()).collect(),
                by: dropped.into_iter().map(|a| a.by).collect(),
                why: Dropped::Rejected,
                head: None,
                snapshot: None,
                dirty: Vec::new(),
            });
        }
        Ok(events)
    })?;
    // Outside the lock: a halted loop's OS schedule stops firing it.
    if state.status == Status::Halted {
        crate::tick::after::follow(root, crate::tick::after::Change::Stopped(dir.name()));
    }
    let line = match &rejected {
        Some(id) => format!("rejected await {id} of loop {}: it is halted", dir.name()),
        None => format!("rejected loop {}: it is halted", dir.name()),
    };
    let mut notice = operated(root, dir, &state, "reject", actor);
    (notice.reason, notice.await_id) = (state.status_reason.clone(), rejected);
    tell(
        root,
        dir,
        Some(notice),
        report(dir, &state, t.json.json, line, out),
        out,
    )
}

pub fn rm(root: &Root, stores: &Stores, args: &RmArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = stores.get(&t.name)?;
    let dir = &*dir;
    super::allowed(root, dir, Action::Rm, t.wait.wait())?;
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
