//! automaton runs recurring jobs ("loops") fired by schedulers, guarded by
//! policy plugins ("gates") that are WebAssembly components evaluated
//! in-process and sandboxed.
//!
//! The layout on disk, the state, the config and the lock discipline are
//! described in the README and `docs/`; each module here owns one of them.

// A Windows path is a few bytes wider than a Unix one, which tips the
// crate's error (paths in many variants) past clippy's bound for an
// `Err`; boxing it would change every platform's build for that.
#![cfg_attr(windows, allow(clippy::result_large_err))]

mod access;
mod admin;
mod bounds;
pub mod budget;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod complete;
pub mod config;
mod cron;
mod daemon;
pub mod domain;
mod duration;
pub mod error;
mod exposition;
pub mod fires;
pub mod fsx;
pub mod gate;
pub mod history;
pub mod ledger;
pub mod lock;
pub mod metrics;
mod notify;
mod ops;
mod os;
mod procfs;
pub mod root;
pub mod rules;
mod runs;
mod schedule;
mod serve;
mod since;
pub mod state;
pub mod step;
pub mod store;
mod suggest;
pub mod term;
mod tick;
mod users;
pub mod who;
mod worktree;

pub use error::{Error, Result};
