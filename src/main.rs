//! The `automaton` binary: parse the command line, set up logging, run the
//! command, and report an error once, with its causes, as an exit code.

use std::error::Error as _;
use std::io::{self, IsTerminal};
use std::process::ExitCode;

use clap::Parser;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

use automaton::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The daemon logs one line a tick: info is its default level.
    let chatty = matches!(cli.command, automaton::cli::Command::Daemon(_));
    init_logging(cli.verbose, cli.quiet, chatty);
    let mut stdout = io::stdout().lock();
    match automaton::commands::run(cli, &mut stdout) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let code = err.exit_code();
            if code != 0 {
                let mut text = format!("error: {err}");
                let mut source = err.source();
                while let Some(cause) = source {
                    text += &format!(": {cause}");
                    source = cause.source();
                }
                eprintln!("{text}");
            }
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
    }
}

/// Logs go to stderr: warnings and errors by default, more with -v, only
/// errors with -q; RUST_LOG overrides. Plain messages unless -v. A
/// `chatty` command starts one level up.
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
        .with_writer(io::stderr)
        .with_ansi(color)
        .without_time()
        .with_target(!plain)
        .with_level(!plain);
    tracing_subscriber::registry()
        .with(output.with_filter(filter))
        .init();
}
