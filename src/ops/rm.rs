//! `rm`: a loop is removed, its state and history with it; a loop that
//! may still run is refused unless `force`.

use serde::Serialize;

use super::{Answer, Ctx};
use crate::access::Action;
use crate::error::{Error, Result};
use crate::lock::{Holder, Wait};

/// Remove loop `name`.
pub(crate) struct Rm {
    pub name: String,
    /// Even when it is active or awaiting approval.
    pub force: bool,
    /// How long to wait for the loop's lock.
    pub wait: Wait,
}

/// The loop removed: the answer.
#[derive(Serialize)]
pub(crate) struct Removed {
    pub name: String,
    pub removed: bool,
}

pub(crate) fn rm(ctx: &Ctx<'_>, req: Rm, answer: Answer<'_, Removed>) -> Result<Removed> {
    let dir = ctx.allowed(&req.name, Action::Rm)?;
    let mut session = dir.lock(Holder::me("rm"), req.wait)?;
    if !req.force {
        let state = session.load(ctx.stores.me())?.state;
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
    let removed = Removed {
        name: dir.name().to_string(),
        removed: true,
    };
    let said = answer(&removed);
    crate::schedule::loop_removed(ctx.root, dir.name());
    said.map(|()| removed)
}
