//! What a gate asks to see of a loop's runs (`context.history`), read from
//! the run ledger the server keeps (table `runs`, written by a trigger on
//! `events` in the commit's own transaction: migrations/0012) in one
//! statement: the newest runs, and for each window the last run that ended
//! at or before its start, each an index look-up whatever the length of
//! the history. The answer is then made as the file store makes it from its
//! ledger ([`crate::ledger::answer`]).

use std::collections::BTreeMap;

use super::client::{Client, PgError};

use crate::domain::{GateHistory, HistoryRequest, PastRun};
use crate::ledger::{Entries, Entry};

/// The newest runs (rows with `w` 0, newest first), then each window's
/// base (`w` its 1-based index; a row of nulls when no run ended by its
/// start).
const READ: &str = "SELECT 0::bigint, r.n, r.tick, r.at_ms, r.failed, r.f, r.metrics::text, r.sums::text
    FROM (SELECT * FROM runs WHERE loop = $1 AND tick <= $2 ORDER BY n DESC LIMIT $3) r
    UNION ALL
    SELECT w.i, b.n, b.tick, b.at_ms, b.failed, b.f, b.metrics::text, b.sums::text
    FROM unnest($4::bigint[]) WITH ORDINALITY AS w(start, i)
    LEFT JOIN LATERAL (
        SELECT * FROM runs
        WHERE loop = $1 AND tick <= $2 AND at_ms <= w.start
        ORDER BY at_ms DESC, n DESC LIMIT 1) b ON true";

/// What the statement read.
struct Read {
    /// The newest runs, oldest first.
    last: Vec<Entry>,
    /// Each window's start, and the last run that ended at or before it.
    bases: Vec<(u64, Option<Entry>)>,
}

impl Entries for Read {
    fn newest(&mut self) -> std::io::Result<Option<Entry>> {
        Ok(self.last.last().cloned())
    }

    fn last(&mut self, n: usize) -> std::io::Result<Vec<Entry>> {
        Ok(self.last[self.last.len().saturating_sub(n)..].to_vec())
    }

    fn at_or_before(&mut self, at: u64) -> std::io::Result<Option<Entry>> {
        self.bases
            .iter()
            .find(|(start, _)| *start == at)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| std::io::Error::other(format!("no window starting at {at} was read")))
    }
}

/// `request` answered at `now` (ms) from loop `name`'s runs up to tick
/// `committed`, with `current` counted as the newest run.
pub(super) fn gate_history(
    client: &mut Client,
    name: &str,
    committed: u64,
    request: &HistoryRequest,
    now: u64,
    current: Option<&PastRun>,
) -> Result<Result<GateHistory, std::io::Error>, PgError> {
    let bounded = request.bounded();
    let starts: Vec<i64> = bounded
        .windows_ms
        .iter()
        .map(|&w| i64::try_from(now.saturating_sub(w)).unwrap_or(i64::MAX))
        .collect();
    // At least the newest, which every window's sums are taken from.
    let limit = i64::from(bounded.runs.max(1));
    let committed = i64::try_from(committed).unwrap_or(i64::MAX);
    let rows = client.query(READ, &[&name, &committed, &limit, &starts])?;
    let mut read = Read {
        last: Vec::new(),
        bases: starts
            .iter()
            .map(|&s| (u64::try_from(s).unwrap_or(0), None))
            .collect(),
    };
    for row in &rows {
        let w: i64 = row.try_get(0)?;
        let n: Option<i64> = row.try_get(1)?;
        let entry = match n {
            None => None,
            Some(n) => {
                let (tick, at, f): (i64, i64, i64) = (row.try_get(2)?, row.try_get(3)?, row.try_get(5)?);
                let (metrics, sums): (String, String) = (row.try_get(6)?, row.try_get(7)?);
                let count = |v: i64| u64::try_from(v).unwrap_or(0);
                Some(Entry {
                    n: count(n),
                    tick: count(tick),
                    at: count(at),
                    failed: row.try_get(4)?,
                    f: count(f),
                    metrics: numbers(&metrics),
                    sums: numbers(&sums),
                    gap: false,
                })
            }
        };
        match usize::try_from(w).ok().and_then(|w| w.checked_sub(1)) {
            None => read.last.extend(entry),
            Some(i) => {
                if let Some(base) = read.bases.get_mut(i) {
                    base.1 = entry;
                }
            }
        }
    }
    read.last.reverse();
    Ok(crate::ledger::answer(&mut read, request, now, current))
}

/// A JSON object of numbers, as the server wrote it (exact decimals), in
/// the nearest doubles.
fn numbers(text: &str) -> BTreeMap<String, f64> {
    serde_json::from_str(text).unwrap_or_default()
}
