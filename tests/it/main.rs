//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes.

mod approvals;
mod common;
mod daemon;
mod example_gates;
mod gate_fixtures;
mod gate_host;
mod locking;
mod loops;
mod schedule;
mod snapshots;
mod stock_gates;
mod tick;
mod tick_gates;
