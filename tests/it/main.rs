//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes.
