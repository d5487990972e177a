//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes.

mod gate_fixtures;
mod gate_host;
mod stock_gates;
