//! The `automaton` binary: parse the command line, set up logging, run the
//! command, and report an error once, with its causes, as an exit code.

// A Windows path is a few bytes wider than a Unix one, which tips the
// crate's error (paths in many variants) past clippy's bound for an
// `Err`; boxing it would change every platform's build for that.
#![cfg_attr(windows, allow(clippy::result_large_err))]

use std::io::{self, IsTerminal};
use std::process::ExitCode;

use clap::Parser;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{Layer, Registry};

use automaton::cli::Cli;

fn main() -> ExitCode {
    // A shell asking for completions (see `automaton completions`) gets them
    // here, and nothing else runs.
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command)
        .var(automaton::complete::COMPLETE_VAR)
        .complete();
    let cli = Cli::parse();
    // The daemon logs one line a tick, the console its sign-ins: info is
    // their default level.
    let chatty = matches!(
        cli.command,
        automaton::cli::Command::Daemon(_) | automaton::cli::Command::Serve(_)
    );
    init_logging(cli.verbose, cli.quiet, chatty);
    let mut stdout = io::stdout().lock();
    match automaton::commands::run(cli, &mut stdout) {
        Ok(exit) => ExitCode::from(exit.exit_code()),
        Err(err) => {
            let code = err.exit_code();
            if code != 0 {
                // One line, whatever a reason or a holder it quotes holds.
                let text = automaton::error::with_causes(&err);
                eprintln!("error: {}", automaton::term::safe(&text));
            }
            ExitCode::from(code)
        }
    }
}

/// Logs go to stderr: warnings and errors by default, more with -v, only
/// errors with -q; RUST_LOG overrides. Plain messages unless -v. A
/// `chatty` command (the daemon) starts one level up, and its lines, like
/// every line under -v, carry the local time (the date, with the offset,
/// on a line of its own at the first line and when it changes).
fn init_logging(verbose: u8, quiet: bool, chatty: bool) {
    let level = match (quiet, verbose + u8::from(chatty)) {
        (true, _) => Level::ERROR,
        (false, 0) => Level::WARN,
        (false, 1) => Level::INFO,
        (false, 2) => Level::DEBUG,
        (false, _) => Level::TRACE,
    };
    // `target=level` directives, as RUST_LOG is usually written; a value
    // that does not parse falls back to the levels above.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            Targets::new()
                .with_target("automaton", level)
                .with_default(Level::WARN)
        });
    let color = io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let plain = verbose == 0;
    let output = tracing_subscriber::fmt::layer()
        .fmt_fields(safe_fields())
        .with_writer(io::stderr)
        .with_ansi(color)
        .with_target(!plain)
        .with_level(!plain);
    let output: Box<dyn Layer<Registry> + Send + Sync> = if plain && !chatty {
        Box::new(output.without_time())
    } else {
        Box::new(output.with_timer(LocalTime::default()))
    };
    tracing_subscriber::registry()
        .with(output.with_filter(filter))
        .init();
}

/// Each field of a log line (its message, `gate=...`) shown as
/// `automaton::term::safe` shows text: a gate's log line, a reason or an
/// error it quotes cannot write to the terminal or forge a line.
fn safe_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = automaton::term::safe(&text);
        match field.name() {
            "message" => w.write_str(&text),
            name => write!(w, "{name}={text}"),
        }
    })
    .delimited(" ")
}

/// `19:07:19`: the local time, short, so a line fits 80 columns; the
/// date and the offset (`2026-11-30 Mon, +01:00`) on a line of their own
/// before the first line and whenever the date changes.
#[derive(Default)]
struct LocalTime {
    /// The date (and offset) last said.
    said: std::sync::Mutex<Option<(jiff::civil::Date, jiff::tz::Offset)>>,
}

impl tracing_subscriber::fmt::time::FormatTime for LocalTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let now = automaton::clock::now().to_zoned_datetime(jiff::tz::TimeZone::system());
        let day = (now.date(), now.offset());
        let mut said = self
            .said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *said != Some(day) {
            *said = Some(day);
            writeln!(w, "{}", now.strftime("%Y-%m-%d %a, %:z"))?;
        }
        write!(w, "{}", now.strftime("%H:%M:%S"))
    }
}
