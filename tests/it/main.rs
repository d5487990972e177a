//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes.

mod approvals;
mod common;
mod daemon;
mod locking;
mod loops;
mod schedule;
mod snapshots;
mod tick;
mod tick_gates;
