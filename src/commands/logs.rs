//! `logs`: a tick's step or verifier output from `runs/<tick>/`, as the
//! tick wrote it; `--follow` keeps printing while that tick runs. The file
//! is reached from the loop's directory without following a link, and one
//! that is not a regular file (a FIFO the step left) is refused at once.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use crate::cli::LogsArgs;
use crate::error::{Error, Exit, Result};
use crate::history::EventKind;
use crate::root::Root;
use crate::runs::{self, Runs};
use crate::store::LoopStore;

/// How often `--follow` looks for more output.
const POLL: Duration = Duration::from_millis(100);

pub fn run(root: &Root, args: &LogsArgs, out: &mut dyn Write) -> Result<Exit> {
    let dir = crate::store::open(root, &args.name)?;
    if args.gates {
        return gate_lines(dir.as_ref(), args.tick, out);
    }
    let state = dir.load()?;
    let running = state.in_flight.as_ref().map(|f| f.tick);
    let Some(tick) = args
        .tick
        .or(running)
        .or(state.last_tick.as_ref().map(|t| t.number))
    else {
        return Err(Error::Refused {
            name: dir.name().to_string(),
            message: "no tick has run its step yet, so there is no output".into(),
        });
    };
    let what = if args.verifier { "verifier" } else { "step" };
    let base = dir.base_dir();
    let run_path = runs::run_path(base, tick);
    let name = runs::output_name(what, args.stderr);
    let file_path = run_path.join(&name);
    let open_run = || match Runs::open(base)? {
        Some(runs) => runs.run(tick),
        None => Ok(None),
    };
    let in_flight = || {
        dir.load()
            .is_ok_and(|s| s.in_flight.is_some_and(|f| f.tick == tick))
    };
    let mut run = open_run()?;
    if args.follow {
        // The tick may not have made its run directory yet.
        while run.is_none() && in_flight() {
            std::thread::sleep(POLL);
            run = open_run()?;
        }
    }
    // A stream that said nothing leaves no file (it is made at its first
    // byte), so a missing file is no output when the process ran.
    let ran = run.is_some() && (!args.verifier || running == Some(tick) || verifier_ran(dir.as_ref(), tick));
    let Some(run) = run.filter(|_| ran) else {
        let elsewhere = state
            .last_tick
            .as_ref()
            .filter(|t| t.number == tick)
            .and_then(|t| t.host.clone())
            .filter(|h| *h != crate::who::host());
        if let Some(host) = elsewhere {
            return Err(Error::Refused {
                name: dir.name().to_string(),
                message: format!(
                    "tick {tick} ran on host {host}; its output is in {} there",
                    run_path.display()
                ),
            });
        }
        let missing = if open_run()?.is_some() {
            file_path
        } else {
            run_path
        };
        return Err(Error::NoOutput {
            name: dir.name().to_string(),
            tick,
            what: if args.verifier {
                "verifier output"
            } else {
                "step output"
            },
            path: missing,
        });
    };
    let mut offset = 0;
    loop {
        let running = args.follow && in_flight();
        // Opened again each time: the step's file is made at its first
        // byte. Never through a link, never a FIFO (refused at once).
        if let Some((file, _)) = run.open_read(&name)? {
            offset = copy_from(file, &file_path, offset, out)?;
        }
        if !running {
            break;
        }
        std::thread::sleep(POLL);
    }
    Ok(Exit::Ok)
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

/// Whether the history records a verifier for tick `tick`.
fn verifier_ran(dir: &dyn LoopStore, tick: u64) -> bool {
    dir.history().is_ok_and(|h| {
        h.events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Tick { tick: t, verifier: Some(_), .. } if *t == tick))
    })
}

/// Copies what `f` (the file at `path`) holds past `offset` to `out`;
/// returns the new offset.
fn copy_from(mut f: File, path: &Path, offset: u64, out: &mut dyn Write) -> Result<u64> {
    io::Seek::seek(&mut f, io::SeekFrom::Start(offset)).map_err(Error::io("reading", path))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = offset;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("reading", path)(e)),
        };
        out.write_all(&buf[..n]).map_err(Error::Output)?;
        at += n as u64;
    }
    out.flush().map_err(Error::Output)?;
    Ok(at)
}
