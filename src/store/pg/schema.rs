//! The store's schema: versioned, forward-only SQL migrations kept in
//! `migrations/` and built into the binary. Every command that opens the
//! store checks the version first (one query); an older schema is brought
//! up to date in one transaction under a transaction-level advisory lock,
//! so two hosts upgrading at once apply each migration once; a schema newer
//! than this binary knows is refused, untouched.

use super::client::{Client, PgError};

use crate::error::{Error, Result};

/// The migrations, in order: migration `i` takes the schema to version `i + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_leases.sql"),
    include_str!("migrations/0003_firings.sql"),
    include_str!("migrations/0004_users.sql"),
    include_str!("migrations/0005_fires.sql"),
    include_str!("migrations/0006_admin_log.sql"),
    include_str!("migrations/0007_lease_process.sql"),
    include_str!("migrations/0008_refusals.sql"),
    include_str!("migrations/0009_budgets.sql"),
    include_str!("migrations/0010_attributed.sql"),
    include_str!("migrations/0011_root_access_and_guarded_state.sql"),
    include_str!("migrations/0012_run_ledger.sql"),
];

/// The schema version this binary reads and writes.
pub(super) const KNOWN: i32 = MIGRATIONS.len() as i32;

/// Brings the schema to [`KNOWN`], or refuses a newer one. `url` is the
/// redacted URL, for messages.
pub(super) fn ensure(client: &mut Client, url: &str) -> Result<()> {
    let fail = |action: &str| {
        let action = action.to_owned();
        move |e: PgError| Error::Database {
            name: None,
            url: url.to_owned(),
            action,
            lock_wait: e.is_lock_wait(),
            source: Box::new(e),
        }
    };
    let found = current(client).map_err(fail("cannot read the schema version"))?;
    if found == KNOWN {
        return Ok(());
    }
    refuse_newer(found, url)?;
    let mut tx = client
        .transaction()
        .map_err(fail("cannot start the schema migration"))?;
    // One migrator at a time, per schema: the key names the schema the
    // tables live in, so several roots may share one database.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('automaton:migrate:' || current_schema(), 0))",
        &[],
    )
    .map_err(fail("cannot lock the schema for migration"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS automaton_schema (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .map_err(fail("cannot create the schema version table"))?;
    let found: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM automaton_schema", &[])
        .and_then(|r| Ok(r.try_get(0)?))
        .map_err(fail("cannot read the schema version"))?;
    refuse_newer(found, url)?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i32 + 1;
        tx.batch_execute(sql)
            .map_err(fail(&format!("migration {version:04} failed")))?;
        tx.execute("INSERT INTO automaton_schema (version) VALUES ($1)", &[&version])
            .map_err(fail(&format!("migration {version:04} failed")))?;
        tracing::info!("PostgreSQL store {url}: schema migrated to version {version}");
    }
    tx.commit().map_err(fail("cannot commit the schema migration"))
}

pub(super) fn refuse_newer(found: i32, url: &str) -> Result<()> {
    if found > KNOWN {
        return Err(Error::SchemaTooNew {
            url: url.to_owned(),
            found,
            known: KNOWN,
        });
    }
    Ok(())
}

/// The schema's version; 0 when there is none yet.
fn current(client: &mut Client) -> Result<i32, PgError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('automaton_schema') IS NOT NULL", &[])?
        .try_get(0)?;
    if !exists {
        return Ok(0);
    }
    client
        .query_one("SELECT coalesce(max(version), 0) FROM automaton_schema", &[])?
        .try_get(0)
        .map_err(PgError::from)
}
