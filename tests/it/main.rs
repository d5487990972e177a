//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes.

mod approvals;
mod common;
mod locking;
mod loops;
mod snapshots;
mod tick;
mod tick_gates;
