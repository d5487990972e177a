//! The refusals of a loop's viewers in the `refusals` table, kept apart
//! from `events` ([`crate::store::LoopStore::record_refusal`]): inserted
//! without the loop's lock, a loop keeping its newest [`KEEP`] rows, and
//! merged into the history as it is read (after the events of the version
//! each saw).

use super::PgLoop;
use crate::error::Result;
use crate::history::Event;

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

impl PgLoop {
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
