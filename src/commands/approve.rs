//! `approve`: an approval for the loop's pending await (or, `--ahead`, its
//! next one); with `--run`, the tick it releases, in the same command.

use std::io::Write;

use super::ops::{not_pending, operated, refused, report, tell};
use crate::access::Action;
use crate::bounds;
use crate::cli::ApproveArgs;
use crate::config::{ApprovalRules, Bind};
use crate::error::{Exit, Result};
use crate::history::EventKind;
use crate::root::Root;
use crate::state::{Approval, At, Refusal, State, Status};
use crate::store::{LoopStore, Stores};

pub fn run(root: &Root, stores: &Stores, args: &ApproveArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let dir = stores.get(&t.name)?;
    let dir = &*dir;
    // `--run` ticks as `tick` does: its actor needs that role too, and is
    // refused before anything is given.
    if args.run {
        super::allowed(root, dir, Action::Tick, t.wait.wait())?;
    }
    // A change to the rules is approved by the approvers under the rules
    // it changed, not by those it names.
    let defaults = root.settings().access.clone();
    record_config_first(root, dir, t.wait.wait())?;
    let actor = match crate::rules::approvers_of_change(&dir.load()?, &defaults) {
        Some(before) => {
            let actor = crate::who::actor();
            crate::access::require(dir, &actor, Action::Approve, &before, t.wait.wait())?;
            actor
        }
        None => super::allowed(root, dir, Action::Approve, t.wait.wait())?,
    };
    let by = actor.user.clone();
    let mut given = None;
    let mut rules = ApprovalRules::default();
    let state = super::update_loop(root, dir, "approve", t.wait.wait(), |s| {
        if let Some(before) = crate::rules::approvers_of_change(s, &defaults)
            && crate::access::check(&actor, Action::Approve, &before).is_err()
        {
            return Err(refused(dir)(Refusal(format!(
                "the rules changed meanwhile, and {by} is not an approver under the rules before the change"
            ))));
        }
        rules = dir.config()?.approval;
        let (approval, events) = give(s, dir, args, &by, &rules)?;
        given = Some(approval);
        Ok(events)
    })?;
    let given = given.expect("an approval was given");
    // Outside the lock: a daemon serving the root starts the tick now.
    crate::tick::after::follow(root, crate::tick::after::Change::Approved(dir, state.version));
    let what = match &given.await_id {
        Some(id) => format!("await {id} of loop {}", dir.name()),
        None => format!("the next await of loop {}", dir.name()),
    };
    let mut line = format!("approved {what} as {by} ({})", given.id);
    let count = counted(&state, &given, rules.bind);
    let required = rules.required as usize;
    if required > 1 {
        line += &format!("; {count} of {required} approvers so far");
    }
    let mut notice = operated(root, dir, &state, "approve", actor);
    (notice.reason, notice.await_id) = (given.note.clone(), given.await_id.clone());
    if !args.run {
        return tell(
            root,
            dir,
            Some(notice),
            report(dir, &state, t.json.json, line, out),
            out,
        );
    }
    let written = match (given.await_id.is_some(), count >= required) {
        (true, true) => None,
        (false, _) => Some(format!("{line}; not ticked: no await is pending")),
        (true, false) => Some(format!(
            "{line}; not ticked: {} more approval{} needed to release it",
            required - count,
            if required - count == 1 { " is" } else { "s are" }
        )),
    };
    if let Some(line) = written {
        return tell(
            root,
            dir,
            Some(notice),
            report(dir, &state, t.json.json, line, out),
            out,
        );
    }
    report(dir, &state, t.json.json, line, out)?;
    let _ = tell(root, dir, Some(notice), Ok(Exit::Ok), out);
    let config = dir.config()?;
    super::tick::here(root, dir, &config, t.wait.timeout, false, out)
}

/// Records a config changed since the loop last recorded one before the
/// approval is checked, when a change to the rules would await one, so it
/// is approved under the rules before it.
fn record_config_first(root: &Root, dir: &dyn LoopStore, wait: crate::lock::Wait) -> Result<()> {
    let (Ok(config), Ok(state)) = (dir.config(), dir.load()) else {
        return Ok(());
    };
    let now = crate::rules::Current::of(root.path(), &config);
    if now.unrecorded(&state) && crate::rules::may_await(&config, &state) {
        super::update_loop(root, dir, "approve", wait, |_| Ok(Vec::new()))?;
    }
    Ok(())
}

/// Gives `by`'s approval on `s`: for the pending await, the one `--await`
/// names, or (`--ahead`) the next; drops the expired ones first. The
/// approval and the events that record it.
fn give(
    s: &mut State,
    dir: &dyn LoopStore,
    args: &ApproveArgs,
    by: &str,
    rules: &ApprovalRules,
) -> Result<(Approval, Vec<EventKind>)> {
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
    // Where the worktree stands: with `bind = "commit"`, the approval is
    // bound to its whole snapshot, uncommitted changes and untracked files
    // too.
    let at = match &s.worktree {
        Some(w) => crate::worktree::at(&w.path, rules.bind == Bind::Commit).0,
        None => At::default(),
    };
    // A loop an older build left awaiting has no await on record yet.
    if s.status == Status::AwaitingApproval
        && let Some(opened) = s.open_await(s.tick + 1, Vec::new(), at.clone(), now)
    {
        events.push(EventKind::Awaiting { awaiting: opened });
    }
    let target = match (args.ahead, &s.awaiting) {
        (true, _) => None,
        (false, Some(open)) => Some(open.id.clone()),
        // Halted and completed loops are refused by `approve` itself.
        (false, None) if matches!(s.status, Status::Halted | Status::Completed) => None,
        (false, None) => {
            return Err(refused(dir)(Refusal(format!(
                "it is {}, not awaiting approval; pass --ahead to approve its next await in advance",
                s.status
            ))));
        }
    };
    if let Some(named) = &args.await_id
        && target.as_ref() != Some(named)
    {
        return Err(refused(dir)(not_pending(named, target.as_deref())));
    }
    let note = bounds::opt_text(args.note.clone());
    let approval = s
        .approve(by, note, now, target.as_deref(), at)
        .map_err(refused(dir))?;
    events.push(EventKind::Approved {
        by: by.to_owned(),
        id: approval.id.clone(),
        note: approval.note.clone(),
        await_id: approval.await_id.clone(),
        head: approval.head.clone(),
        snapshot: approval.snapshot.clone(),
    });
    Ok((approval, events))
}

/// The distinct people whose approvals count for the await `given` is for:
/// with `bind = "commit"`, only those given on the same worktree (commit
/// and snapshot).
fn counted(state: &State, given: &Approval, bind: Bind) -> usize {
    if bind == Bind::Await {
        return state.approvers_of(given.await_id.as_deref());
    }
    let mut by: Vec<&str> = state
        .pending_approvals
        .iter()
        .filter(|a| a.await_id == given.await_id && a.head == given.head && a.snapshot == given.snapshot)
        .map(|a| a.by.as_str())
        .collect();
    by.sort_unstable();
    by.dedup();
    by.len()
}
