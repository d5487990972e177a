//! `approve` on the command line: the core gives the approval
//! ([`crate::ops::approve`]); with `--run`, the tick it releases runs in
//! the same command.

use std::io::Write;

use crate::cli::ApproveArgs;
use crate::error::{Exit, Result};
use crate::ops::approve::{Approve, Approved};
use crate::ops::tick::Tick;
use crate::root::Root;
use crate::store::Stores;

pub(super) fn run(root: &Root, stores: &Stores, args: &ApproveArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let ctx = super::ops::ctx(root, stores);
    let req = Approve {
        name: t.name.clone(),
        note: args.note.clone(),
        ahead: args.ahead,
        await_id: args.await_id.clone(),
        then_tick: args.run,
        wait: t.wait.wait(),
    };
    let approved = crate::ops::approve::approve(&ctx, req, &mut |a| {
        super::ops::answer(&a.view, t.json.json, &line(a, args.run), out)
    })?;
    if !(args.run && approved.releases()) {
        return Ok(Exit::Ok);
    }
    let dir = stores.get(&t.name)?;
    let config = dir.config()?;
    let req = Tick {
        name: t.name.clone(),
        timeout: t.wait.timeout,
        process_exits: true,
        fired_by: crate::fires::FiredBy::Person,
    };
    let report = crate::ops::tick::here(&ctx, &*dir, &config, &req, &mut |r| {
        super::tick::answer(r, t.json.json, out)
    })?;
    Ok(report.exit())
}

/// `approved await aw-3 of loop demo as ann (ap-7); 1 of 2 approvers so
/// far`, and with `--run`, why no tick runs, if none does.
fn line(a: &Approved, run: bool) -> String {
    let name = a.view.name();
    let what = match &a.given.await_id {
        Some(id) => format!("await {id} of loop {name}"),
        None => format!("the next await of loop {name}"),
    };
    let mut line = format!("approved {what} as {} ({})", a.given.by, a.given.id);
    if a.required > 1 {
        line += &format!("; {} of {} approvers so far", a.count, a.required);
    }
    if !run || a.releases() {
        return line;
    }
    let more = a.required.saturating_sub(a.count);
    match a.given.await_id {
        None => format!("{line}; not ticked: no await is pending"),
        Some(_) => format!(
            "{line}; not ticked: {more} more approval{} needed to release it",
            if more == 1 { " is" } else { "s are" }
        ),
    }
}
