//! `<root>/approved`: the last approvals given in the root, one line each
//! (`<version> <loop>`, the state version the approval made), so a daemon
//! learns of an approval by a `stat` of one file, whichever loop it is
//! for, and fires the tick it releases at once. A commit that records an
//! approval rewrites it atomically under `approved.lock` (two approvals at
//! once both stay), keeping the newest [`KEPT`]; the store's feed
//! ([`super::watch::Few`]) reads it when its inode or modification time
//! moves. It is a wake-up, not a record: losing it loses nothing but the
//! early start.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::lock::{self, Holder, Wait};

const APPROVED: &str = "approved";
const APPROVED_LOCK: &str = "approved.lock";
/// How many approvals the file keeps.
const KEPT: usize = 32;
/// The largest file read: [`KEPT`] lines of a version and a loop name.
const MAX: u64 = 8 * 1024;
/// How long an approval waits for another's rewrite of the file.
const WAIT: Wait = Wait::For(std::time::Duration::from_secs(2));

/// The file, under `root`.
pub(super) fn path(root: &Path) -> PathBuf {
    root.join(APPROVED)
}

/// The approvals the file holds, oldest first: each loop's name and the
/// version its approval made. Lines that do not read are passed over.
pub(super) fn read(root: &Path) -> Vec<(String, u64)> {
    let Ok(Some(bytes)) = crate::fsx::read_regular(&path(root), MAX) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| {
            let (version, name) = l.split_once(' ')?;
            Some((name.to_owned(), version.parse().ok()?))
        })
        .collect()
}

/// Adds the approval just committed to loop `dir`, which made `version`,
/// to its root's file. Best effort: a daemon that does not hear of it
/// fires the loop at its next firing.
pub(super) fn say_of(dir: &super::LoopDir, version: u64) {
    // `<root>/loops/<name>`: the root is two levels up.
    let Some(root) = dir.path().parent().and_then(Path::parent) else {
        return;
    };
    if let Err(e) = say(root, dir.name.as_str(), version) {
        tracing::warn!(
            "loop {:?}: a daemon hears of the approval at its next firing only: {e}",
            dir.name.as_str()
        );
    }
}

/// Adds loop `name`'s approval, which made `version`, to the file.
pub(super) fn say(root: &Path, name: &str, version: u64) -> Result<()> {
    let _held = lock::acquire(&root.join(APPROVED_LOCK), APPROVED, Holder::me("approve"), WAIT)?;
    let mut all = read(root);
    all.push((name.to_owned(), version));
    let skip = all.len().saturating_sub(KEPT);
    let text: String = all
        .iter()
        .skip(skip)
        .map(|(name, version)| format!("{version} {name}\n"))
        .collect();
    match crate::fsx::replace(root, &path(root), text.as_bytes(), false) {
        crate::fsx::Written::Not(e) => Err(e),
        _ => Ok(()),
    }
}
