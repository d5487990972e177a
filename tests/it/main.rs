//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes.

mod approvals;
mod common;
mod gate_fixtures;
mod gate_host;
mod locking;
mod loops;
mod snapshots;
mod stock_gates;
