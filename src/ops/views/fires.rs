//! The view of a loop's ledger of firings (`fires`): what became of each
//! firing its schedule called for ([`crate::fires`]), oldest first.

use jiff::Timestamp;
use serde::Serialize;

use crate::error::Result;
use crate::fires::Fire;
use crate::ops::Ctx;

/// The firings recorded, oldest first: `fires --json` prints them.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct Fires {
    pub records: Vec<Fire>,
}

/// `fires NAME`: the firings recorded since `since` (all by default), the
/// last `limit` of them when one is given.
pub(crate) fn fires(ctx: &Ctx, name: &str, since: Option<Timestamp>, limit: Option<usize>) -> Result<Fires> {
    let dir = ctx.stores.get(name)?;
    super::may_view(ctx, dir.as_ref())?;
    let mut records = dir.fires(since)?;
    if let Some(n) = limit {
        records.drain(..records.len().saturating_sub(n));
    }
    Ok(Fires { records })
}
