//! The command line, declared with clap: no logic beyond parsing values.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::gate::Phase;

#[derive(Debug, Parser)]
#[command(name = "automaton", version, about)]
pub struct Cli {
    /// The root holding loops/ and cache/.
    #[arg(long, global = true, env = "AUTOMATON_ROOT")]
    pub root: Option<PathBuf>,
    /// More log output on stderr (-v, -vv).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Test, inspect and precompile gates.
    #[command(subcommand)]
    Gate(GateCommand),
}

#[derive(Debug, Subcommand)]
pub enum GateCommand {
    /// Evaluate a gate alone against a JSON context.
    Test {
        /// A component file, or stock:NAME.
        target: String,
        /// A JSON context file, or - for standard input; missing fields
        /// take defaults.
        #[arg(long)]
        context: Option<String>,
        /// The gate's params, as a JSON object (overrides the context's).
        #[arg(long, value_parser = parse_json)]
        params: Option<serde_json::Value>,
        /// The phase to evaluate in (overrides the context's).
        #[arg(long, value_parser = parse_phase)]
        phase: Option<Phase>,
        /// The evaluation's timeout.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
        timeout: Duration,
        #[arg(long)]
        json: bool,
    },
    /// Show what a gate says about itself, its imports and exports.
    Inspect {
        /// A component file, or stock:NAME.
        target: String,
        #[arg(long)]
        json: bool,
    },
    /// Compile components into the root's cache.
    Compile {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// List the stock gates.
    List {
        #[arg(long)]
        json: bool,
    },
}

fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not valid JSON: {e}"))
}

fn parse_phase(s: &str) -> Result<Phase, String> {
    match s {
        "before-step" => Ok(Phase::BeforeStep),
        "after-step" => Ok(Phase::AfterStep),
        _ => Err("expected before-step or after-step".to_owned()),
    }
}
