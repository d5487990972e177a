//! `approve`: an approval for the loop's pending await (or, `ahead`, its
//! next one). A change to the rules is approved by the approvers under the
//! rules it changed, not by those it names.

use serde::Serialize;

use super::reject::not_pending;
use super::{Answer, Ctx, Looked, refused};
use crate::access::Action;
use crate::bounds;
use crate::config::{ApprovalRules, Bind};
use crate::domain::Approval;
use crate::error::Result;
use crate::history::EventKind;
use crate::lock::Wait;
use crate::state::{At, Refusal, State, Status};
use crate::store::LoopStore;
use crate::tick::after::Change;

/// Approve loop `name`'s pending await (or its next one).
pub(crate) struct Approve {
    pub name: String,
    pub note: Option<String>,
    /// For its next await, given in advance.
    pub ahead: bool,
    /// The await meant: refused when another is pending.
    pub await_id: Option<String>,
    /// The tick it releases is to run next (`approve --run`): the actor
    /// needs the role to tick too, checked before anything is given.
    pub then_tick: bool,
    /// How long to wait for the loop's lock.
    pub wait: Wait,
}

/// The approval given, and the loop after it: its view is the answer.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct Approved {
    pub view: Looked,
    #[serde(skip)]
    pub given: Approval,
    /// The distinct people whose approvals count for the await so far.
    #[serde(skip)]
    pub count: usize,
    /// How many it needs.
    #[serde(skip)]
    pub required: usize,
}

impl Approved {
    /// The approval releases the pending await (a tick may run now).
    pub(crate) fn releases(&self) -> bool {
        self.given.await_id.is_some() && self.count >= self.required
    }
}

pub(crate) fn approve(ctx: &Ctx<'_>, req: Approve, answer: Answer<'_, Approved>) -> Result<Approved> {
    let dir = ctx.stores.get(&req.name)?;
    if req.then_tick {
        let rules = crate::store::access_rules(&*dir, ctx.stores.access());
        ctx.require(&*dir, Action::Tick, &rules)?;
    }
    let defaults = ctx.stores.access().clone();
    record_config_first(ctx, &*dir, req.wait)?;
    let rules = crate::rules::approvers_of_change(&dir.load()?, &defaults)
        .unwrap_or_else(|| crate::store::access_rules(&*dir, &defaults));
    ctx.require(&*dir, Action::Approve, &rules)?;
    let by = ctx.actor.user.clone();
    let mut given = None;
    let mut approval = ApprovalRules::default();
    let state = ctx.update(&*dir, "approve", req.wait, |s| {
        if let Some(before) = crate::rules::approvers_of_change(s, &defaults)
            && crate::access::check(&ctx.actor, Action::Approve, &before).is_err()
        {
            return Err(refused(&*dir)(Refusal(format!(
                "the rules changed meanwhile, and {by} is not an approver under the rules before the change"
            ))));
        }
        approval = dir.config()?.approval;
        let (a, events) = give(s, &*dir, &req, &by, &approval)?;
        given = Some(a);
        Ok(events)
    })?;
    let given = given.expect("an approval was given");
    let mut notice = ctx.operated(&*dir, &state, "approve");
    (notice.reason, notice.await_id) = (given.note.clone(), given.await_id.clone());
    let approved = Approved {
        count: counted(&state, &given, approval.bind),
        required: approval.required as usize,
        given,
        view: Looked { dir, state },
    };
    let said = answer(&approved);
    ctx.follow(Change::Operated(&*approved.view.dir, Box::new(notice)));
    said.map(|()| approved)
}

/// Records a config changed since the loop last recorded one before the
/// approval is checked, when a change to the rules would await one, so it
/// is approved under the rules before it.
fn record_config_first(ctx: &Ctx<'_>, dir: &dyn LoopStore, wait: Wait) -> Result<()> {
    let (Ok(config), Ok(state)) = (dir.config(), dir.load()) else {
        return Ok(());
    };
    let now = crate::rules::Current::of(ctx.root.path(), &config);
    if now.unrecorded(&state) && crate::rules::may_await(&config, &state) {
        ctx.update(dir, "approve", wait, |_| Ok(Vec::new()))?;
    }
    Ok(())
}

/// Gives `by`'s approval on `s`: for the pending await, the one the
/// request names, or (`ahead`) the next; drops the expired ones first. The
/// approval and the events that record it.
fn give(
    s: &mut State,
    dir: &dyn LoopStore,
    req: &Approve,
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
    let target = match (req.ahead, &s.awaiting) {
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
    if let Some(named) = &req.await_id
        && target.as_ref() != Some(named)
    {
        return Err(refused(dir)(not_pending(named, target.as_deref())));
    }
    let note = bounds::opt_text(req.note.clone());
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
