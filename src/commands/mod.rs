//! The command line's front-end, one file per command. A command that
//! changes a loop parses its arguments, calls the core ([`crate::ops`]) as
//! this process's actor and renders the outcome; the others read (or
//! administer) and render.

mod access;
mod approve;
mod budget;
mod cancel;
mod check_gate;
mod daemon;
mod delegate;
mod doctor;
mod edit;
mod fires;
pub(crate) mod gate;
pub(crate) mod history;
mod init;
pub(crate) mod logs;
mod migrate;
mod new;
mod ops;
mod promote;
mod render;
mod replay;
pub(crate) mod review;
mod schedule;
mod shell;
pub(crate) mod status;
mod tick;
mod user;
pub(crate) mod validate;

use std::io::Write;

use crate::cli::{Cli, Command};
use crate::error::{Error, Exit, Result};
use crate::root::{Flags, Root};
use crate::store::Stores;

/// What a command's `--timeout` bounds besides the wait for the loop's
/// lock: every wait on a shared store's server.
fn server_bound(command: &Command) -> Option<std::time::Duration> {
    match command {
        Command::Pause(a) => a.target.wait.timeout,
        Command::Resume(a) => a.target.wait.timeout,
        Command::Approve(a) => a.target.wait.timeout,
        Command::Reject(a) => a.target.wait.timeout,
        Command::Rm(a) => a.target.wait.timeout,
        Command::CheckGate(a) => a.target.wait.timeout,
        Command::Tick(a) => a.timeout,
        Command::Cancel(a) => Some(a.timeout.unwrap_or(cancel::TIMEOUT)),
        _ => None,
    }
}

/// Runs the parsed command line, writing its output to `out`; returns how
/// a command that ran to its end exits.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<Exit> {
    // A clock past what can be recorded stamps and schedules nothing.
    if !matches!(cli.command, Command::Completions(_) | Command::Man(_)) {
        crate::clock::check()?;
    }
    let root = Flags {
        root: cli.root.as_deref(),
        store: cli.store.as_deref(),
        server_bound: server_bound(&cli.command),
    };
    let result = match cli.command {
        Command::Init(args) => init::run(root, &args, out),
        Command::New(args) => new::run(&Root::open(root)?, &args, out),
        Command::List(args) => {
            opened(root).and_then(|(r, s)| status::all(&r, &s, &args.status, args.json.json, out))
        }
        Command::Status(args) => opened(root).and_then(|(r, s)| match &args.name {
            Some(name) => status::one(&r, &s, name, args.json.json, out),
            None => status::all(&r, &s, &[], args.json.json, out),
        }),
        Command::History(args) => opened(root).and_then(|(r, s)| history::run(&r, &s, &args, out)),
        Command::Fires(args) => opened(root).and_then(|(r, s)| fires::run(&r, &s, &args, out)),
        Command::Budget(args) => opened(root).and_then(|(r, s)| budget::run(&r, &s, &args, out)),
        Command::Review(args) => opened(root).and_then(|(r, s)| review::run(&r, &s, &args, out)),
        Command::Logs(args) => opened(root).and_then(|(r, s)| logs::run(&r, &s, &args, out)),
        Command::Validate(args) => validate::run(root, &args, out),
        Command::Edit(args) => edit::run(&Root::open(root)?, &args, out),
        Command::Pause(args) => opened(root).and_then(|(r, s)| ops::pause(&r, &s, &args, out)),
        Command::Resume(args) => opened(root).and_then(|(r, s)| ops::resume(&r, &s, &args, out)),
        Command::Approve(args) => opened(root).and_then(|(r, s)| approve::run(&r, &s, &args, out)),
        Command::Reject(args) => opened(root).and_then(|(r, s)| ops::reject(&r, &s, &args, out)),
        Command::Cancel(args) => opened(root).and_then(|(r, s)| cancel::run(&r, &s, &args, out)),
        Command::Rm(args) => opened(root).and_then(|(r, s)| ops::rm(&r, &s, &args, out)),
        Command::Tick(args) => opened(root).and_then(|(r, s)| tick::run(&r, &s, &args, out)),
        Command::CheckGate(args) => check_gate::run(&Root::open(root)?, &args, out),
        Command::Gate(cmd) => gate::run(cmd, root, out),
        Command::Schedule(cmd) => schedule::run(&Root::open(root)?, &cmd, out),
        Command::Daemon(args) => daemon::run(&Root::open(root)?, &args, out),
        Command::Serve(args) => crate::serve::run(&Root::open(root)?, &args, out),
        Command::User(cmd) => user::run(&Root::open(root)?, &cmd, out),
        Command::Delegate(cmd) => delegate::run(&Root::open(root)?, &cmd, out),
        Command::Access(cmd) => access::run(&Root::open(root)?, &cmd, out),
        Command::Doctor(args) => doctor::run(&Root::open(root)?, &args, out),
        Command::Migrate(args) => migrate::run(root, &args, out),
        Command::Completions(args) => shell::completions(args.shell, out),
        Command::Man(args) => shell::man(&args, out),
    };
    result.map_err(|e| hint_name(e, root))
}

/// The root `flags` name and its store, opened: what a command that reads
/// or changes loops is given, as the console gives it the store it keeps.
fn opened(flags: Flags<'_>) -> Result<(Root, Stores)> {
    let root = Root::open(flags)?;
    let stores = Stores::open(&root)?;
    Ok((root, stores))
}

/// A loop, a stock gate or a user that does not exist, named with the one
/// most like the name typed, when one is.
fn hint_name(e: Error, root: Flags<'_>) -> Error {
    use crate::gate::GateErrorKind;
    let (typed, names): (&str, Vec<String>) = match &e {
        Error::NoSuchLoop { name, .. } => (
            name,
            Root::open(root)
                .and_then(|r| Stores::open(&r)?.list())
                .map(|dirs| dirs.iter().map(|d| d.name().to_string()).collect())
                .unwrap_or_default(),
        ),
        Error::NoSuchUser { name, .. } => (
            name,
            Root::open(root)
                .and_then(|r| crate::store::Stores::open(&r)?.users())
                .map(|users| users.into_iter().map(|u| u.name).collect())
                .unwrap_or_default(),
        ),
        Error::Gate(g) => match g.kind() {
            GateErrorKind::UnknownStock { name } => (name, stock_names()),
            _ => return e,
        },
        _ => return e,
    };
    let hint = crate::suggest::hint(typed, names.iter().map(String::as_str));
    match hint.is_empty() {
        true => e,
        false => Error::Hinted {
            error: Box::new(e),
            hint,
        },
    }
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

/// The stock gates' names.
pub(crate) fn stock_names() -> Vec<String> {
    crate::gate::stock_gates()
        .iter()
        .map(|s| s.name.to_owned())
        .collect()
}
