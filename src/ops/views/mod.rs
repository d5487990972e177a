//! The reads of the core: a typed view per read (list, status, review,
//! history, logs, fires), each computed from a [`Ctx`] and returned whole.
//! The command line renders a view for the terminal or prints it as JSON;
//! the console answers `Json(view)` or renders a page from it. Reading
//! takes no lock and writes nothing, a refusal included.

pub(crate) mod fires;
pub(crate) mod history;
pub(crate) mod logs;
pub(crate) mod review;
pub(crate) mod shadow;
pub(crate) mod status;

use super::Ctx;
use crate::access::{self, Access, Action, Denied};
use crate::error::{Error, Result};
use crate::store::LoopStore;
use crate::who::{Actor, Via};

/// Refuses the context's actor loop `dir` when they may not see it. The
/// `viewers` role is for a server's readers (docs/access.md): a person at
/// the command line reads what their OS user may open.
pub(crate) fn may_view(ctx: &Ctx, dir: &dyn LoopStore) -> Result<()> {
    if !held_to_viewers(&ctx.actor) {
        return Ok(());
    }
    may_see(&ctx.actor, &rules(ctx.stores, dir)).map_err(|d| Error::NotAllowed {
        name: dir.name().to_string(),
        command: "view",
        user: ctx.actor.user.clone(),
        role: d.role.as_str(),
        // Who may view is not told to one who may not.
        holders: None,
        record: Box::new(crate::access::Record::Unasked),
    })
}

/// Whether `actor` reads through a server, so `viewers` applies.
fn held_to_viewers(actor: &Actor) -> bool {
    matches!(actor.via, Via::Token | Via::Proxy)
}

/// The lists that say who may see loop `dir`: its own over the root's,
/// the root's alone when its loop.toml does not load.
pub(crate) fn rules(stores: &crate::store::Stores, dir: &dyn LoopStore) -> Access {
    crate::store::access_rules(dir, stores.access())
}

/// Whether `actor` may see a loop under `rules`: the one rule the API,
/// the pages and the live feed apply.
pub(crate) fn may_see(actor: &Actor, rules: &Access) -> std::result::Result<(), Denied> {
    access::check(actor, Action::View, rules)
}
