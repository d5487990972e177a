//! `history.jsonl` on disk: the events of each commit appended as lines
//! stamped with the state version they belong to (`"v"`), a torn or
//! uncommitted tail cut back under the lock, a new file started when it
//! has grown past its limit, and reads that keep only what the state has
//! committed.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::Deserialize;

use super::rotation::{self, HISTORY, Opened};
use crate::config::HistoryLimits;
use crate::error::{Error, Result};
use crate::fsx;
use crate::history::{BadLine, Event, History};

/// Appends one commit's lines to `dir`'s `history.jsonl` in one write and
/// syncs them, first starting a new file when this one has passed
/// `limits` (see [`rotation::rotate`]); returns whether it did. A write
/// cut short (a full disk, a file size limit) is cut back to where it
/// began, so the next commit never glues onto half a line; if even that
/// fails, the next session's repair does it. Only a lock holder may.
pub fn append(dir: &Path, lines: &[u8], limits: &HistoryLimits) -> Result<bool> {
    if lines.is_empty() {
        return Ok(false);
    }
    let path = dir.join(HISTORY);
    let (mut file, mut len) = fsx::open_append(&path)?;
    let rotate = len > 0 && len >= limits.max_size.as_u64();
    if rotate {
        drop(file);
        rotation::rotate(dir, limits.keep)?;
        (file, len) = fsx::open_append(&path)?;
    }
    if let Err(e) = file.write_all(lines).and_then(|()| file.sync_data()) {
        let _ = file.set_len(len);
        return Err(Error::io("appending to", &path)(e));
    }
    Ok(rotate)
}

/// Only the version of a line, to tell committed lines from the rest.
#[derive(Deserialize)]
struct Probe {
    /// Lines written before versions were stamped count as committed.
    #[serde(default)]
    v: u64,
}

/// Cuts what follows the last committed line: a torn last line (a writer
/// killed or a disk full mid-append) and lines stamped with a version the
/// state never reached (a commit that died before its state was written).
/// Returns how many bytes were cut. Only a lock holder may call it.
pub fn repair(path: &Path, version: u64) -> Result<u64> {
    let Some((file, len)) = fsx::open_write(path)? else {
        return Ok(0);
    };
    let keep = committed_end(&file, len, version).map_err(Error::io("reading", path))?;
    if keep < len {
        file.set_len(keep)
            .and_then(|()| file.sync_data())
            .map_err(Error::io("repairing", path))?;
    }
    Ok(len - keep)
}

/// How many bytes at the end of the file are not committed (a torn line,
/// lines of a version the state never reached); read-only.
pub fn uncommitted(path: &Path, version: u64) -> Result<u64> {
    let Some((file, len)) = fsx::open_read(path)? else {
        return Ok(0);
    };
    let keep = committed_end(&file, len, version).map_err(Error::io("reading", path))?;
    Ok(len - keep)
}

/// The end of the last committed line, found by walking back from the end
/// over complete lines. A line that is not JSON stops the walk: it is no
/// torn write (those never end in a newline) and is left for `doctor`.
fn committed_end(file: &File, len: u64, version: u64) -> std::io::Result<u64> {
    let mut end = len;
    while end > 0 {
        let start = line_start(file, end)?;
        let mut line = vec![0; (end - start) as usize];
        file.read_exact_at(&mut line, start)?;
        if line.last() != Some(&b'\n') {
            end = start;
            continue;
        }
        match serde_json::from_slice::<Probe>(&line) {
            Ok(p) if p.v > version => end = start,
            _ => return Ok(end),
        }
    }
    Ok(0)
}

/// Where the line that ends at `end` begins: just after the previous
/// newline, or at the start of the file.
fn line_start(file: &File, end: u64) -> std::io::Result<u64> {
    const CHUNK: u64 = 8192;
    // The byte at end - 1 is the line's own newline (or a torn byte).
    let mut hi = end.saturating_sub(1);
    while hi > 0 {
        let lo = hi.saturating_sub(CHUNK);
        let mut buf = vec![0; (hi - lo) as usize];
        file.read_exact_at(&mut buf, lo)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            return Ok(lo + i as u64 + 1);
        }
        hi = lo;
    }
    Ok(0)
}

/// Reads the history files (opened oldest first) and keeps the events
/// committed up to `version`. A torn last line of `history.jsonl` and
/// lines of a later version are an unfinished commit, passed over in
/// silence; other lines that do not parse (damage, an event kind from a
/// newer version) are returned apart, so readers can say so.
pub fn read_committed(files: Vec<Opened>, version: u64) -> Result<History> {
    let mut history = History::default();
    for Opened { path, file, current } in files {
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let mut number = 0;
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(Error::io("reading", &path))?;
            if n == 0 {
                break;
            }
            number += 1;
            let complete = line.last() == Some(&b'\n');
            if !complete && current {
                break;
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            if serde_json::from_slice::<Probe>(&line).is_ok_and(|p| p.v > version) {
                continue;
            }
            match serde_json::from_slice::<Event>(&line) {
                Ok(e) => history.events.push(e),
                Err(e) => history.bad.push(BadLine {
                    path: path.clone(),
                    line: number,
                    reason: if complete {
                        e.to_string()
                    } else {
                        "the line is cut short".to_owned()
                    },
                }),
            }
        }
    }
    Ok(history)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn line(v: u64) -> String {
        format!("{{\"v\":{v},\"at\":\"2026-01-01T00:00:00Z\",\"kind\":\"created\",\"by\":\"ann\"}}\n")
    }

    fn setup(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn repair_cuts_a_torn_line_and_uncommitted_lines_only() {
        let committed = format!("{}{}", line(1), line(2));
        let (_d, path) = setup(&format!("{committed}{}{}{{\"v\":4,\"at", line(3), line(4)));
        let cut = repair(&path, 2).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), committed);
        assert!(cut > 0);
        assert_eq!(repair(&path, 2).unwrap(), 0, "a repaired file needs nothing more");
    }

    #[test]
    fn repair_keeps_lines_without_a_version_and_lines_it_cannot_read() {
        let text = format!("{}not json\n", line(0));
        let (_d, path) = setup(&text);
        assert_eq!(repair(&path, 5).unwrap(), 0);
        let (_d, path) = setup(&format!("{}{}", line(1), line(9)));
        repair(&path, 1).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), line(1));
    }

    #[test]
    fn repair_walks_back_over_long_lines() {
        let long = format!(
            "{{\"v\":3,\"at\":\"2026-01-01T00:00:00Z\",\"kind\":\"paused\",\"by\":\"{}\"}}\n",
            "x".repeat(50_000)
        );
        let (_d, path) = setup(&format!("{}{long}{long}", line(2)));
        repair(&path, 2).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), line(2));
    }

    fn opened(path: &Path) -> Vec<Opened> {
        let file = File::open(path).unwrap();
        vec![Opened {
            path: path.to_owned(),
            file,
            current: true,
        }]
    }

    #[test]
    fn reads_keep_what_the_state_committed() {
        let (_d, path) = setup(&format!("{}{}garbage\n{}{{\"v\":", line(1), line(2), line(3)));
        let h = read_committed(opened(&path), 2).unwrap();
        assert_eq!(h.events.len(), 2);
        assert_eq!(
            h.bad.len(),
            1,
            "the damaged line is reported, the torn one is not"
        );
        assert_eq!(h.bad[0].line, 3);
        assert_eq!(read_committed(opened(&path), 3).unwrap().events.len(), 3);
    }
}
