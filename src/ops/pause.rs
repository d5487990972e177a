//! `pause`: the loop stops ticking until it is resumed; nothing else
//! about it changes.

use serde::Serialize;

use super::{Answer, Ctx, Looked};
use crate::access::Action;
use crate::bounds;
use crate::error::Result;
use crate::history::EventKind;
use crate::lock::Wait;
use crate::state::Status;
use crate::tick::after::Change;

/// Pause loop `name`, saying why.
pub(crate) struct Pause {
    pub name: String,
    pub reason: Option<String>,
    /// How long to wait for the loop's lock.
    pub wait: Wait,
}

/// The loop, paused: its view is the answer.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct Paused {
    pub view: Looked,
    /// It was paused already: nothing changed, nothing was recorded.
    #[serde(skip)]
    pub already: bool,
}

pub(crate) fn pause(ctx: &Ctx<'_>, req: Pause, answer: Answer<'_, Paused>) -> Result<Paused> {
    let dir = ctx.allowed(&req.name, Action::Pause)?;
    let by = ctx.actor.user.clone();
    let reason = bounds::opt_text(req.reason);
    let mut already = false;
    let state = ctx.update(&*dir, "pause", req.wait, |s| {
        // Paused already: nothing changes, nothing is recorded.
        if s.status == Status::Paused {
            already = true;
            return Ok(Vec::new());
        }
        s.pause(reason.clone()).map_err(super::refused(&*dir))?;
        Ok(vec![EventKind::Paused { by, reason }])
    })?;
    let notice = (!already).then(|| {
        let mut n = ctx.operated(&*dir, &state, "pause");
        n.reason = state.status_reason.clone();
        n
    });
    let paused = Paused {
        view: Looked { dir, state },
        already,
    };
    let said = answer(&paused);
    if let Some(notice) = notice {
        ctx.follow(Change::Operated(&*paused.view.dir, Box::new(notice)));
    }
    said.map(|()| paused)
}
