//! A listing in one query: every loop's config, state and live lock
//! holder, so `list` costs the same few round trips over a thousand loops
//! as over one.

use std::sync::Arc;

use super::Database;
use crate::config::LoopConfig;
use crate::error::Result;
use crate::lock::Holder;
use crate::root::LoopName;
use crate::store::{Listing, LoopStore};

const READ_ALL: &str = "SELECT l.name, l.config, l.state::text, l.version,
        h.pid, h.host, h.command, h.tick,
        to_char(h.since AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
    FROM loops l
    LEFT JOIN holders h ON h.loop = l.name AND EXISTS (
        SELECT 1 FROM leases s WHERE s.loop = h.loop AND s.expires_at > clock_timestamp())
    ORDER BY l.name";

impl Database {
    /// Every loop with its config, state and holder, read in one query
    /// (one snapshot).
    pub(crate) fn read_all(self: &Arc<Self>) -> Result<Vec<Listing>> {
        let rows = self.with(None, "cannot list the loops", |c| c.query(READ_ALL, &[]))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(name) = row
                .try_get::<_, String>(0)
                .ok()
                .and_then(|n| LoopName::new(&n).ok())
            else {
                continue;
            };
            let lp = self.handle(name);
            let config: String = row.get(1);
            let state = lp.parse(Some((row.get(2), row.get(3))));
            let holder = holder(&row);
            out.push(Listing {
                config: LoopConfig::parse(&config, &lp.config_path).map_err(Into::into),
                state,
                holder,
                dir: Box::new(lp) as Box<dyn LoopStore>,
            });
        }
        Ok(out)
    }
}

/// The holder in columns 4 to 8, when there is one whose lease stands.
fn holder(row: &tokio_postgres::Row) -> Option<Holder> {
    Some(Holder {
        pid: u32::try_from(row.try_get::<_, Option<i64>>(4).ok()??).ok()?,
        host: row.try_get::<_, Option<String>>(5).ok()??,
        command: row.try_get::<_, Option<String>>(6).ok()??,
        tick: row.try_get::<_, Option<i64>>(7).ok()?.map(|t| t as u64),
        since: row.try_get::<_, Option<String>>(8).ok()??.parse().ok()?,
    })
}
