//! The history a gate asks for (`context.history`, WIT 0.3.0) from the file
//! store's run ledger of a loop with 10,000 recorded runs, a minute apart:
//! the last 10 runs and the sums over 1 h, 24 h and 7 d, as every tick of a
//! gate asking for them pays (target ≤ 0.2 ms); and the same made in
//! memory from the runs, as the other stores do.
//! Run with `cargo bench --bench windows`.

use automaton::domain::{HistoryRequest, PastRun};
use automaton::ledger::{Entry, LedgerFile, answer};
use divan::Bencher;

fn main() {
    divan::main();
}

const RUNS: u64 = 10_000;
const MINUTE: u64 = 60_000;

fn entries() -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for tick in 1..=RUNS {
        let run = PastRun {
            tick,
            ended_at_ms: tick * MINUTE,
            ok: tick % 9 != 0,
            metrics: [
                (
                    "cost_usd".to_owned(),
                    0.01 * f64::from(u32::try_from(tick % 7).unwrap()),
                ),
                ("tokens".to_owned(), 1200.0),
            ]
            .into(),
        };
        let e = Entry::after(out.last(), &run);
        out.push(e);
    }
    out
}

fn request() -> HistoryRequest {
    HistoryRequest {
        runs: 10,
        windows_ms: vec![3_600_000, 86_400_000, 7 * 86_400_000],
    }
}

#[divan::bench]
fn file_ledger_10000_runs(bencher: Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.jsonl");
    LedgerFile::open(&path).unwrap().write_all(&entries()).unwrap();
    let request = request();
    let now = RUNS * MINUTE + 1000;
    bencher.bench_local(|| {
        let mut ledger = LedgerFile::open(&path).unwrap();
        answer(&mut ledger, &request, now, None).unwrap()
    });
}

#[divan::bench]
fn in_memory_10000_runs(bencher: Bencher) {
    let all = entries();
    let request = request();
    let now = RUNS * MINUTE + 1000;
    bencher.bench_local(|| answer(&mut all.as_slice(), &request, now, None).unwrap());
}
