//! The PostgreSQL store's console users: the `users` table (migration 4),
//! one row a user, its record as JSON text; and the admin record, the
//! `admin_log` table (migration 6), one row an admin's act, inserted in
//! the transaction of the change it records.

use super::Database;
use super::client::Transaction;
use crate::admin::Entry;
use crate::error::{Error, Result};
use crate::users::User;

/// Every user, sorted by name.
pub(super) fn read(db: &Database) -> Result<Vec<User>> {
    let rows = db.with(None, "cannot read the users", |c| {
        c.query("SELECT name, record::text FROM users ORDER BY name", &[])
    })?;
    rows.iter()
        .map(|r| {
            let text: String = r.get(1);
            serde_json::from_str(&text).map_err(|e| Error::CorruptState {
                path: format!("{}/users/{}", db.url(), r.get::<_, String>(0)).into(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// Adds `user`, or replaces the one of its name, with `entry` recorded
/// in the same transaction.
pub(super) fn put(db: &Database, user: &User, entry: &Entry) -> Result<()> {
    let record = serde_json::to_string(user).expect("users serialise");
    db.with(None, "cannot save the user", |c| {
        let mut tx = c.transaction()?;
        tx.execute(
            "INSERT INTO users (name, record) VALUES ($1, $2::text::json)
             ON CONFLICT (name) DO UPDATE SET record = EXCLUDED.record",
            &[&user.name, &record],
        )?;
        record_in(&mut tx, entry)?;
        tx.commit()
    })
}

/// Removes the user `name`, with `entry` recorded in the same
/// transaction; false (nothing recorded) when there is none.
pub(super) fn remove(db: &Database, name: &str, entry: &Entry) -> Result<bool> {
    db.with(None, "cannot remove the user", |c| {
        let mut tx = c.transaction()?;
        let n = tx.execute("DELETE FROM users WHERE name = $1", &[&name])?;
        if n > 0 {
            record_in(&mut tx, entry)?;
        }
        tx.commit()?;
        Ok(n > 0)
    })
}

/// The admin record, oldest first.
pub(super) fn log(db: &Database) -> Result<Vec<Entry>> {
    let rows = db.with(None, "cannot read the admin record", |c| {
        c.query("SELECT n, record::text FROM admin_log ORDER BY n", &[])
    })?;
    rows.iter()
        .map(|r| parse(db, r.get(0), &r.get::<_, String>(1)))
        .collect()
}

/// Gives `change` the recorded delegates and records the entry it
/// returns, the table locked against another change between the two.
pub(super) fn change_delegates(
    db: &Database,
    change: &mut dyn FnMut(Vec<String>) -> Option<Entry>,
) -> Result<Option<Entry>> {
    db.with(None, "cannot change the delegates", |c| {
        let mut tx = c.transaction()?;
        tx.batch_execute("LOCK TABLE admin_log IN SHARE ROW EXCLUSIVE MODE")?;
        let last = tx.query_opt(
            "SELECT n, record::text FROM admin_log
             WHERE kind IN ('delegate-added', 'delegate-removed') ORDER BY n DESC LIMIT 1",
            &[],
        )?;
        let current = match last.map(|r| parse(db, r.get(0), &r.get::<_, String>(1))) {
            Some(Err(e)) => return Ok(Err(e)),
            Some(Ok(entry)) => crate::admin::recorded_delegates(&[entry]),
            None => Vec::new(),
        };
        let entry = change(current);
        if let Some(entry) = &entry {
            record_in(&mut tx, entry)?;
        }
        tx.commit()?;
        Ok(Ok(entry))
    })?
}

/// Adds `entry`, which changes nothing else, to the admin record.
pub(super) fn record(db: &Database, entry: &Entry) -> Result<()> {
    db.with(None, "cannot add to the admin record", |c| {
        let mut tx = c.transaction()?;
        record_in(&mut tx, entry)?;
        tx.commit()
    })
}

/// Inserts `entry` into the admin record, in `tx`.
fn record_in(tx: &mut Transaction<'_>, entry: &Entry) -> Result<(), super::client::PgError> {
    let text = serde_json::to_string(entry).expect("entries serialise");
    let kind = serde_json::to_value(&entry.change).expect("entries serialise")["kind"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    tx.execute(
        "INSERT INTO admin_log (kind, record) VALUES ($1, $2::text::json)",
        &[&kind, &text],
    )?;
    Ok(())
}

fn parse(db: &Database, n: i64, text: &str) -> Result<Entry> {
    serde_json::from_str(text).map_err(|e| Error::CorruptState {
        path: format!("{}/admin_log/{n}", db.url()).into(),
        reason: e.to_string(),
    })
}
