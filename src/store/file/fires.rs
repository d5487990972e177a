//! The ledger of firings on disk ([`crate::fires`]): `fires.jsonl` in the
//! loop's directory, one JSON record a line, appended in one write each.
//! Records are appended as they come and folded as they are read, so a
//! write never reads or changes what is there. The daemon is the only
//! writer (it holds the root's `daemon.lock`); it does not sync the file:
//! the ledger is an account of the firings, not the loop's record, and a
//! power cut that loses its last lines leaves a gap the next firing
//! accounts as missed. Past [`MAX`] bytes the daemon rewrites it, folded,
//! keeping the newest [`KEEP`] records (atomically: a reader sees the old
//! file or the new one).

use crate::os::FileExt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use jiff::Timestamp;

use super::LoopDir;
use crate::error::{Error, Result};
use crate::fires::{self, Fire};
use crate::fsx;

const FIRES: &str = "fires.jsonl";
/// The size past which the file is rewritten folded.
const MAX: u64 = 1024 * 1024;
/// The records kept when it is.
const KEEP: usize = 2_000;
/// The largest file read: a writer that could not rotate (a full disk)
/// leaves it to grow past [`MAX`] for a while.
const READ_MAX: u64 = 64 * MAX;
/// How much of the file's end is read to find its last record.
const TAIL: u64 = 16 * 1024;

impl LoopDir {
    fn fires_path(&self) -> PathBuf {
        self.path().join(FIRES)
    }

    /// The ledger, folded, oldest first; the records whose last firing
    /// fell at or after `since`. A line that does not read (the torn end
    /// of an append cut short) is passed over, with a warning.
    pub(super) fn read_fires(&self, since: Option<Timestamp>) -> Result<Vec<Fire>> {
        let path = self.fires_path();
        let Some(bytes) = fsx::read_regular(&path, READ_MAX)? else {
            return Ok(Vec::new());
        };
        let records = fires::fold(parse(&bytes, &path));
        Ok(match since {
            Some(since) => records.into_iter().filter(|r| r.last_at() >= since).collect(),
            None => records,
        })
    }

    /// The file's inode, length and modification time: appended to or
    /// rewritten, it moves. `"none"` while there is no file.
    pub(super) fn read_fires_mark(&self) -> Option<String> {
        match std::fs::symlink_metadata(self.fires_path()) {
            Ok(m) => {
                let (secs, nanos) = crate::os::mtime(&m);
                Some(format!("{} {} {secs}.{nanos}", crate::os::file_id(&m).0, m.len()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("none".into()),
            Err(_) => None,
        }
    }

    /// The last record appended that reads, from the file's end: only the
    /// lines after it are parsed (the daemon asks at every firing).
    pub(super) fn read_last_fire(&self) -> Result<Option<Fire>> {
        let path = self.fires_path();
        let Some((mut file, len)) = fsx::open_read(&path)? else {
            return Ok(None);
        };
        let from = len.saturating_sub(TAIL);
        let mut tail = Vec::with_capacity((len - from) as usize);
        file.seek(SeekFrom::Start(from))
            .and_then(|_| file.take(TAIL).read_to_end(&mut tail))
            .map_err(Error::io("reading", &path))?;
        // The first line of a tail read from the middle is a part of one.
        let whole = match from {
            0 => &tail[..],
            _ => tail
                .iter()
                .position(|&b| b == b'\n')
                .map_or(&[][..], |i| &tail[i + 1..]),
        };
        Ok(last_record(whole, &path))
    }

    /// Appends `records` in one write, after rewriting the file folded if
    /// it has grown past [`MAX`].
    pub(super) fn append_fires(&self, records: &[Fire]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let path = self.fires_path();
        let mut lines = Vec::new();
        for r in records {
            serde_json::to_writer(&mut lines, r).map_err(|e| Error::io("writing", &path)(e.into()))?;
            lines.push(b'\n');
        }
        let (mut file, mut len) = fsx::open_append(&path)?;
        if len > MAX {
            drop(file);
            self.compact_fires()?;
            (file, len) = fsx::open_append(&path)?;
        }
        // After an append cut short, the next record starts a line of its own.
        let mut last = [0u8];
        if len > 0 && file.read_at(&mut last, len - 1).is_ok_and(|n| n == 1) && last[0] != b'\n' {
            lines.insert(0, b'\n');
        }
        file.write_all(&lines).map_err(Error::io("appending to", &path))
    }

    /// Rewrites the ledger folded, keeping its newest [`KEEP`] records.
    fn compact_fires(&self) -> Result<()> {
        let path = self.fires_path();
        let mut records = self.read_fires(None)?;
        records.drain(..records.len().saturating_sub(KEEP));
        let mut bytes = Vec::new();
        for r in &records {
            serde_json::to_writer(&mut bytes, r).map_err(|e| Error::io("writing", &path)(e.into()))?;
            bytes.push(b'\n');
        }
        match fsx::replace(self.path(), &path, &bytes, false) {
            fsx::Written::Durable => Ok(()),
            fsx::Written::Unsynced(e) | fsx::Written::Not(e) => Err(e),
        }
    }
}

/// The records in `bytes`, one a line, passing over (with a warning) a
/// line that does not read.
fn parse(bytes: &[u8], path: &std::path::Path) -> Vec<Fire> {
    let mut out = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Fire>(line) {
            Ok(r) => out.push(r),
            Err(e) => tracing::warn!(
                "{}:{}: passed over a line that does not read: {e}",
                path.display(),
                i + 1
            ),
        }
    }
    out
}

/// The last line of `bytes` that reads as a record, passing over (with a
/// warning) the lines after it that do not.
fn last_record(bytes: &[u8], path: &std::path::Path) -> Option<Fire> {
    bytes
        .rsplit(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .find_map(|line| {
            serde_json::from_slice::<Fire>(line)
                .inspect_err(|e| {
                    tracing::warn!(
                        "{}: passed over a line at its end that does not read: {e}",
                        path.display()
                    );
                })
                .ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fires::{Kind, why};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn dir() -> (tempfile::TempDir, LoopDir) {
        let tmp = tempfile::tempdir().unwrap();
        let root = crate::root::Root::at(tmp.path());
        let dir = LoopDir::new(&root, crate::root::LoopName::new("l").unwrap());
        std::fs::create_dir_all(dir.path()).unwrap();
        (tmp, dir)
    }

    #[test]
    fn appended_records_read_back_folded_and_the_last_from_the_end() {
        let (_tmp, dir) = dir();
        assert!(dir.read_fires(None).unwrap().is_empty());
        assert_eq!(dir.read_last_fire().unwrap(), None);
        dir.append_fires(&[Fire::sample(t(0), Kind::Ran, "ran")]).unwrap();
        for i in 1..=300 {
            dir.append_fires(&[Fire::sample(t(i * 60), Kind::Skipped, why::INACTIVE)])
                .unwrap();
        }
        let read = dir.read_fires(None).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].count, 300);
        assert_eq!(dir.read_last_fire().unwrap().unwrap().at, t(300 * 60));
        let since = t(300 * 60);
        assert_eq!(dir.read_fires(Some(since)).unwrap().len(), 1);
    }

    #[test]
    fn a_torn_last_line_is_passed_over() {
        let (_tmp, dir) = dir();
        dir.append_fires(&[
            Fire::sample(t(0), Kind::Ran, "ran"),
            Fire::sample(t(60), Kind::Ran, "failed"),
        ])
        .unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.fires_path())
            .unwrap();
        f.write_all(b"{\"at\":\"2027-").unwrap();
        assert_eq!(dir.read_fires(None).unwrap().len(), 2);
        assert_eq!(dir.read_last_fire().unwrap().unwrap().why, "failed");
        // The next append starts on a line of its own.
        dir.append_fires(&[Fire::sample(t(120), Kind::Ran, "ran")])
            .unwrap();
        assert_eq!(dir.read_fires(None).unwrap().len(), 3);
    }

    #[test]
    fn a_ledger_past_its_size_is_rewritten_folded_with_its_newest_records() {
        let (_tmp, dir) = dir();
        let mut batch = Vec::new();
        for i in 0..10_000 {
            batch.push(Fire::sample(t(i * 60), Kind::Ran, "ran"));
        }
        dir.append_fires(&batch).unwrap();
        assert!(std::fs::metadata(dir.fires_path()).unwrap().len() > MAX);
        dir.append_fires(&[Fire::sample(t(10_000 * 60), Kind::Ran, "ran")])
            .unwrap();
        let read = dir.read_fires(None).unwrap();
        assert_eq!(read.len(), KEEP + 1);
        assert_eq!(
            read[0].at,
            Fire::sample(t((10_000 - KEEP as i64) * 60), Kind::Ran, "").at
        );
        assert!(std::fs::metadata(dir.fires_path()).unwrap().len() < MAX);
    }
}
