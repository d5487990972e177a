//! The history a gate asks for (`context.history`, WIT 0.3.0) on the
//! PostgreSQL store, of a loop with 10 and with 10,000 recorded runs a
//! minute apart: the last 10 runs and the sums over 1 h, 24 h and 7 d, as
//! every tick of a gate asking for them pays. Two ways, in one run:
//! `history`, the whole history read and the ledger made in memory (what a
//! store without a ledger of runs does), and `runs`, the store's own
//! (`LoopStore::gate_history`: one statement over the `runs` table). For
//! each: wall time per call (median) and this process's CPU per call; and,
//! with pg_stat_statements in the database, the statements the server ran
//! per call (the round trips) and its execution time per call.
//!
//! Run with `AUTOMATON_BENCH_STORE=postgresql://... cargo bench --bench
//! pg_windows` (bench/pg-windows.sh starts a throw-away server with
//! pg_stat_statements); a database the role may create a schema in.

#[cfg(unix)]
fn main() {
    bench::main();
}

#[cfg(not(unix))]
fn main() {
    eprintln!("pg_windows: measured on Unix only (process CPU from getrusage)");
}

#[cfg(unix)]
mod bench {
    use std::time::{Duration, Instant};

    use automaton::domain::{GateHistory, HistoryRequest};
    use automaton::history::{Event, EventKind};
    use automaton::root::{Flags, LoopName, Root};
    use automaton::store::{LoopStore, Stores};

    const MINUTE: u64 = 60_000;
    const START: u64 = 1_790_000_000_000;

    pub(crate) fn main() {
        let Ok(url) = std::env::var("AUTOMATON_BENCH_STORE") else {
            eprintln!("pg_windows: skipped: set AUTOMATON_BENCH_STORE to a postgres:// URL");
            return;
        };
        let schema = format!("bench_windows_{}", std::process::id());
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin.batch_execute(&format!("CREATE SCHEMA {schema}")).unwrap();
        let sep = if url.contains('?') { '&' } else { '?' };
        let scoped = format!("{url}{sep}options=-c%20search_path%3D{schema}");
        let result = std::panic::catch_unwind(|| run(&scoped, &mut stats(&url)));
        admin
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .unwrap();
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    }

    /// A connection to read pg_stat_statements with, when the database has it.
    fn stats(url: &str) -> Option<postgres::Client> {
        let mut c = postgres::Client::connect(url, postgres::NoTls).ok()?;
        c.query_one("SELECT count(*) FROM pg_stat_statements", &[]).ok()?;
        Some(c)
    }

    /// The server's statements and their execution time so far, those of
    /// this bench's own reads of them left out.
    fn server(c: &mut postgres::Client) -> (i64, f64) {
        let row = c
            .query_one(
                "SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)::float8
                 FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    }

    fn run(url: &str, stats: &mut Option<postgres::Client>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("loops")).unwrap();
        let root = Root::open(Flags {
            root: Some(dir.path()),
            store: Some(url),
            server_bound: None,
        })
        .unwrap();
        let stores = Stores::open(&root).unwrap();
        let request = HistoryRequest {
            runs: 10,
            windows_ms: vec![3_600_000, 86_400_000, 7 * 86_400_000],
        };
        println!(
            "{:<7} {:>6} {:>12} {:>12} {:>12} {:>14}",
            "runs", "how", "wall/call", "CPU/call", "stmts/call", "server/call"
        );
        let loops: Vec<(u64, Box<dyn LoopStore>)> = [10_u64, 10_000]
            .into_iter()
            .map(|runs| (runs, recorded(&stores, runs)))
            .collect();
        // The statistics autovacuum keeps of a table this size.
        postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .batch_execute("ANALYZE runs; ANALYZE events")
            .unwrap();
        for (runs, lp) in loops {
            let now = jiff::Timestamp::from_millisecond(i64::try_from(START + runs * MINUTE + 1000).unwrap())
                .unwrap();
            let in_memory = || -> GateHistory {
                let history = lp.history().unwrap();
                let entries = automaton::ledger::from_events(
                    history
                        .events
                        .iter()
                        .filter(|e| matches!(e.kind, EventKind::Tick { tick, .. } if tick <= runs)),
                );
                let now = u64::try_from(now.as_millisecond()).unwrap();
                automaton::ledger::answer(&mut entries.as_slice(), &request, now, None).unwrap()
            };
            let ledger = || lp.gate_history(runs, &request, now, None).unwrap();
            assert_eq!(in_memory(), ledger(), "both ways give the same history");
            let calls = if runs > 1000 { 40 } else { 400 };
            measure(runs, "history", calls, stats, &in_memory);
            measure(runs, "runs", 400, stats, &ledger);
        }
    }

    /// A loop of `runs` recorded runs, a minute apart.
    fn recorded(stores: &Stores, runs: u64) -> Box<dyn LoopStore> {
        let name = format!("w{runs}");
        let at = |ms: u64| jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap()).unwrap();
        let mut events: Vec<Event> = vec![
            serde_json::from_value(serde_json::json!({
                "v": 1, "at": at(START).to_string(), "kind": "created", "by": "bench"
            }))
            .unwrap(),
        ];
        for tick in 1..=runs {
            let exit = i32::from(tick % 9 == 0);
            let cost = 0.01 * f64::from(u32::try_from(tick % 7).unwrap());
            events.push(
                serde_json::from_value(serde_json::json!({
                    "v": tick + 1,
                    "at": at(START + tick * MINUTE).to_string(),
                    "kind": "tick", "tick": tick, "outcome": if exit == 0 { "ran" } else { "failed" },
                    "step": {"exit_code": exit, "duration_ms": 1200, "timed_out": false},
                    "metrics": {"cost_usd": cost, "tokens": 1200.0},
                    "host": "bench-host",
                }))
                .unwrap(),
            );
        }
        let mut state = automaton::state::State::new(at(START));
        state.version = runs + 1;
        state.tick = runs;
        let name = LoopName::new(&name).unwrap();
        stores.adopt(&name, "step = \"true\"\n", &state, &events).unwrap();
        stores.get(name.as_str()).unwrap()
    }

    fn measure(
        runs: u64,
        how: &str,
        calls: u32,
        stats: &mut Option<postgres::Client>,
        call: &dyn Fn() -> GateHistory,
    ) {
        for _ in 0..calls / 10 {
            std::hint::black_box(call());
        }
        let before = stats.as_mut().map(server);
        let cpu = cpu_time();
        let mut walls: Vec<Duration> = Vec::new();
        for _ in 0..calls {
            let t = Instant::now();
            std::hint::black_box(call());
            walls.push(t.elapsed());
        }
        let cpu = cpu_time().saturating_sub(cpu) / calls;
        let after = stats.as_mut().map(server);
        walls.sort();
        let wall = walls[walls.len() / 2];
        let (statements, exec) = match (before, after) {
            (Some((c0, t0)), Some((c1, t1))) => (
                format!("{:.1}", (c1 - c0) as f64 / f64::from(calls)),
                format!("{:.3} ms", (t1 - t0) / f64::from(calls)),
            ),
            _ => ("-".to_owned(), "-".to_owned()),
        };
        println!(
            "{runs:<7} {how:>6} {:>9.3} ms {:>9.3} ms {statements:>12} {exec:>14}",
            wall.as_secs_f64() * 1000.0,
            cpu.as_secs_f64() * 1000.0
        );
    }

    /// This process's CPU time (user and system, all threads).
    fn cpu_time() -> Duration {
        let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(u64::try_from(t.tv_sec()).unwrap())
                + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap())
        };
        tv(u.user_time()) + tv(u.system_time())
    }
}
