//! The file store's console users: `<root>/users.json`, an array of
//! [`User`]s, replaced atomically and readable by its owner only (the
//! temporary file it is renamed from is made with mode 0600, and a file
//! found readable by others is narrowed before it is read); and the
//! root's admin record, `<root>/admin.jsonl`, one [`Entry`] a line, only
//! ever appended to (with the root's file mode: 0600, or 0660 in a
//! group's root), each line synced before the change it records.

#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::io::Write;

use crate::admin::Entry;
use crate::error::{Error, Result};
use crate::users::User;

/// The users file, beside the root's automaton.toml.
const USERS: &str = "users.json";
/// The largest users file read.
const USERS_MAX: u64 = 4 * 1024 * 1024;

/// The admin record, beside it.
const ADMIN_LOG: &str = "admin.jsonl";
/// The largest admin record read.
const ADMIN_LOG_MAX: u64 = 64 * 1024 * 1024;

fn path(root: &Path) -> PathBuf {
    root.join(USERS)
}

/// The admin record's entries, oldest first; none when it is not there.
/// A line that does not read is an error naming the file and the line.
pub(super) fn read_log(root: &Path) -> Result<Vec<Entry>> {
    let file = root.join(ADMIN_LOG);
    let Some(bytes) = crate::fsx::read_regular(&file, ADMIN_LOG_MAX)? else {
        return Ok(Vec::new());
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| Error::CorruptState {
                path: format!("{}:{}", file.display(), i + 1).into(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// Appends `entry` to the admin record, durably. The caller holds
/// `users.lock`.
pub(super) fn append_log(root: &Path, entry: &Entry) -> Result<()> {
    let file = root.join(ADMIN_LOG);
    let mut line = serde_json::to_vec(entry).expect("entries serialise");
    line.push(b'\n');
    let (mut out, len) = crate::fsx::open_append(&file)?;
    out.write_all(&line)
        .and_then(|()| out.sync_data())
        .map_err(Error::io("appending to", &file))?;
    // A record just made is durable once its directory entry is.
    match len {
        0 => crate::fsx::sync_dir(root),
        _ => Ok(()),
    }
}

/// The root's users, sorted by name; none when the file is not there.
pub(super) fn read(root: &Path) -> Result<Vec<User>> {
    let file = path(root);
    private(&file)?;
    let Some(bytes) = crate::fsx::read_regular(&file, USERS_MAX)? else {
        return Ok(Vec::new());
    };
    let mut users: Vec<User> = serde_json::from_slice(&bytes).map_err(|e| Error::CorruptState {
        path: file.clone(),
        reason: e.to_string(),
    })?;
    users.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(users)
}

/// Replaces the root's users with `users`, atomically and durably.
pub(super) fn write(root: &Path, users: &[User]) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(users).expect("users serialise");
    bytes.push(b'\n');
    let file = path(root);
    crate::fsx::write_file(root, &file, &bytes)?;
    private(&file)
}

/// Narrows the file to its owner, if it is there and wider.
fn private(file: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("reading", file)(e)),
    };
    #[cfg(unix)]
    if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
            .map_err(Error::io("narrowing the permissions of", file))?;
    }
    #[cfg(windows)]
    if meta.is_file() {
        crate::os::make_private(file).map_err(Error::io("narrowing the permissions of", file))?;
    }
    Ok(())
}
