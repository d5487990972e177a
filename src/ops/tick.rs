//! A tick asked for by a person (`tick`, `approve --run`): run here, as
//! them, once they may; its report is the answer, then its schedule and
//! people follow.

use std::time::Duration;

use super::{Answer, Ctx};
use crate::access::Action;
use crate::config::LoopConfig;
use crate::error::Result;
use crate::fires::FiredBy;
use crate::store::LoopStore;
use crate::tick::after::Change;
use crate::tick::{Options, TickReport};

/// One tick of loop `name`, now.
pub(crate) struct Tick {
    pub name: String,
    /// How long to wait for the loop's lock (else forever, as `overlap`
    /// says).
    pub timeout: Option<Duration>,
    /// The front-end's process ends after this tick (the command line): a
    /// gate host built for it is left to the operating system.
    pub process_exits: bool,
    /// What fired it: a person, or the OS scheduler whose entry ran the
    /// command (its history and the loop's ledger say so).
    pub fired_by: FiredBy,
}

/// Runs a tick of loop `name` once the actor may.
pub(crate) fn tick(ctx: &Ctx<'_>, req: Tick, answer: Answer<'_, TickReport>) -> Result<TickReport> {
    let dir = ctx.allowed(&req.name, Action::Tick)?;
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
        ctx.stores.me(),
        &Options {
            timeout: req.timeout,
            process_exits: req.process_exits,
            actor: Some(&ctx.actor),
            fired_by: req.fired_by,
            ..Options::default()
        },
    );
    if !matches!(req.fired_by, FiredBy::Daemon | FiredBy::Person) {
        ledger(store, config, req.fired_by, &report);
    }
    let report = report?;
    // The answer first: a notify command or webhook never holds it back.
    let said = answer(&report);
    ctx.follow(Change::Ticked(&report, store));
    said.map(|()| report)
}

/// Adds the firing an OS scheduler made to the loop's ledger, as the
/// daemon adds its own: the scheduler that fires a loop keeps its ledger.
/// Best effort: a tick is never failed for its ledger.
fn ledger(store: &dyn LoopStore, config: &LoopConfig, fired_by: FiredBy, report: &Result<TickReport>) {
    let schedule = config
        .schedule
        .as_ref()
        .map(crate::schedule::describe)
        .unwrap_or_default();
    let by = format!("{} pid {}", crate::who::host(), std::process::id());
    let at = crate::clock::now();
    let mut fire = Some(crate::fires::Fire::of_tick(at, &schedule, &by, fired_by, report));
    if let Err(e) = store.record_fires(&mut |_| fire.take().into_iter().collect()) {
        tracing::warn!(
            "loop {:?}: the firing is not in its ledger: {}",
            store.name().as_str(),
            crate::error::with_causes(&e)
        );
    }
}
