//! `tick`: run one tick of a loop, as a scheduler does.

use std::io::Write;

use crate::cli::TickArgs;
use crate::error::Result;
use crate::root::Root;
use crate::state::Outcome;
use crate::tick::{self, Options, TickReport};

pub fn run(root: &Root, args: &TickArgs, out: &mut dyn Write) -> Result<u8> {
    let report = tick::run(
        root,
        &args.name,
        &Options {
            timeout: args.timeout,
            ..Options::default()
        },
    )?;
    if report.stopped() {
        crate::schedule::loop_stopped(root, &report.loop_name);
    }
    if args.json.json {
        super::emit_json(out, &report)?;
    } else {
        super::emit(out, &human(&report))?;
    }
    Ok(report.exit_code())
}

/// One line a tick, then one line a gate that did not simply proceed.
fn human(r: &TickReport) -> String {
    let mut line = format!("{} tick {}: {}", r.loop_name, r.tick, r.outcome);
    if let Some(step) = &r.step {
        line += &format!(" (step {step}");
        if let Some(v) = &r.verifier {
            line += if v.success() {
                ", verifier passed"
            } else {
                ", verifier failed"
            };
        }
        line += ")";
    }
    if let Some(reason) = &r.reason
        && r.outcome != Outcome::Ran
    {
        line += &format!(": {reason}");
    }
    if let Some(t) = r.recovered_crash {
        line += &format!(" [tick {t} had crashed; recorded]");
    }
    line.push('\n');
    for v in r
        .decisions
        .iter()
        .filter(|v| v.decision.strength() > 0 || v.error.is_some())
    {
        line += &format!("  {} {}: {}", v.phase, v.gate, v.decision);
        if let Some(e) = &v.error {
            line += &format!(" (gate error: {e})");
        }
        line.push('\n');
    }
    line
}
