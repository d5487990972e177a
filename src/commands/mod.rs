//! One file per verb. Each is short: resolve the loop, take the lock if it
//! changes the loop, load, change the typed state, save, render.

mod check_gate;
mod daemon;
pub mod gate;
mod history;
mod init;
mod new;
mod ops;
mod render;
mod replay;
mod schedule;
mod status;
mod tick;

use std::io::Write;

use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::error::{Error, Result};
use crate::history::{Event, EventKind};
use crate::lock::{self, Holder, Wait};
use crate::root::Root;
use crate::state::State;
use crate::store::LoopDir;

/// Runs the parsed command line, writing its output to `out`; returns the
/// exit code of a command that succeeded.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<u8> {
    let root = cli.root.as_deref();
    match cli.command {
        Command::Init => init::run(root, out),
        Command::New(args) => new::run(&Root::open(root)?, &args, out),
        Command::List(args) => status::all(&Root::open(root)?, args.json, out),
        Command::Status(args) => match &args.name {
            Some(name) => status::one(&Root::open(root)?, name, args.json.json, out),
            None => status::all(&Root::open(root)?, args.json.json, out),
        },
        Command::History(args) => history::run(&Root::open(root)?, &args, out),
        Command::Pause(args) => ops::pause(&Root::open(root)?, &args, out),
        Command::Resume(args) => ops::resume(&Root::open(root)?, &args, out),
        Command::Approve(args) => ops::approve(&Root::open(root)?, &args, out),
        Command::Reject(args) => ops::reject(&Root::open(root)?, &args, out),
        Command::Rm(args) => ops::rm(&Root::open(root)?, &args, out),
        Command::Tick(args) => tick::run(&Root::open(root)?, &args, out),
        Command::CheckGate(args) => check_gate::run(&Root::open(root)?, &args, out),
        Command::Gate(cmd) => gate::run(cmd, root, out),
        Command::Schedule(cmd) => schedule::run(&Root::open(root)?, &cmd, out),
        Command::Daemon(args) => daemon::run(&Root::open(root)?, &args, out),
        Command::Completions(args) => {
            clap_complete::generate(args.shell, &mut Cli::command(), "automaton", out);
            Ok(0)
        }
    }
}

/// The one shape of every operator change: take the loop's lock, re-read
/// the state under it, let `change` edit it (returning the events to
/// record), write it as the next version, append the events.
pub(crate) fn update_loop(
    dir: &LoopDir,
    command: &str,
    wait: Wait,
    change: impl FnOnce(&mut State) -> Result<Vec<EventKind>>,
) -> Result<State> {
    lock::with_lock(dir, Holder::me(command), wait, |held| {
        let mut state = dir.read_state()?;
        let events = change(&mut state)?;
        dir.write_state(held, &mut state)?;
        let at = state.updated_at;
        let events: Vec<Event> = events.into_iter().map(|kind| Event { at, kind }).collect();
        crate::history::append(dir, held, &events)?;
        Ok(state)
    })
}

/// Writes to stdout, turning a failure into an error main can report (a
/// closed pipe, as in `automaton history x | head`, is not worth one).
pub(crate) fn emit(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes()).map_err(Error::Output)
}

pub(crate) fn emit_json(out: &mut dyn Write, value: &impl serde::Serialize) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value).expect("output serialises");
    text.push('\n');
    emit(out, &text)
}
