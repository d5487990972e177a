//! The `automaton` binary: parse the command line, set up logging, run the
//! command, and report an error once, with its causes, as an exit code.

use std::error::Error as _;
use std::io::{self, IsTerminal};
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use automaton::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
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
/// errors with -q; RUST_LOG overrides. Plain messages unless -v.
fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("automaton={level},warn")));
    let color = io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(color)
        .without_time();
    if verbose == 0 {
        builder.with_target(false).with_level(false).init();
    } else {
        builder.with_target(true).init();
    }
}
