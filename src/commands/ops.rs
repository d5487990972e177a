//! The operator's verbs that change a loop, on the command line: `pause`,
//! `resume`, `reject` and `rm`. Each parses its arguments, calls the core
//! ([`crate::ops`]) as this process's actor, and prints the outcome: a
//! line, or with `--json` the loop's view.

use std::collections::BTreeMap;
use std::io::Write;

use super::render::{number, safe};
use crate::cli::{PauseArgs, RejectArgs, ResumeArgs, RmArgs};
use crate::error::{Error, Exit, Result};
use crate::ops::{self, Ctx, Looked};
use crate::root::Root;
use crate::state::Status;
use crate::store::Stores;

/// The core's context on the command line: this process's actor (its OS
/// user, or the person a recorded delegate acts for).
pub(super) fn ctx<'a>(root: &'a Root, stores: &'a Stores) -> Ctx<'a> {
    Ctx::own(root, stores)
}

/// The command's line (what it quotes, a reason or a user, shown as
/// [`safe`] shows text), or the loop's view as JSON; flushed, as the
/// follow-ups come after it.
pub(super) fn answer(view: &Looked, json: bool, line: &str, out: &mut dyn Write) -> Result<()> {
    match json {
        true => super::emit_json(out, view)?,
        false => super::emit(out, &format!("{}\n", safe(line)))?,
    }
    out.flush().map_err(Error::Output)
}

pub(super) fn pause(root: &Root, stores: &Stores, args: &PauseArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let req = ops::pause::Pause {
        name: t.name.clone(),
        reason: args.reason.clone(),
        wait: t.wait.wait(),
    };
    ops::pause::pause(&ctx(root, stores), req, &mut |p| {
        let name = p.view.name();
        let line = match (p.already, &p.view.state.status_reason) {
            (true, Some(r)) => format!("loop {name} is already paused ({r}); nothing changed"),
            (true, None) => format!("loop {name} is already paused; nothing changed"),
            (false, _) => format!("paused loop {name}"),
        };
        answer(&p.view, t.json.json, &line, out)
    })?;
    Ok(Exit::Ok)
}

/// `gate allow-rollback`: the gate's rollback floor lowered, said with
/// the floor it replaced.
pub(super) fn allow_rollback(
    root: &Root,
    stores: &Stores,
    args: &crate::cli::AllowRollbackArgs,
    out: &mut dyn Write,
) -> Result<Exit> {
    let t = &args.target;
    let req = ops::allow_rollback::AllowRollback {
        name: t.name.clone(),
        gate: args.gate.clone(),
        version: args.to.clone(),
        wait: t.wait.wait(),
    };
    ops::allow_rollback::allow_rollback(&ctx(root, stores), req, &mut |a| {
        let was = match &a.from {
            Some(from) => format!(" (it had run {} {from})", a.gate),
            None => String::new(),
        };
        let line = format!(
            "loop {} may run {} {} and later signed builds{was}",
            a.view.name(),
            a.gate,
            a.to
        );
        answer(&a.view, t.json.json, &line, out)
    })?;
    Ok(Exit::Ok)
}

pub(super) fn resume(root: &Root, stores: &Stores, args: &ResumeArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let req = ops::resume::Resume {
        name: t.name.clone(),
        reset_budget: args.reset_budget,
        wait: t.wait.wait(),
    };
    ops::resume::resume(&ctx(root, stores), req, &mut |r| {
        let (name, from) = (r.view.name(), r.from);
        let mut line = match from {
            Status::Active => format!("loop {name} is already active"),
            _ => format!("resumed loop {name} (was {from})"),
        };
        line += &match (
            r.dropped.is_empty() && r.budgets_reset.is_empty(),
            from == Status::Active,
        ) {
            (false, _) => {
                let mut said = Vec::new();
                if !r.dropped.is_empty() {
                    said.push(format!(
                        "its totals start over (they were {})",
                        totals(&r.dropped)
                    ));
                }
                if !r.budgets_reset.is_empty() {
                    said.push(format!(
                        "its budgets' spend starts over (was {})",
                        totals(&r.budgets_reset)
                    ));
                }
                format!("; {}", said.join("; "))
            }
            (true, true) => "; nothing changed".to_owned(),
            (true, false) => String::new(),
        };
        answer(&r.view, t.json.json, &line, out)
    })?;
    Ok(Exit::Ok)
}

/// `cost_usd=20.5 tokens=1200`.
fn totals(t: &BTreeMap<String, f64>) -> String {
    let shown: Vec<String> = t.iter().map(|(k, v)| format!("{k}={}", number(*v))).collect();
    shown.join(" ")
}

pub(super) fn reject(root: &Root, stores: &Stores, args: &RejectArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let req = ops::reject::Reject {
        name: t.name.clone(),
        reason: args.reason.clone(),
        await_id: args.await_id.clone(),
        halt: args.halt,
        wait: t.wait.wait(),
    };
    ops::reject::reject(&ctx(root, stores), req, &mut |r| {
        let name = r.view.name();
        let line = match &r.await_id {
            Some(id) => format!("rejected await {id} of loop {name}: it is halted"),
            None => format!("rejected loop {name}: it is halted"),
        };
        answer(&r.view, t.json.json, &line, out)
    })?;
    Ok(Exit::Ok)
}

pub(super) fn rm(root: &Root, stores: &Stores, args: &RmArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let req = ops::rm::Rm {
        name: t.name.clone(),
        force: args.force,
        wait: t.wait.wait(),
    };
    ops::rm::rm(&ctx(root, stores), req, &mut |r| match t.json.json {
        true => super::emit_json(out, r),
        false => super::emit(out, &format!("removed loop {}\n", r.name)),
    })?;
    Ok(Exit::Ok)
}
