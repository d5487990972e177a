//! The refusals of a loop's viewers in the `refusals` table, kept apart
//! from `events` ([`crate::store::LoopStore::record_refusal`]): inserted
//! without the loop's lock, a loop keeping its newest [`KEEP`] rows, and
//! merged into the history as it is read (after the events of the version
//! each saw).

use std::path::PathBuf;

use super::PgLoop;
use crate::error::Result;
use crate::history::{BadLine, Event, History};

/// The rows a loop keeps.
const KEEP: i64 = 10_000;
/// One insert in this many trims the loop's oldest rows past [`KEEP`].
const TRIM_EVERY: i64 = 256;

/// The history's rows with the refusals merged in: each row's version,
/// event as JSON text, and whether it is a refusal; in order.
pub(super) const MERGED: &str = "SELECT v, event::text FROM (
         SELECT v, n AS o, false AS refusal, event FROM events WHERE loop = $1
         UNION ALL
         SELECT v, seq, true, event FROM refusals WHERE loop = $1) h
     ORDER BY v, refusal, o";

/// The merged rows newest first, a page at a time: those before the last
/// row of the page before (by version, refusal, order), so rows committed
/// meanwhile (all newer) never come twice.
const MERGED_BACK: &str = "SELECT v, refusal, o, event::text FROM (
         SELECT v, n::bigint AS o, false AS refusal, event FROM events WHERE loop = $1
         UNION ALL
         SELECT v, seq, true, event FROM refusals WHERE loop = $1) h
     WHERE $2::bigint IS NULL OR (v, refusal, o) < ($2, $3, $4)
     ORDER BY v DESC, refusal DESC, o DESC
     LIMIT $5";

/// The rows a page of [`MERGED_BACK`] holds.
const PAGE: i64 = 500;

impl PgLoop {
    /// The newest `n` events of the merged history that `admits` takes,
    /// oldest first, read newest first a page at a time: this process
    /// holds a page and the answer, never the whole history.
    pub(super) fn read_last(&self, n: usize, admits: &dyn Fn(&Event) -> bool) -> Result<History> {
        let mut history = History::default();
        let mut after: Option<(i64, bool, i64)> = None;
        while history.events.len() < n {
            let (v, refusal, o) = (
                after.map(|a| a.0),
                after.is_some_and(|a| a.1),
                after.map_or(0, |a| a.2),
            );
            let rows = self.db.with(self.n(), "cannot read the history", |c| {
                c.query(MERGED_BACK, &[&self.name.as_str(), &v, &refusal, &o, &PAGE])
            })?;
            for row in &rows {
                let text: String = row.get(3);
                match serde_json::from_str::<Event>(&text) {
                    Ok(e) if history.events.len() < n && admits(&e) => history.events.push(e),
                    Ok(_) => {}
                    Err(e) => history.bad.push(BadLine {
                        path: PathBuf::from(format!("{}/loops/{}/events", self.db.url, self.name)),
                        line: 0,
                        reason: e.to_string(),
                    }),
                }
            }
            match rows.last() {
                Some(last) if rows.len() as i64 == PAGE => {
                    after = Some((last.get(0), last.get(1), last.get(2)));
                }
                _ => break,
            }
        }
        history.events.reverse();
        Ok(history)
    }

    pub(super) fn add_refusal(&self, event: &Event) -> Result<()> {
        let text = serde_json::to_string(event).expect("events serialise");
        let v = i64::try_from(event.v).unwrap_or(i64::MAX);
        let name = self.name.as_str();
        self.db.with(self.n(), "cannot record the refusal", |c| {
            // Those who follow the loop's changes are told of it.
            let seq: Option<i64> = c
                .query_opt(
                    "WITH i AS (
                         INSERT INTO refusals (loop, v, event)
                         SELECT $1, $2, $3::text::json WHERE EXISTS (SELECT 1 FROM loops WHERE name = $1)
                         RETURNING seq)
                     SELECT seq, pg_notify($4, $1) FROM i",
                    &[&name, &v, &text, &super::CHANNEL],
                )?
                .map(|row| row.get(0));
            if seq.is_some_and(|s| s % TRIM_EVERY == 0) {
                c.execute(
                    "DELETE FROM refusals WHERE loop = $1 AND seq < (
                         SELECT seq FROM refusals WHERE loop = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)",
                    &[&name, &(KEEP - 1)],
                )?;
            }
            Ok(())
        })
    }
}
