//! `reject`: the loop's pending await (or, with `halt`, the loop whatever
//! it awaits) is refused; the loop halts, and the approvals given for the
//! await are dropped.

use serde::Serialize;

use super::{Answer, Ctx, Looked, refused};
use crate::access::Action;
use crate::bounds;
use crate::error::Result;
use crate::history::{Dropped, EventKind};
use crate::lock::Wait;
use crate::state::{Refusal, Status};
use crate::tick::after::Change;

/// Reject loop `name`'s pending await, saying why.
pub(crate) struct Reject {
    pub name: String,
    pub reason: Option<String>,
    /// The await meant: refused when another is pending.
    pub await_id: Option<String>,
    /// Halt it even when no await is pending.
    pub halt: bool,
    /// How long to wait for the loop's lock.
    pub wait: Wait,
}

/// The loop, halted: its view is the answer.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct Rejected {
    pub view: Looked,
    /// The await it closed, if one was pending.
    #[serde(skip)]
    pub await_id: Option<String>,
}

/// A named await that is not the pending one.
pub(crate) fn not_pending(named: &str, pending: Option<&str>) -> Refusal {
    Refusal(match pending {
        Some(p) => format!("await {named} is not pending; {p} is"),
        None => format!("await {named} is not pending; no await is"),
    })
}

pub(crate) fn reject(ctx: &Ctx<'_>, req: Reject, answer: Answer<'_, Rejected>) -> Result<Rejected> {
    let dir = ctx.allowed(&req.name, Action::Reject)?;
    let by = ctx.actor.user.clone();
    let reason = bounds::opt_text(req.reason);
    let mut rejected = None;
    let state = ctx.update(&*dir, "reject", req.wait, |s| {
        let pending = s.awaiting.as_ref().map(|a| a.id.clone());
        if let Some(named) = &req.await_id
            && pending.as_ref() != Some(named)
        {
            return Err(refused(&*dir)(not_pending(named, pending.as_deref())));
        }
        if pending.is_none() && s.status != Status::AwaitingApproval && !req.halt {
            return Err(refused(&*dir)(Refusal(format!(
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
        ctx.follow(Change::Stopped(dir.name()));
    }
    let mut notice = ctx.operated(&*dir, &state, "reject");
    (notice.reason, notice.await_id) = (state.status_reason.clone(), rejected.clone());
    let rejected = Rejected {
        view: Looked { dir, state },
        await_id: rejected,
    };
    let said = answer(&rejected);
    ctx.follow(Change::Operated(&*rejected.view.dir, Box::new(notice)));
    said.map(|()| rejected)
}
