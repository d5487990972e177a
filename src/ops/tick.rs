//! A tick asked for by a person (`tick`, `approve --run`): run here, as
//! them, once they may; its report is the answer, then its schedule and
//! people follow.

use std::time::Duration;

use super::{Answer, Ctx};
use crate::access::Action;
use crate::config::LoopConfig;
use crate::error::Result;
use crate::lock::Wait;
use crate::store::LoopStore;
use crate::tick::after::Change;
use crate::tick::{Options, TickReport};

/// One tick of loop `name`, now.
pub struct Tick {
    pub name: String,
    /// How long to wait for the loop's lock (else forever, as `overlap`
    /// says).
    pub timeout: Option<Duration>,
    /// The front-end's process ends after this tick (the command line): a
    /// gate host built for it is left to the operating system.
    pub process_exits: bool,
}

/// Runs a tick of loop `name` once the actor may.
pub fn tick(ctx: &Ctx<'_>, req: Tick, answer: Answer<'_, TickReport>) -> Result<TickReport> {
    let bound = req.timeout.map_or(Wait::Forever, Wait::For);
    let dir = ctx.allowed(&req.name, Action::Tick, bound)?;
    let config = dir.config()?;
    here(ctx, &*dir, &config, &req, answer)
}

/// One tick of the loop `store` in this process, whose actor may run one
/// (`tick`, and `approve --run` once it approved; `req.name` is not read):
/// refused on a host its `[runner]` does not list.
pub(crate) fn here(
    ctx: &Ctx<'_>,
    store: &dyn LoopStore,
    config: &LoopConfig,
    req: &Tick,
    answer: Answer<'_, TickReport>,
) -> Result<TickReport> {
    // A loop pinned to other hosts does not run here.
    let runner = &config.runner;
    let here = crate::who::host();
    if !runner.allows(&here) {
        return Err(crate::Error::Refused {
            name: store.name().to_string(),
            message: format!(
                "its [runner] hosts are {}; this is host {here}",
                runner.hosts.join(", ")
            ),
        });
    }
    let report = crate::tick::run_configured(
        ctx.root,
        store,
        config,
        &Options {
            timeout: req.timeout,
            process_exits: req.process_exits,
            actor: Some(&ctx.actor),
            ..Options::default()
        },
    )?;
    // The answer first: a notify command or webhook never holds it back.
    let said = answer(&report);
    ctx.follow(Change::Ticked(&report, store));
    said.map(|()| report)
}
