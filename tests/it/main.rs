//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes.

mod access;
mod approvals;
mod common;
mod crash;
mod crash_model;
mod daemon;
mod doctor;
mod edit;
mod example_gates;
mod gate_author;
mod gate_fixtures;
mod gate_host;
mod invariants;
mod listing;
mod locking;
mod loops;
mod operator;
mod output;
mod parsers;
mod paths;
mod pg;
mod pg_bounds;
mod pg_lease;
mod resume;
mod rotation;
mod schedule;
mod shared_root;
mod snapshots;
mod stock_gates;
mod store;
mod store_flight;
mod terminal;
mod tick;
mod tick_gates;
mod torture;
