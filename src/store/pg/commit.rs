//! A commit and a release, each one statement (so one round trip, and
//! one implicit transaction): what a tick pays twice (its `in_flight`
//! mark, its record) and once. The statement checks the lock's fence
//! first, locking the lease row until it commits, so no one takes the lock
//! between the check and the commit; then updates the state row `WHERE
//! version = $old`, inserts the events and notifies, each only if the
//! step before it held.

use super::client::{Client, PgError};

use crate::history::Event;

/// One commit of a loop's state and its events, under a fence.
pub(super) struct Commit<'a> {
    pub name: &'a str,
    pub fence: i64,
    /// The new state, as JSON text, and its version.
    pub state: &'a str,
    pub next: u64,
    /// The version it replaces.
    pub old: u64,
    pub events: &'a [Event],
    /// The notification's payload; empty: none is sent.
    pub payload: &'a str,
    /// The tick the holder record names from now on, when it changed.
    pub tick: Option<u64>,
}

/// How a commit went.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Committed {
    Done,
    /// The lease ran out or another holder took it: nothing was written.
    Lost,
    /// The state row was not at the version replaced: nothing was written.
    /// Holds the version found.
    Conflict(Option<u64>),
}

const COMMIT: &str = "WITH f AS (
        SELECT 1 FROM leases
        WHERE loop = $1 AND fence = $2 AND expires_at > clock_timestamp()
        FOR UPDATE),
    u AS (
        UPDATE loops SET state = $3::text::json, version = $4
        WHERE name = $1 AND version = $5 AND EXISTS (SELECT 1 FROM f)
        RETURNING 1),
    e AS (
        INSERT INTO events (loop, v, n, at, event)
        SELECT $1, $4, t.i::integer, $6::text::timestamptz, t.e::json
        FROM unnest($7::text[]) WITH ORDINALITY AS t(e, i)
        WHERE EXISTS (SELECT 1 FROM u)),
    h AS (
        UPDATE holders SET tick = $10
        WHERE loop = $1 AND $10::bigint IS NOT NULL AND EXISTS (SELECT 1 FROM u)),
    n AS (
        SELECT pg_notify($8, $9) WHERE $9 <> '' AND EXISTS (SELECT 1 FROM u))
    SELECT EXISTS (SELECT 1 FROM f), EXISTS (SELECT 1 FROM u),
        (SELECT version FROM loops WHERE name = $1), (SELECT count(*) FROM n)";

/// Runs the commit in one statement.
pub(super) fn run(client: &mut Client, c: &Commit<'_>) -> Result<Committed, PgError> {
    let texts: Vec<String> = c
        .events
        .iter()
        .map(|e| serde_json::to_string(e).expect("events serialise"))
        .collect();
    let at = c.events.first().map(|e| e.at.to_string()).unwrap_or_default();
    let row = client.query_one(
        COMMIT,
        &[
            &c.name,
            &c.fence,
            &c.state,
            &(c.next as i64),
            &(c.old as i64),
            &at,
            &texts,
            &super::CHANNEL,
            &c.payload,
            &c.tick.map(|t| t as i64),
        ],
    )?;
    let (fenced, updated): (bool, bool) = (row.try_get(0)?, row.try_get(1)?);
    let found: Option<i64> = row.try_get(2)?;
    Ok(match (fenced, updated) {
        (false, _) => Committed::Lost,
        (true, true) => Committed::Done,
        (true, false) => Committed::Conflict(found.and_then(|v| u64::try_from(v).ok())),
    })
}

/// Lets the lease go (so the next holder need not wait for it to run
/// out), clears the holder record it stood for, and unlocks the advisory
/// lock `key` when it is held, in one statement.
pub(super) fn release(client: &mut Client, name: &str, fence: i64, key: Option<i64>) -> Result<(), PgError> {
    client
        .query_one(
            "WITH r AS (
                 UPDATE leases SET expires_at = '-infinity'
                 WHERE loop = $1 AND fence = $2 RETURNING 1),
             d AS (
                 DELETE FROM holders WHERE loop = $1 AND EXISTS (SELECT 1 FROM r))
             SELECT CASE WHEN $3::bigint IS NOT NULL THEN pg_advisory_unlock($3) END",
            &[&name, &fence, &key],
        )
        .map(drop)
}
