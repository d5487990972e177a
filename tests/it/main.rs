//! The integration tests: one binary, one module per feature, each driving
//! the real `automaton` binary in real processes. On Windows (under Wine
//! in CI) the `windows` module runs; the others need Unix (signals,
//! process groups, `/proc`, modes, sockets, a POSIX shell).

#[cfg(unix)]
mod access;
#[cfg(unix)]
mod admin;
#[cfg(unix)]
mod approvals;
#[cfg(unix)]
mod budgets;
// Windows runs `windows` alone, which uses a part of the builder.
#[cfg_attr(windows, allow(dead_code, unused_imports))]
mod common;
#[cfg(unix)]
mod config_record;
#[cfg(unix)]
mod confine;
#[cfg(unix)]
mod crash;
#[cfg(unix)]
mod crash_model;
#[cfg(unix)]
mod daemon;
#[cfg(unix)]
mod doctor;
#[cfg(unix)]
mod edit;
#[cfg(unix)]
mod example_gates;
#[cfg(unix)]
mod gate_author;
#[cfg(unix)]
mod gate_cases;
#[cfg_attr(windows, allow(dead_code))]
mod gate_fixtures;
#[cfg(unix)]
mod gate_host;
#[cfg(unix)]
mod gate_promote;
#[cfg(unix)]
mod gate_replay;
#[cfg(unix)]
mod gate_versions;
#[cfg(unix)]
mod git_guard;
#[cfg(unix)]
mod invariants;
#[cfg(unix)]
mod kept_gates;
#[cfg(unix)]
mod listing;
#[cfg(unix)]
mod locking;
#[cfg(unix)]
mod loops;
#[cfg(unix)]
mod metrics;
#[cfg(unix)]
mod netns;
#[cfg(unix)]
mod notify;
#[cfg(unix)]
mod operator;
#[cfg(unix)]
mod output;
#[cfg(unix)]
mod parsers;
#[cfg(unix)]
mod paths;
#[cfg(unix)]
mod pg;
#[cfg(unix)]
mod pg_bounds;
#[cfg(unix)]
mod pg_budget;
#[cfg(unix)]
mod pg_claims;
#[cfg(unix)]
mod pg_crash;
#[cfg(unix)]
mod pg_lease;
#[cfg(unix)]
mod pg_outcome;
#[cfg(unix)]
mod pg_pooler;
#[cfg(unix)]
mod pg_restart;
#[cfg(unix)]
mod pg_roles;
#[cfg(unix)]
mod quickstart;
#[cfg(unix)]
mod refusals;
#[cfg(unix)]
mod resume;
#[cfg(unix)]
mod rotation;
#[cfg(unix)]
mod schedule;
#[cfg(unix)]
mod self_approval;
#[cfg(unix)]
mod serve;
#[cfg(unix)]
mod serve_browser;
#[cfg(unix)]
mod shadow_gates;
#[cfg(unix)]
mod shared_root;
#[cfg(unix)]
mod signed_gates;
#[cfg(unix)]
mod snapshots;
#[cfg(unix)]
mod stock_gates;
#[cfg(unix)]
mod store;
#[cfg(unix)]
mod store_flight;
#[cfg(unix)]
mod terminal;
#[cfg(unix)]
mod tick;
#[cfg(unix)]
mod tick_gates;
#[cfg(unix)]
mod torture;
#[cfg(windows)]
mod windows;
