//! The file store's console users: `<root>/users.json`, an array of
//! [`User`]s, replaced atomically and readable by its owner only (the
//! temporary file it is renamed from is made with mode 0600, and a file
//! found readable by others is narrowed before it is read).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::users::User;

/// The users file, beside the root's automaton.toml.
const USERS: &str = "users.json";
/// The largest users file read.
const USERS_MAX: u64 = 4 * 1024 * 1024;

fn path(root: &Path) -> PathBuf {
    root.join(USERS)
}

/// The root's users, sorted by name; none when the file is not there.
pub fn read(root: &Path) -> Result<Vec<User>> {
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
pub fn write(root: &Path, users: &[User]) -> Result<()> {
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
    if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
            .map_err(Error::io("narrowing the permissions of", file))?;
    }
    Ok(())
}
