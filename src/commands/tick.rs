//! `tick`: run one tick of a loop, as a scheduler does.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use super::render::safe;
use crate::cli::TickArgs;
use crate::config::LoopConfig;
use crate::error::{Exit, Result};
use crate::fires::FiredBy;
use crate::root::Root;
use crate::state::Outcome;
use crate::store::LoopStore;
use crate::tick::{self, Options, TickReport, View};

pub fn run(root: &Root, args: &TickArgs, out: &mut dyn Write) -> Result<Exit> {
    let store = crate::store::open(root, &args.name)?;
    let config = store.config()?;
    // A tick run by hand, or by an OS schedule installed as its user.
    let bound = args
        .timeout
        .map_or(crate::lock::Wait::Forever, crate::lock::Wait::For);
    super::allowed(root, store.as_ref(), crate::access::Action::Tick, bound)?;
    let fired_by = args
        .fired_by
        .unwrap_or_else(|| fired_by_default(root, &args.name));
    fired(
        root,
        store.as_ref(),
        &config,
        args.timeout,
        args.json.json,
        fired_by,
        out,
    )
}

/// What fired a tick whose command did not say: a person, unless no one
/// is at a terminal and the loop's schedule is installed in an OS
/// scheduler (whose entries, written by an older build, do not say).
fn fired_by_default(root: &Root, name: &str) -> FiredBy {
    if std::io::stdin().is_terminal() {
        return FiredBy::Person;
    }
    match crate::schedule::record::read(root, name) {
        Ok(Some(r)) => r.backend.into(),
        _ => FiredBy::Person,
    }
}

/// [`fired`] by a person (`approve --run`).
pub(super) fn here(
    root: &Root,
    store: &dyn LoopStore,
    config: &LoopConfig,
    timeout: Option<Duration>,
    json: bool,
    out: &mut dyn Write,
) -> Result<Exit> {
    fired(root, store, config, timeout, json, FiredBy::Person, out)
}

/// One tick of the loop `store` in this process, once its actor may run
/// one (`tick`, `approve --run`): refused on a host its `[runner]` does not
/// list; its report is written, then its schedule and people follow. A
/// tick an OS scheduler fired is recorded in the loop's ledger too.
fn fired(
    root: &Root,
    store: &dyn LoopStore,
    config: &LoopConfig,
    timeout: Option<Duration>,
    json: bool,
    fired_by: FiredBy,
    out: &mut dyn Write,
) -> Result<Exit> {
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
    let report = tick::run_configured(
        root,
        store,
        config,
        &Options {
            timeout,
            process_exits: true,
            fired_by,
            ..Options::default()
        },
    );
    if !matches!(fired_by, FiredBy::Daemon | FiredBy::Person) {
        ledger(store, config, fired_by, &report);
    }
    let report = report?;
    // The report first: a notify command or webhook never holds it back.
    let written = match json {
        true => super::emit_json(out, &report),
        false => super::emit(out, &human(&report)),
    }
    .and_then(|()| out.flush().map_err(crate::Error::Output));
    tick::after::follow(root, tick::after::Change::Ticked(store, &report));
    written?;
    Ok(report.exit())
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

/// The tick's line, then one line a gate that did not simply proceed; what
/// a gate or a step said is shown as [`safe`] shows it.
fn human(r: &TickReport) -> String {
    let mut line = r.line(View::Command);
    line.push('\n');
    if r.outcome == Outcome::Failed && r.step.is_some() {
        let stream = if r.step.as_ref().is_some_and(|s| !s.success()) || r.verifier.is_none() {
            ""
        } else {
            " --verifier"
        };
        line += &format!(
            "  output: automaton logs {} {}{stream} (--stderr for its errors)\n",
            r.loop_name, r.tick
        );
    }
    for v in r
        .decisions
        .iter()
        .filter(|v| v.decision.strength() > 0 || v.error.is_some())
    {
        // On a gate error the decision's reason is the error: say it once.
        let gate = safe(&v.gate);
        match &v.error {
            Some(e) => {
                line += &format!(
                    "  {} {gate}: {} on error: {}",
                    v.phase,
                    v.decision.name(),
                    safe(e)
                )
            }
            None => line += &format!("  {} {gate}: {}", v.phase, safe(&v.decision.to_string())),
        }
        line.push('\n');
    }
    line
}
