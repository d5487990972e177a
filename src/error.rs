//! The crate's error type: each variant carries its context, and
//! `exit_code` maps it onto the exit codes of SPEC §9.

use std::path::PathBuf;

use crate::gate::GateError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid context JSON in {name}")]
    ContextJson {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("no root to cache compiled gates in: give --root or set AUTOMATON_ROOT")]
    NoCache,
    #[error("cannot write the output")]
    Output(#[from] std::io::Error),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::ContextJson { .. } => 2,
            Error::NoCache => 3,
            _ => 1,
        }
    }
}
