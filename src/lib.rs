//! automaton runs recurring jobs ("loops") fired by schedulers, guarded by
//! policy plugins ("gates") that are WebAssembly components evaluated
//! in-process and sandboxed.

pub mod cli;
pub mod commands;
pub mod error;
pub mod gate;
pub mod state;

pub use error::Error;
