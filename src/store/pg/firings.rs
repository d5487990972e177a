//! The scheduled loops' next firings, claimed between the daemons that
//! share the store (docs/postgres.md, "Several hosts"): a row of
//! `firings` per scheduled loop, claimed with `FOR UPDATE SKIP LOCKED`
//! so two daemons asking at once are offered different firings, held
//! until its tick ends or its claim runs out by the server's clock.

use jiff::Timestamp;

use super::{Database, lease};
use crate::error::Result;
use crate::store::{Claimed, Claims, Firing, Offer};

/// A timestamp column as text the `jiff` parser reads.
macro_rules! utc {
    ($col:literal) => {
        concat!(
            "to_char(",
            $col,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        )
    };
}

/// A claim lasts one lease past its taking or last renewal.
fn ttl_secs() -> f64 {
    lease::ttl().as_secs_f64()
}

fn parse(text: Option<String>) -> Option<Timestamp> {
    text?.parse().ok()
}

impl Claims for Database {
    fn offer(&self, offers: &[Offer]) -> Result<()> {
        let column = |f: &dyn Fn(&Offer) -> String| offers.iter().map(f).collect::<Vec<String>>();
        let names = column(&|o| o.name.clone());
        let cadences = column(&|o| o.cadence.clone());
        // One text a loop: an array of arrays must be rectangular.
        let hosts = column(&|o| o.hosts.join("\n"));
        let nominals = column(&|o| o.first.nominal.to_string());
        let dues = column(&|o| o.first.due.to_string());
        self.with(None, "cannot write the loops' first firings", |c| {
            c.execute(
                "INSERT INTO firings AS f (loop, cadence, hosts, nominal, due)
                 SELECT o.loop, o.cadence, string_to_array(o.hosts, E'\\n'),
                     o.nominal::timestamptz, o.due::timestamptz
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                     AS o(loop, cadence, hosts, nominal, due)
                 WHERE EXISTS (SELECT 1 FROM loops WHERE name = o.loop)
                 ON CONFLICT (loop) DO UPDATE SET cadence = EXCLUDED.cadence,
                     hosts = EXCLUDED.hosts, nominal = EXCLUDED.nominal, due = EXCLUDED.due
                 WHERE f.cadence <> EXCLUDED.cadence",
                &[&names, &cadences, &hosts, &nominals, &dues],
            )
            .map(drop)
        })
    }

    fn withdraw(&self, name: &str) -> Result<()> {
        self.with(Some(name), "cannot forget the loop's firings", |c| {
            c.execute("DELETE FROM firings WHERE loop = $1", &[&name])
                .map(drop)
        })
    }

    fn claim(&self, me: &str, max: usize, host: &str) -> Result<Claimed> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let rows = self.with(None, "cannot claim due firings", |c| {
            c.query(
                concat!(
                    // A claim reads the few rows it takes, not the table:
                    // the due firings from the index on `due`, in its
                    // order, and each row claimed is updated where it lies
                    // (it is locked, so it stays there). For the planner
                    // to keep to that whatever its statistics (the `due`
                    // of every row moves past them within a cadence), now
                    // is a value it cannot see ahead, `(SELECT
                    // statement_timestamp())`, so it counts a third of the
                    // rows on either side, and the hosts are compared as a
                    // column, whose empty value it knows is most rows.
                    "WITH d AS (
                         SELECT ctid FROM firings
                         WHERE due <= (SELECT statement_timestamp())
                           AND (owner IS NULL OR claim_expires <= (SELECT statement_timestamp()))
                           AND (hosts = '{}' OR $3 = ANY (hosts))
                         ORDER BY due LIMIT $4
                         FOR UPDATE SKIP LOCKED),
                     c AS (
                         UPDATE firings f SET owner = $1,
                             claim_expires = clock_timestamp() + $2::float8 * interval '1 second'
                         WHERE f.ctid = ANY (ARRAY(SELECT ctid FROM d))
                         RETURNING f.loop, f.nominal)
                     SELECT loop, ",
                    utc!("nominal"),
                    ", NULL::integer FROM c
                     UNION ALL
                     (SELECT NULL, ",
                    utc!("due"),
                    ", NULL::integer FROM firings
                      WHERE due > (SELECT statement_timestamp())
                        AND (owner IS NULL OR claim_expires <= (SELECT statement_timestamp()))
                        AND (hosts = '{}' OR $3 = ANY (hosts))
                      ORDER BY due LIMIT 1)
                     UNION ALL
                     -- The schema's version: one upgraded under the daemon
                     -- is noticed at its next claim.
                     SELECT NULL, NULL, max(version) FROM automaton_schema"
                ),
                &[&me, &ttl_secs(), &host, &max],
            )
        })?;
        let mut claimed = Claimed::default();
        for row in rows {
            if let Some(found) = row.get::<_, Option<i32>>(2) {
                // Claimed or not, nothing is run under a schema this
                // binary does not know: the firings' claims run out for a
                // daemon that does.
                super::schema::refuse_newer(found, &self.url)?;
                continue;
            }
            let at = parse(row.get(1));
            match (row.get::<_, Option<String>>(0), at) {
                (Some(name), Some(at)) => claimed.loops.push((name, at)),
                (None, next) => claimed.next = next,
                (Some(_), None) => {}
            }
        }
        Ok(claimed)
    }

    fn settle(&self, me: &str, name: &str, next: Option<Firing>) -> Result<()> {
        let Some(next) = next else {
            // Offered again when a daemon reads a schedule for it.
            return self.bookkeeping(Some(name), "cannot forget the loop's firings", |c| {
                c.execute(
                    "DELETE FROM firings WHERE loop = $1 AND owner = $2",
                    &[&name, &me],
                )
                .map(drop)
            });
        };
        let (nominal, due) = (next.nominal.to_string(), next.due.to_string());
        self.bookkeeping(Some(name), "cannot write the loop's next firing", |c| {
            c.execute(
                "UPDATE firings SET nominal = $3::text::timestamptz, due = $4::text::timestamptz,
                     owner = NULL, claim_expires = NULL
                 WHERE loop = $1 AND owner = $2",
                &[&name, &me, &nominal, &due],
            )
            .map(drop)
        })
    }

    fn renew(&self, me: &str, running: &[String], unsettled: &[String]) -> Result<()> {
        self.bookkeeping(None, "cannot renew the daemon's claims", |c| {
            c.execute(
                "UPDATE firings SET owner = CASE WHEN loop = ANY ($2) THEN owner END,
                     claim_expires = CASE WHEN loop = ANY ($2)
                         THEN clock_timestamp() + $4::float8 * interval '1 second' END
                 WHERE owner = $1 AND NOT (loop = ANY ($3))",
                &[&me, &running, &unsettled, &ttl_secs()],
            )
            .map(drop)
        })
    }

    fn claim_ttl(&self) -> std::time::Duration {
        lease::ttl()
    }

    fn fire_now(&self, name: &str, version: u64) -> Result<()> {
        let version = i64::try_from(version).unwrap_or(i64::MAX);
        self.with(Some(name), "cannot fire the loop now", |c| {
            c.execute(
                "UPDATE firings SET due = least(due, clock_timestamp()), released_v = $2
                 WHERE loop = $1 AND (owner IS NULL OR claim_expires <= clock_timestamp())
                   AND (released_v IS NULL OR released_v < $2)",
                &[&name, &version],
            )
            .map(drop)
        })
    }
}
