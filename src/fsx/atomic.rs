//! Replacing a small file atomically (a temporary file beside it, synced,
//! renamed over it, the directory synced), and making private directories:
//! how the store writes a state file, and how the rest of the program
//! writes its own small files (schedule records, the daemon's record).
//! What is made takes the modes of the directory it is made in
//! ([`super::mode`]).

use std::fs::{DirBuilder, File};
use std::io::Write;
#[cfg(unix)]
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use super::Modes;
use crate::error::{Error, Result};

/// The prefix of an atomic write's temporary file: one left behind is a
/// writer's that died before its rename.
pub(crate) const TMP_PREFIX: &str = ".tmp-";

/// Replaces `path` (in `dir`) with `bytes` atomically and durably.
pub(crate) fn write_file(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    match replace(dir, path, bytes, true) {
        Written::Durable => Ok(()),
        Written::Unsynced(e) | Written::Not(e) => Err(e),
    }
}

/// Replaces `path` with `bytes` so that a reader sees the old file or the
/// new one, never a torn one: a temporary file in `dir`, synced, renamed
/// over `path`, then (when `sync` says so) the directory synced. The rename
/// is the commit point: an error before it is [`Written::Not`] (nothing
/// changed), a failed directory sync after it is [`Written::Unsynced`].
pub fn replace(dir: &Path, path: &Path, bytes: &[u8], sync: bool) -> Written {
    let modes = Modes::of_dir(dir);
    let renamed = super::mode::builder(modes)
        .prefix(TMP_PREFIX)
        .tempfile_in(dir)
        .map_err(Error::io("creating a temporary file in", dir))
        .and_then(|mut tmp| {
            modes
                .set_file(tmp.as_file())
                .and_then(|()| tmp.write_all(bytes))
                .and_then(|()| tmp.as_file().sync_data())
                .map_err(Error::io("writing", tmp.path().to_owned()))?;
            tmp.persist(path)
                .map_err(|e| Error::io("replacing", path)(e.error))
        });
    if let Err(e) = renamed {
        return Written::Not(e);
    }
    if !sync {
        return Written::Durable;
    }
    match sync_dir(dir) {
        Ok(()) => Written::Durable,
        Err(e) => Written::Unsynced(e),
    }
}

/// How far an atomic replacement got.
pub enum Written {
    /// In place, and durable as asked.
    Durable,
    /// In place (readers see it), but the directory sync that makes it
    /// survive a power loss failed.
    Unsynced(Error),
    /// Not in place: the old file stands.
    Not(Error),
}

/// Syncs a directory, so the names made, renamed or removed in it survive
/// a power loss. On Windows a directory cannot be opened as a file to be synced; NTFS
/// journals its names itself.
#[cfg(windows)]
pub(crate) fn sync_dir(_: &Path) -> Result<()> {
    Ok(())
}

#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("syncing directory", dir))
}

/// Creates directories down to `path`, each with the mode its parent
/// gives (0700, or 02770 in a group's root: [`super::mode`]).
pub(crate) fn create_dirs(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        create_dirs(parent)?;
    }
    let modes = Modes::of_dir(parent.unwrap_or(Path::new(".")));
    #[cfg(unix)]
    let made = DirBuilder::new().mode(modes.dir()).create(path);
    #[cfg(windows)]
    let made = DirBuilder::new().create(path);
    match made {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => return Ok(()),
        Err(e) => return Err(Error::io("creating directory", path)(e)),
    }
    #[cfg(windows)]
    crate::os::make_private(path).map_err(Error::io("setting the ACL of", path))?;
    if modes.shared() {
        File::open(path)
            .and_then(|d| modes.set_dir(&d))
            .map_err(Error::io("setting the mode of", path))?;
    }
    Ok(())
}
