//! The refusals of a loop's viewers, kept apart from its history:
//! `refusals.jsonl`, one `refused` event a line, and the one file it was
//! last rotated into, `refusals.1.jsonl`. A refusal is no commit: it is
//! appended without the loop's lock (under a lock of the file's own, held
//! for one append), stamped with the state version it saw, so a flood of
//! them never holds a tick back and never rotates the loop's history: the
//! `created` event and the operators' records stay for as long as
//! `[history] keep` says. When `refusals.jsonl` has grown past `[history]
//! max_size` it replaces `refusals.1.jsonl`, so refusals take at most
//! twice that, the oldest going first. History's readers merge them in
//! ([`crate::history::merge`]).

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use super::rotation::Opened;
use crate::error::{Error, Result};
use crate::fsx;
use crate::history::{Event, History};

/// The file refusals are appended to.
pub(super) const REFUSALS: &str = "refusals.jsonl";
/// The one it was last rotated into.
pub(super) const ROTATED: &str = "refusals.1.jsonl";

/// Appends `event` to `dir`'s refusals, first rotating them when they are
/// past `max_size` bytes. Appenders take turns on a lock of the file's
/// own; one that finds the file rotated under it (another appender's
/// rotation, made while it waited) opens the new one.
pub(super) fn append(dir: &Path, event: &Event, max_size: u64) -> Result<()> {
    let path = dir.join(REFUSALS);
    loop {
        let (mut file, _) = fsx::open_append(&path)?;
        file.lock().map_err(Error::io("locking", &path))?;
        if !still_named(&file, &path)? {
            continue;
        }
        let len = current_len(&file, &path)?;
        if len > 0 && len >= max_size {
            let to = dir.join(ROTATED);
            fs::rename(&path, &to).map_err(Error::io("renaming", &path))?;
            fsx::sync_dir(dir)?;
            continue;
        }
        // An append that died mid-line left it unended: this one starts
        // on a line of its own (the cut one reads as damage).
        let mut line = match torn(&file, len) {
            true => b"\n".to_vec(),
            false => Vec::new(),
        };
        line.extend(event.to_line());
        return file
            .write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(Error::io("appending to", &path));
    }
}

/// Whether the file's last byte (of `len`) is not a newline.
fn torn(file: &File, len: u64) -> bool {
    use crate::os::FileExt;
    let mut last = [0u8];
    len > 0 && file.read_exact_at(&mut last, len - 1).is_ok() && last[0] != b'\n'
}

/// Whether `file` is still the one `path` names (not rotated away).
fn still_named(file: &File, path: &Path) -> Result<bool> {
    let open = file.metadata().map_err(Error::io("reading", path))?;
    Ok(match fs::symlink_metadata(path) {
        Ok(named) => crate::os::file_id(&named) == crate::os::file_id(&open),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(Error::io("reading", path)(e)),
    })
}

fn current_len(file: &File, path: &Path) -> Result<u64> {
    Ok(file.metadata().map_err(Error::io("reading", path))?.len())
}

/// The refusal files in `dir`, opened oldest first (to read backwards,
/// [`super::journal::read_last`]).
pub(super) fn open(dir: &Path) -> Result<Vec<Opened>> {
    let mut files = Vec::new();
    for name in [ROTATED, REFUSALS] {
        let path = dir.join(name);
        if let Some((file, _)) = fsx::open_read(&path)? {
            files.push(Opened {
                path,
                file,
                current: name == REFUSALS,
            });
        }
    }
    Ok(files)
}

/// The refusals kept in `dir`, oldest first, read as history is
/// ([`super::journal::read_committed`]): a line cut short at the end of
/// the current file (an append that died) is passed over; a line that
/// does not read is returned apart, as the history's are.
pub(super) fn read(dir: &Path) -> Result<History> {
    super::journal::read_committed(open(dir)?, u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Action, Role};
    use crate::history::EventKind;

    fn refusal(v: u64) -> Event {
        let kind = EventKind::Refused {
            by: "mallory".into(),
            action: Action::Pause,
            role: Role::Operators,
            holders: vec!["ann".into()],
            unrecorded: 0,
        };
        // One time for all, so every line is as long.
        let at = "2026-01-01T00:00:00Z".parse().unwrap();
        Event::stamped(kind, v, at, &crate::who::identify("mallory", None, &[]))
    }

    #[test]
    fn refusals_rotate_into_one_file_and_read_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let size = refusal(1).to_line().len() as u64;
        for v in 1..=7 {
            append(dir.path(), &refusal(v), 2 * size).unwrap();
        }
        let kept: Vec<u64> = read(dir.path()).unwrap().events.iter().map(|e| e.v).collect();
        assert_eq!(kept, [5, 6, 7], "two files of two lines at most");
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(REFUSALS))
            .unwrap()
            .write_all(b"{\"v\":8,\"at")
            .unwrap();
        let read = super::read(dir.path()).unwrap();
        assert_eq!(
            (read.events.len(), read.bad.len()),
            (3, 0),
            "a torn line is passed over"
        );
        append(dir.path(), &refusal(9), 100 * size).unwrap();
        let read = super::read(dir.path()).unwrap();
        assert_eq!(
            read.events.last().map(|e| e.v),
            Some(9),
            "and the next starts a line"
        );
        assert_eq!(read.bad.len(), 1, "the torn one reads as damage");
    }
}
