//! automaton runs recurring jobs ("loops") fired by schedulers, guarded by
//! policy plugins ("gates") that are WebAssembly components evaluated
//! in-process and sandboxed.
//!
//! The layout on disk, the state, the config and the lock discipline are
//! described in the README and `docs/`; each module here owns one of them.

pub mod access;
pub mod admin;
pub mod bounds;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod complete;
pub mod config;
pub mod cron;
pub mod daemon;
pub mod domain;
pub mod duration;
pub mod error;
pub mod exposition;
pub mod fires;
pub mod fsx;
pub mod gate;
pub mod history;
pub mod lock;
pub mod metrics;
pub mod notify;
pub mod ops;
pub mod procfs;
pub mod root;
pub mod rules;
pub mod runs;
pub mod schedule;
pub mod serve;
pub mod since;
pub mod state;
pub mod step;
pub mod store;
pub mod suggest;
pub mod term;
pub mod tick;
pub mod users;
pub mod who;
pub mod worktree;

pub use error::{Error, Result};
