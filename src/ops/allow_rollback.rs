//! `gate allow-rollback`: an operator lets a loop run an older signed
//! build of a gate, by lowering the gate's rollback floor to that version;
//! recorded with who did it and the floor it replaced.

use serde::Serialize;

use super::{Answer, Ctx, Looked};
use crate::access::Action;
use crate::error::{Error, Result};
use crate::history::EventKind;
use crate::lock::Wait;

/// Let loop `name` run gate `gate` (the name its `describe` gives) at
/// `version` and above.
pub(crate) struct AllowRollback {
    pub name: String,
    pub gate: String,
    pub version: String,
    pub wait: Wait,
}

/// The loop, its floor lowered, and the floor it had.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct Allowed {
    pub view: Looked,
    #[serde(skip)]
    pub gate: String,
    #[serde(skip)]
    pub from: Option<String>,
    #[serde(skip)]
    pub to: String,
}

pub(crate) fn allow_rollback(
    ctx: &Ctx<'_>,
    req: AllowRollback,
    answer: Answer<'_, Allowed>,
) -> Result<Allowed> {
    if semver::Version::parse(&req.version).is_err() {
        return Err(Error::InvalidVersion { version: req.version });
    }
    let dir = ctx.allowed(&req.name, Action::AllowRollback)?;
    let by = ctx.actor.user.clone();
    let gate = crate::bounds::name(req.gate);
    let to = crate::bounds::name(req.version);
    let mut from = None;
    let state = ctx.update(&*dir, "gate allow-rollback", req.wait, |s| {
        from = s.signed_versions.insert(gate.clone(), to.clone());
        Ok(vec![EventKind::RollbackAllowed {
            by,
            gate: gate.clone(),
            from: from.clone(),
            to: to.clone(),
        }])
    })?;
    let allowed = Allowed {
        view: Looked { dir, state },
        gate,
        from,
        to,
    };
    answer(&allowed).map(|()| allowed)
}
