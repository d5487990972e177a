//! `tick`: run one tick of a loop, as a scheduler does.

use std::io::Write;

use super::render::safe;
use crate::cli::TickArgs;
use crate::error::{Exit, Result};
use crate::root::Root;
use crate::state::Outcome;
use crate::tick::{self, Options, TickReport, View};

pub fn run(root: &Root, args: &TickArgs, out: &mut dyn Write) -> Result<Exit> {
    let store = crate::store::open(root, &args.name)?;
    let config = store.config()?;
    // A tick run by hand, or by an OS schedule installed as its user.
    let wait = args.timeout.map_or(crate::lock::Wait::No, crate::lock::Wait::For);
    super::allowed(root, store.as_ref(), crate::access::Action::Tick, wait)?;
    // A loop pinned to other hosts does not run here.
    let runner = &config.runner;
    let here = crate::who::host();
    if !runner.allows(&here) {
        return Err(crate::Error::Refused {
            name: args.name.clone(),
            message: format!(
                "its [runner] hosts are {}; this is host {here}",
                runner.hosts.join(", ")
            ),
        });
    }
    let report = tick::run_configured(
        root,
        store.as_ref(),
        &config,
        &Options {
            timeout: args.timeout,
            process_exits: true,
            ..Options::default()
        },
    )?;
    tick::after::follow(root, tick::after::Change::Ticked(&report));
    if args.json.json {
        super::emit_json(out, &report)?;
    } else {
        super::emit(out, &human(&report))?;
    }
    Ok(report.exit())
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
