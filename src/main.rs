//! The `automaton` binary: parse arguments, set up logging, run the command,
//! report an error once and exit with its code.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use automaton::Error;
use automaton::cli::{Cli, Command, GateCommand};
use automaton::commands::gate as gate_cmd;
use automaton::gate::{GateHost, Limits};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("{msg}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::env::var_os("NO_COLOR").is_none())
        .without_time()
        .init();
}

fn run(cli: Cli) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Gate(cmd) => {
            let host = GateHost::new(gate_cmd::cache_dir(cli.root.as_deref()))?;
            match cmd {
                GateCommand::Test {
                    target,
                    context,
                    params,
                    phase,
                    timeout,
                    json,
                } => {
                    let ctx = context
                        .map(|c| gate_cmd::ContextInput::parse(&c).read())
                        .transpose()?;
                    let limits = Limits {
                        timeout,
                        ..Limits::default()
                    };
                    let target = gate_cmd::parse_target(&target);
                    let r = gate_cmd::test(&host, &target, ctx, params, phase, &limits)?;
                    gate_cmd::render_test(&r, json, &mut out)?;
                }
                GateCommand::Inspect { target, json } => {
                    let r = gate_cmd::inspect(&host, &gate_cmd::parse_target(&target))?;
                    gate_cmd::render_inspect(&r, json, &mut out)?;
                }
                GateCommand::Compile { files, json } => {
                    let r = gate_cmd::compile(&host, &files)?;
                    gate_cmd::render_compile(&r, json, &mut out)?;
                }
                GateCommand::List { json } => {
                    let r = gate_cmd::list(&host)?;
                    gate_cmd::render_list(&r, json, &mut out)?;
                }
            }
        }
    }
    out.flush()?;
    Ok(())
}
