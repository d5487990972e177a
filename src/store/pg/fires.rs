//! The ledger of firings ([`crate::fires`]) in the `fires` table: a row a
//! record, folded as it is written. A record is added in one transaction,
//! under a transaction-level advisory lock on the loop's ledger: the
//! loop's last row is read, and either rewritten with the new record
//! folded into it or followed by new rows. The daemon holding a loop's
//! claim writes its ledger, but a claim that ran out can leave two daemons
//! recording one loop: the lock, taken before the read, makes the second
//! read what the first wrote, so no record is lost or counted twice. A
//! loop keeps its newest [`KEEP`] rows.

use jiff::Timestamp;

use super::PgLoop;
use crate::error::Result;
use crate::fires::{self, Fire};

/// The rows a loop keeps.
const KEEP: i64 = 5_000;
/// One insert in this many trims the loop's oldest rows past [`KEEP`].
const TRIM_EVERY: i64 = 256;

fn to_text(r: &Fire) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

impl super::Database {
    /// Each loop's mark of its ledger, in one query: the sequence number
    /// and `last_at` of its last record (a record folded into changes its
    /// `last_at`), empty for a loop with none.
    pub(super) fn read_fires_marks(&self) -> Result<std::collections::HashMap<String, String>> {
        let rows = self.with(None, "cannot read the ledgers of firings", |c| {
            c.query(
                "SELECT l.name, coalesce((SELECT f.seq::text || ' ' || f.last_at::text FROM fires f
                     WHERE f.loop = l.name ORDER BY f.seq DESC LIMIT 1), '')
                 FROM loops l",
                &[],
            )
        })?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

impl PgLoop {
    pub(super) fn read_fires(&self, since: Option<Timestamp>) -> Result<Vec<Fire>> {
        let since = since.map(|t| t.to_string());
        let rows = self.db.with(self.n(), "cannot read the ledger of firings", |c| {
            c.query(
                "SELECT record::text FROM fires
                 WHERE loop = $1 AND ($2::text IS NULL OR last_at >= $2::text::timestamptz)
                 ORDER BY seq",
                &[&self.name.as_str(), &since],
            )
        })?;
        let records = rows.iter().filter_map(|row| {
            let text: String = row.get(0);
            serde_json::from_str::<Fire>(&text)
                .inspect_err(|e| {
                    tracing::warn!(
                        "loop {:?}: passed over a firing that does not read: {e}",
                        self.name.as_str()
                    );
                })
                .ok()
        });
        Ok(fires::fold(records))
    }

    pub(super) fn add_fires(&self, make: &mut dyn FnMut(Option<&Fire>) -> Vec<Fire>) -> Result<()> {
        let name = self.name.as_str();
        self.db
            .bookkeeping(self.n(), "cannot write the ledger of firings", |c| {
                let mut c = c.transaction()?;
                // One round trip, without a prepared statement: a loop's name
                // holds no quote (`LoopName`).
                c.batch_execute(&format!(
                    "SELECT pg_advisory_xact_lock(
                     hashtextextended('automaton:fires:' || current_schema() || ':{name}', 0))"
                ))?;
                let last = c.query_opt(
                    "SELECT seq, record::text FROM fires WHERE loop = $1 ORDER BY seq DESC LIMIT 1",
                    &[&name],
                )?;
                let last = last.and_then(|row| {
                    let seq: i64 = row.get(0);
                    let text: String = row.get(1);
                    serde_json::from_str::<Fire>(&text).ok().map(|r| (seq, r))
                });
                let mut new = fires::fold(make(last.as_ref().map(|(_, r)| r)));
                if new.is_empty() {
                    return c.commit();
                }
                if let Some((seq, mut merged)) = last.filter(|(_, r)| r.folds(&new[0])) {
                    merged.absorb(new.remove(0));
                    // Under the lock, still the loop's last row.
                    c.execute(
                        "UPDATE fires SET record = $3::text::json, last_at = $4::text::timestamptz
                     WHERE loop = $1 AND seq = $2",
                        &[&name, &seq, &to_text(&merged), &merged.last_at().to_string()],
                    )?;
                }
                if new.is_empty() {
                    return c.commit();
                }
                let records: Vec<String> = new.iter().map(to_text).collect();
                let lasts: Vec<String> = new.iter().map(|r| r.last_at().to_string()).collect();
                let seq: i64 = c
                    .query_one(
                        "WITH i AS (
                         INSERT INTO fires (loop, last_at, record)
                         SELECT $1, r.last_at::timestamptz, r.record::json
                         FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS r(record, last_at, o)
                         WHERE EXISTS (SELECT 1 FROM loops WHERE name = $1)
                         ORDER BY r.o
                         RETURNING seq)
                     SELECT coalesce(max(seq), 0) FROM i",
                        &[&name, &records, &lasts],
                    )?
                    .get(0);
                if seq % TRIM_EVERY == 0 && seq > 0 {
                    c.execute(
                        "DELETE FROM fires WHERE loop = $1 AND seq < (
                         SELECT seq FROM fires WHERE loop = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)",
                        &[&name, &(KEEP - 1)],
                    )?;
                }
                c.commit()
            })
    }
}
