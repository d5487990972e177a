//! The PostgreSQL store's console users: the `users` table (migration 4),
//! one row a user, its record as JSON text.

use super::Database;
use crate::error::{Error, Result};
use crate::users::User;

/// Every user, sorted by name.
pub fn read(db: &Database) -> Result<Vec<User>> {
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

/// Adds `user`, or replaces the one of its name.
pub fn put(db: &Database, user: &User) -> Result<()> {
    let record = serde_json::to_string(user).expect("users serialise");
    db.with(None, "cannot save the user", |c| {
        c.execute(
            "INSERT INTO users (name, record) VALUES ($1, $2::text::json)
             ON CONFLICT (name) DO UPDATE SET record = EXCLUDED.record",
            &[&user.name, &record],
        )
    })?;
    Ok(())
}

/// Removes the user `name`; false when there is none.
pub fn remove(db: &Database, name: &str) -> Result<bool> {
    let n = db.with(None, "cannot remove the user", |c| {
        c.execute("DELETE FROM users WHERE name = $1", &[&name])
    })?;
    Ok(n > 0)
}
