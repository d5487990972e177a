//! Gate host benchmarks: a fresh-instance evaluation of each stock gate (the
//! per-tick cost; target ≤ 100 µs), a fresh host with a cached load (what a
//! tick process pays before its first evaluation), and a cold compile.
//! Run with `cargo bench --bench gate`.

use std::time::Duration;

use automaton::gate::{Context, GateHost, GateSource, Limits, RunResult, stock_gates};
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
    assert!(!bytes.bytes.is_empty());
    bencher.bench_local(|| {
        let host = GateHost::new(None).unwrap();
        host.load(&GateSource::Stock("budget".into())).unwrap();
    });
}
