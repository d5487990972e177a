//! The files `edit` makes in a loop's directory, without the loop's lock:
//! the copy the editor works on (`.loop.toml.edit-<pid>-<random>.toml`) and
//! the new loop.toml on its way in (`.loop.toml.save-<pid>-<random>`), each
//! named after the process that made it. The store's own temporary files
//! (`.tmp-*`) are only ever made under the lock, where recovery removes
//! what a dead writer left; an edit's are found instead by the next `edit`,
//! which reopens a copy whose process is gone and removes such a save
//! file, and by `doctor`, which lists them (`--fix` removes those ten
//! minutes old). A file whose process still runs is an edit at work, and
//! is left alone.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tempfile::TempPath;

use super::CONFIG_MAX;
use crate::error::{Error, Result};
use crate::fsx;
use crate::fsx::sync_dir;

/// The copy an editor works on.
const COPY_PREFIX: &str = ".loop.toml.edit-";
/// The new loop.toml, written and synced before it is renamed in.
const SAVE_PREFIX: &str = ".loop.toml.save-";

/// What an edit left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Left {
    /// A copy that was not saved: its edit was killed, or refused (and the
    /// copy kept so the work is not lost).
    Copy,
    /// A new loop.toml that was never renamed in: its edit was killed while
    /// saving.
    Save,
}

/// A file of an edit whose process is gone.
#[derive(Debug, Clone)]
pub struct Leftover {
    pub path: PathBuf,
    pub left: Left,
    pub modified: Option<SystemTime>,
}

/// Reads loop.toml for an edit: a regular file (a FIFO, a device or a
/// symbolic link is refused at once, naming it) of at most 1 MiB.
pub(crate) fn read_config(path: &Path) -> Result<Vec<u8>> {
    fsx::read_regular(path, CONFIG_MAX)?.ok_or_else(|| {
        let source = io::ErrorKind::NotFound.into();
        Error::io("reading", path)(source)
    })
}

/// Reads the editor's copy back (as loop.toml is read: regular, bounded).
pub(crate) fn read_copy(path: &Path) -> Result<Vec<u8>> {
    read_config(path)
}

/// A new copy holding `bytes`, removed when the returned path is dropped.
pub(crate) fn new_copy(dir: &Path, bytes: &[u8]) -> Result<TempPath> {
    let modes = fsx::Modes::of_dir(dir);
    let mut copy = fsx::mode::builder(modes)
        .prefix(&ours(COPY_PREFIX))
        .suffix(".toml")
        .tempfile_in(dir)
        .map_err(Error::io("creating a temporary file in", dir))?;
    modes
        .set_file(copy.as_file())
        .and_then(|()| copy.write_all(bytes))
        .map_err(Error::io("writing", copy.path().to_owned()))?;
    Ok(copy.into_temp_path())
}

/// Takes over the copy `left` by an edit whose process is gone: renamed to
/// a name of this process, so no other edit takes it too. `None` when
/// another one took it first.
pub fn reopen(dir: &Path, left: &Path) -> Result<Option<TempPath>> {
    let taken = tempfile::Builder::new()
        .prefix(&ours(COPY_PREFIX))
        .suffix(".toml")
        .make_in(dir, |name| fsx::rename_noreplace(left, name));
    match taken {
        Ok(taken) => Ok(Some(taken.into_temp_path())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("reopening", left)(e)),
    }
}

/// Replaces loop.toml at `config` with `bytes`, atomically and durably,
/// through a save file of this process's (never a `.tmp-*` of the store's).
pub fn save(dir: &Path, config: &Path, bytes: &[u8]) -> Result<()> {
    let modes = fsx::Modes::of_dir(dir);
    let mut new = fsx::mode::builder(modes)
        .prefix(&ours(SAVE_PREFIX))
        .tempfile_in(dir)
        .map_err(Error::io("creating a temporary file in", dir))?;
    modes
        .set_file(new.as_file())
        .map_err(Error::io("writing", new.path().to_owned()))?;
    new.write_all(bytes)
        .and_then(|()| new.as_file().sync_data())
        .map_err(Error::io("writing", new.path().to_owned()))?;
    new.persist(config)
        .map_err(|e| Error::io("replacing", config)(e.error))?;
    sync_dir(dir)
}

/// The files in `dir` of edits whose process is gone, the newest first.
/// A directory that is not there holds none.
pub fn leftovers(dir: &Path) -> Result<Vec<Leftover>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("listing", dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(Error::io("listing", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let (left, rest) = match (name.strip_prefix(COPY_PREFIX), name.strip_prefix(SAVE_PREFIX)) {
            (Some(rest), _) => (Left::Copy, rest),
            (_, Some(rest)) => (Left::Save, rest),
            _ => continue,
        };
        // Only regular files: an editor is never pointed through a link.
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !meta.is_file() || maker(rest).is_some_and(alive) {
            continue;
        }
        out.push(Leftover {
            path: entry.path(),
            left,
            modified: meta.modified().ok(),
        });
    }
    out.sort_by_key(|l| std::cmp::Reverse(l.modified));
    Ok(out)
}

/// The start of a name made by this process: `<prefix><pid>-`, then
/// random characters (and a suffix).
fn ours(prefix: &str) -> String {
    format!("{prefix}{}-", std::process::id())
}

/// The process that made a file, from the rest of its name after the
/// prefix; none for a name without one (an earlier build's copy).
fn maker(rest: &str) -> Option<u32> {
    rest.split_once('-')?.0.parse().ok()
}

/// Whether process `pid` (on this machine: a loop directory is local)
/// still runs.
fn alive(pid: u32) -> bool {
    crate::os::process_alive(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn an_edit_of_a_process_gone_is_left_over_and_one_at_work_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mine = new_copy(dir.path(), b"step = \"true\"\n").unwrap();
        // No process has pid 0x7fff_fff0; an earlier build's copy names none.
        for name in [".loop.toml.edit-2147483632-abc.toml", ".loop.toml.edit-xyz.toml"] {
            fs::write(dir.path().join(name), "x").unwrap();
        }
        fs::write(dir.path().join(".loop.toml.save-2147483632-abc"), "x").unwrap();
        fs::write(dir.path().join("loop.toml"), "x").unwrap();
        std::os::unix::fs::symlink("loop.toml", dir.path().join(".loop.toml.edit-1-l.toml")).unwrap();
        let found = leftovers(dir.path()).unwrap();
        let mut names: Vec<_> = found
            .iter()
            .map(|l| (l.path.file_name().unwrap().to_str().unwrap().to_owned(), l.left))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                (".loop.toml.edit-2147483632-abc.toml".to_owned(), Left::Copy),
                (".loop.toml.edit-xyz.toml".to_owned(), Left::Copy),
                (".loop.toml.save-2147483632-abc".to_owned(), Left::Save),
            ]
        );
        assert!(mine.exists());
        // Reopened, a copy is this process's, and no longer left over.
        let taken = reopen(dir.path(), &dir.path().join(".loop.toml.edit-xyz.toml"))
            .unwrap()
            .unwrap();
        assert_eq!(fs::read(&taken).unwrap(), b"x");
        assert_eq!(leftovers(dir.path()).unwrap().len(), 2);
        assert!(
            reopen(dir.path(), &dir.path().join(".loop.toml.edit-xyz.toml"))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_save_replaces_loop_toml_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("loop.toml");
        fs::write(&config, "old").unwrap();
        save(dir.path(), &config, b"new").unwrap();
        assert_eq!(fs::read(&config).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
