//! `logs`: a tick's step or verifier output ([`crate::ops::views::logs`]),
//! as the tick wrote it: its standard output, or its standard error when
//! that is all it wrote, saying so, and saying when the other stream has
//! output too; `--follow` keeps printing while that tick runs, standard
//! error to standard error. `--gates`: what the tick's gates logged.

use std::io::{self, Write};

use crate::cli::LogsArgs;
use crate::error::{Error, Exit, Result};
use crate::history::EventKind;
use crate::ops::Ctx;
use crate::ops::views::logs::{self as view, Output, POLL, Request, copy_from, find};
use crate::root::Root;
use crate::runs;
use crate::store::{LoopStore, Stores};

pub(crate) fn run(root: &Root, stores: &Stores, args: &LogsArgs, out: &mut dyn Write) -> Result<Exit> {
    if args.gates {
        let dir = stores.get(&args.name)?;
        return gate_lines(dir.as_ref(), args.tick, out);
    }
    let ctx = Ctx::own(root, stores);
    let req = Request {
        tick: args.tick,
        verifier: args.verifier,
        stderr: args.stderr,
    };
    if args.follow {
        follow(&ctx, &args.name, req, out)?;
        return Ok(Exit::Ok);
    }
    let output = view::logs(&ctx, &args.name, req)?;
    if output.stderr_instead {
        tracing::warn!(
            "tick {}'s {} wrote nothing to standard output; this is its standard error ({})",
            output.tick,
            output.what,
            runs::output_name(output.what, true)
        );
    }
    let other = (output.other_bytes > 0).then(|| other_stream(&args.name, &output));
    output.write_to(out)?;
    if let Some(other) = other {
        tracing::warn!("{other}");
    }
    Ok(Exit::Ok)
}

/// What the stream not shown holds, and the command that shows it:
/// `tick 3's step also wrote 42 bytes to standard error: automaton logs
/// NAME 3 --stderr`.
fn other_stream(name: &str, o: &Output) -> String {
    let (stream, flag) = match o.stderr {
        true => ("standard output", ""),
        false => ("standard error", " --stderr"),
    };
    let verifier = if o.what == "verifier" { " --verifier" } else { "" };
    format!(
        "tick {}'s {} also wrote {} bytes to {stream}: automaton logs {name} {}{verifier}{flag}",
        o.tick, o.what, o.other_bytes, o.tick
    )
}

/// Prints the output `req` names, and what it gains until the tick ends;
/// standard error, asked for or not, beside it to this process's standard
/// error.
fn follow(ctx: &Ctx, name: &str, req: Request, out: &mut dyn Write) -> Result<()> {
    let found = find(ctx, name, req, true)?;
    let w = &found.wanted;
    let (file_name, file_path) = (w.name(), w.path());
    let err_name = runs::output_name(w.what, true);
    let err_path = w.run_path.join(&err_name);
    let mut follow_err = (!w.stderr).then_some(0);
    let mut offset = 0;
    loop {
        let running = w.in_flight();
        // Opened again each time: the step's file is made at its first
        // byte. Never through a link, never a FIFO (refused at once).
        if let Some((file, _)) = found.run.open_read(&file_name)? {
            offset = copy_from(file, &file_path, offset, out)?;
        }
        if let Some(at) = follow_err
            && let Some((file, _)) = found.run.open_read(&err_name)?
        {
            follow_err = Some(copy_from(file, &err_path, at, &mut io::stderr().lock())?);
        }
        if !running {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// What each gate of tick `tick` (default: the last evaluated) logged, from
/// its gate events, under the gate's label and phase (gates that logged
/// nothing print nothing).
fn gate_lines(dir: &dyn LoopStore, tick: Option<u64>, out: &mut dyn Write) -> Result<Exit> {
    let history = dir.history()?;
    let last = history.events.iter().rev().find_map(|e| match &e.kind {
        EventKind::Gate { tick, .. } => Some(*tick),
        _ => None,
    });
    let Some(tick) = tick.or(last) else {
        return Err(Error::Refused {
            name: dir.name().to_string(),
            message: "no gate has been evaluated yet".into(),
        });
    };
    let mut text = String::new();
    for e in &history.events {
        if let EventKind::Gate { tick: t, verdict, .. } = &e.kind
            && *t == tick
        {
            for line in &verdict.logs {
                text.push_str(&format!("{} ({}): {line}\n", verdict.gate, verdict.phase));
            }
        }
    }
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}
