//! Gate host benchmarks: a fresh-instance evaluation of each stock gate (the
//! per-tick cost; target ≤ 100 µs), a fresh host with a cached load (what a
//! tick process pays before its first evaluation), a cold compile, and a
//! component file's load + evaluation under the daemon's resident host,
//! back to back and with the instance made ahead ready (as for ticks
//! spaced apart).
//! Run with `cargo bench --bench gate`; for the last, point
//! `AUTOMATON_BENCH_GATE` at a component (e.g. an example gate's build).

use std::path::PathBuf;
use std::time::Duration;

use automaton::domain::{Context, GateSource, Limits, Phase, RunResult};
use automaton::gate::{GateHost, stock_gates};
use divan::Bencher;
use serde_json::json;

fn main() {
    divan::main();
}

const STOCK: [&str; 8] = [
    "approve-every",
    "max-failures",
    "context-floor",
    "budget",
    "time-window",
    "max-ticks",
    "backoff",
    "no-progress",
];

/// A context that makes the gate do its real work (parse params, read the
/// metrics or last run) and proceed.
fn context(name: &str) -> Context {
    let params = match name {
        "approve-every" => json!({"every": 5}),
        "max-failures" | "max-ticks" | "no-progress" => json!({"max": 10}),
        "context-floor" => json!({"metric": "context_left", "min": 0.2}),
        "budget" => json!({"metric": "cost_usd", "max": 20.0}),
        "time-window" => json!({"start": "00:00", "end": "23:59"}),
        "backoff" => json!({"base": "1m", "max": "1h"}),
        _ => json!({}),
    };
    Context {
        tick: 7,
        params,
        consecutive_failures: 1,
        unchanged_ticks: 2,
        last_run: Some(RunResult {
            tick: 7,
            worktree_changed: Some(false),
            ..RunResult::default()
        }),
        metrics: json!({"context_left": 0.6, "cost_usd": 0.4}),
        totals: json!({"cost_usd": 3.2}),
        state: json!({"schema": 1, "status": "active", "tick": 7}),
        ..Context::default()
    }
}

#[divan::bench(args = STOCK)]
fn evaluate_stock(bencher: Bencher, name: &str) {
    let host = GateHost::new(None).unwrap();
    let gate = host.load(&GateSource::Stock(name.into())).unwrap();
    let ctx = context(name);
    let limits = Limits::default();
    host.evaluate(&gate, &ctx, &limits).unwrap();
    bencher.bench_local(|| host.evaluate(&gate, &ctx, &limits).unwrap());
}

/// A new host (engine, linker, epoch thread) and one cached load.
#[divan::bench(sample_count = 50)]
fn new_host_and_cached_load(bencher: Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let source = GateSource::Stock("budget".into());
    GateHost::new(Some(dir.path().to_owned()))
        .unwrap()
        .load(&source)
        .unwrap();
    bencher.bench_local(|| {
        let host = GateHost::new(Some(dir.path().to_owned())).unwrap();
        host.load(&source).unwrap();
        assert_eq!(host.cache_stats().hits, 1);
    });
}

/// A new host alone, to subtract from the above.
#[divan::bench(sample_count = 50)]
fn new_host(bencher: Bencher) {
    bencher.bench_local(|| GateHost::new(None).unwrap());
}

/// Compiling a stock gate with no cache.
#[divan::bench(sample_count = 10, max_time = Duration::from_secs(10))]
fn cold_compile(bencher: Bencher) {
    let bytes = stock_gates().iter().find(|g| g.name == "budget").unwrap();
    assert!(bytes.size() > 0);
    bencher.bench_local(|| {
        let host = GateHost::new(None).unwrap();
        host.load(&GateSource::Stock("budget".into())).unwrap();
    });
}

/// The resident host, the gate `AUTOMATON_BENCH_GATE` loaded (compiled
/// into a temporary cache) and evaluated once, and the context it is
/// evaluated against; `None` when that variable is unset.
fn resident(bench: &str) -> Option<(GateHost, GateSource, Context, tempfile::TempDir)> {
    let Some(path) = std::env::var_os("AUTOMATON_BENCH_GATE").map(PathBuf::from) else {
        eprintln!("{bench}: skipped (AUTOMATON_BENCH_GATE is not set)");
        return None;
    };
    let cache = tempfile::tempdir().unwrap();
    let host = GateHost::resident(Some(cache.path().to_owned()), 4).unwrap();
    // What is measured is the instance made ahead, whatever the gate.
    host.set_ahead_from(Duration::ZERO);
    let source = GateSource::File { path, sha256: None };
    let ctx = Context {
        loop_name: "bench".into(),
        phase: Phase::BeforeStep,
        now: "2026-11-30T10:00:00Z".parse().unwrap(), // a Monday
        params: json!({"start_hour": 0, "end_hour": 24}),
        ..context("office-hours")
    };
    let gate = host.load(&source).unwrap();
    host.evaluate(&gate, &ctx, &Limits::default()).unwrap();
    Some((host, source, ctx, cache))
}

/// What the daemon pays per tick for a gate file it has loaded before: a
/// `stat`, then `evaluate` in a fresh instance, calls back to back: the
/// next call usually comes before the host has made its instance ahead,
/// so it makes one itself while the spares' thread competes for the
/// cores. The gate is `AUTOMATON_BENCH_GATE` (an office-hours example
/// gate: its params keep it proceeding on weekdays); skipped when unset.
#[divan::bench(sample_count = 200)]
fn resident_file_gate(bencher: Bencher) {
    let Some((host, source, ctx, _cache)) = resident("resident_file_gate") else {
        return;
    };
    let limits = Limits::default();
    bencher.bench_local(|| {
        let gate = host.load(&source).unwrap();
        host.evaluate(&gate, &ctx, &limits).unwrap()
    });
    eprintln!("resident_file_gate: {:?}", host.spare_stats());
}

/// As `resident_file_gate`, with the instance made ahead ready before each
/// call (untimed), as when a daemon's ticks are spaced apart: the call's
/// path is a `stat`, taking the spare, and `evaluate`.
#[divan::bench(sample_count = 200, sample_size = 1)]
fn resident_file_gate_prepared(bencher: Bencher) {
    let Some((host, source, ctx, _cache)) = resident("resident_file_gate_prepared") else {
        return;
    };
    let limits = Limits::default();
    bencher
        .with_inputs(|| {
            while host.spare_stats().ready == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        })
        .bench_local_values(|()| {
            let gate = host.load(&source).unwrap();
            host.evaluate(&gate, &ctx, &limits).unwrap()
        });
    eprintln!("resident_file_gate_prepared: {:?}", host.spare_stats());
}
