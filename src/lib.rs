//! automaton runs recurring jobs ("loops") fired by schedulers, guarded by
//! policy plugins ("gates") that are WebAssembly components evaluated
//! in-process and sandboxed.

pub mod gate;
pub mod metrics;
pub mod state;
pub mod step;
pub mod worktree;
