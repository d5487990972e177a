//! `history.jsonl` on disk: the events of each commit appended as lines
//! stamped with the state version they belong to (`"v"`), a torn or
//! uncommitted tail cut back under the lock, a new file started when it
//! has grown past its limit, and reads that keep only what the state has
//! committed.

use crate::os::FileExt;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
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
pub(super) fn append(dir: &Path, lines: &[u8], limits: &HistoryLimits) -> Result<bool> {
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
pub(super) fn repair(path: &Path, version: u64) -> Result<u64> {
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
pub(super) fn uncommitted(path: &Path, version: u64) -> Result<u64> {
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
pub(super) fn read_committed(files: Vec<Opened>, version: u64) -> Result<History> {
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

/// Lines read from the end: those of `files` (opened oldest first),
/// newest first, each complete line once, as it is needed; a last line
/// not ended yet (an append in progress, or torn) is passed over. So a reader that wants the newest events holds those
/// only, never a whole file.
pub(super) struct Backwards {
    /// The files still to read, oldest first: the last is being read.
    files: Vec<Opened>,
    /// Where the unread part of the last file ends.
    end: Option<u64>,
}

/// One line read backwards: where it is and its bytes.
pub(super) struct BackLine {
    pub path: std::path::PathBuf,
    /// Its offset in its file.
    pub start: u64,
    pub bytes: Vec<u8>,
}

impl Backwards {
    pub(super) fn new(files: Vec<Opened>) -> Backwards {
        Backwards { files, end: None }
    }

    /// The next line back, if any is left.
    pub(super) fn next_line(&mut self) -> Result<Option<BackLine>> {
        loop {
            let Some(file) = self.files.last() else {
                return Ok(None);
            };
            let end = if let Some(end) = self.end {
                end
            } else {
                let len = file
                    .file
                    .metadata()
                    .map_err(Error::io("reading", &file.path))?
                    .len();
                // A line not ended yet is an append in progress (or
                // torn): it is no part of the history.
                let end = complete_end(&file.file, len).map_err(Error::io("reading", &file.path))?;
                self.end = Some(end);
                end
            };
            if end == 0 {
                self.files.pop();
                self.end = None;
                continue;
            }
            let start = line_start(&file.file, end).map_err(Error::io("reading", &file.path))?;
            let mut bytes = vec![0; (end - start) as usize];
            file.file
                .read_exact_at(&mut bytes, start)
                .map_err(Error::io("reading", &file.path))?;
            self.end = Some(start);
            return Ok(Some(BackLine {
                path: file.path.clone(),
                start,
                bytes,
            }));
        }
    }
}

/// The end of the file's last complete line (`len` when it ends in a
/// newline).
fn complete_end(file: &File, len: u64) -> std::io::Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8];
    file.read_exact_at(&mut last, len - 1)?;
    match last[0] == b'\n' {
        true => Ok(len),
        false => line_start(file, len),
    }
}

/// The number (from 1) of the line that starts at `start` in `path`,
/// counted by streaming the file: said only of a line that does not read.
pub(super) fn line_number(path: &Path, start: u64) -> usize {
    let Ok(Some((file, _))) = fsx::open_read(path) else {
        return 0;
    };
    let mut reader = BufReader::new(std::io::Read::take(file, start));
    let mut count = 1;
    loop {
        let buf = match reader.fill_buf() {
            Ok([]) | Err(_) => return count,
            Ok(buf) => buf,
        };
        count += buf.iter().filter(|&&b| b == b'\n').count();
        let n = buf.len();
        reader.consume(n);
    }
}

/// The newest `n` events `admits` takes among those of `files` (opened
/// oldest first) committed up to `version`, and those `newer` holds (the
/// events of an `in_flight` record, oldest first, newer than every
/// line), with `refusals` (read backwards too) merged in after the events
/// of the version each saw; oldest first. Reads from the end, so it holds
/// the answer, not the files.
pub(super) fn read_last(
    files: Vec<Opened>,
    version: u64,
    newer: &[Event],
    refusals: Vec<Opened>,
    n: usize,
    admits: &dyn Fn(&Event) -> bool,
) -> Result<History> {
    let mut history = History::default();
    let mut lines = Backwards::new(files);
    let mut refused = Backwards::new(refusals);
    let mut newer = newer.iter().rev().cloned().map(Ok);
    let mut next_event = |bad: &mut Vec<BadLine>| -> Result<Option<Event>> {
        if let Some(e) = newer.next() {
            return e.map(Some);
        }
        next_of(&mut lines, Some(version), bad)
    };
    let mut bad = Vec::new();
    let mut event = next_event(&mut bad)?;
    let mut refusal = next_of(&mut refused, None, &mut bad)?;
    let mut last = Vec::new();
    while last.len() < n {
        // Newest first: at one version, refusals came after its events.
        let take_refusal = match (&event, &refusal) {
            (Some(e), Some(r)) => r.v >= e.v,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        let taken = match take_refusal {
            true => std::mem::replace(&mut refusal, next_of(&mut refused, None, &mut bad)?),
            false => std::mem::replace(&mut event, next_event(&mut bad)?),
        };
        let Some(taken) = taken else { break };
        if admits(&taken) {
            last.push(taken);
        }
    }
    last.reverse();
    history.events = last;
    history.bad = bad;
    Ok(history)
}

/// The next event back in `lines`: lines of a version past `version`
/// (when given) are passed over, and so are blank ones; one that does not
/// read is kept in `bad`.
fn next_of(lines: &mut Backwards, version: Option<u64>, bad: &mut Vec<BadLine>) -> Result<Option<Event>> {
    while let Some(line) = lines.next_line()? {
        if line.bytes.trim_ascii().is_empty() {
            continue;
        }
        if let Some(version) = version
            && serde_json::from_slice::<Probe>(&line.bytes).is_ok_and(|p| p.v > version)
        {
            continue;
        }
        match serde_json::from_slice::<Event>(&line.bytes) {
            Ok(e) => return Ok(Some(e)),
            Err(e) => bad.push(BadLine {
                line: line_number(&line.path, line.start),
                path: line.path,
                reason: e.to_string(),
            }),
        }
    }
    Ok(None)
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

#[cfg(test)]
mod backwards {
    use super::*;
    use crate::history::{EventKind, merge};

    fn event(v: u64, kind: EventKind) -> String {
        let at = "2026-01-01T00:00:00Z".parse().unwrap();
        let e = Event::stamped(kind, v, at, &crate::who::identify("ann", None, &[]));
        String::from_utf8(e.to_line()).unwrap()
    }

    fn paused(v: u64, reason: &str) -> String {
        let kind = EventKind::Paused {
            by: "ann".into(),
            reason: Some(reason.into()),
        };
        event(v, kind)
    }

    fn refused(v: u64) -> String {
        let kind = EventKind::Refused {
            by: "mallory".into(),
            action: crate::access::Action::Pause,
            role: crate::access::Role::Operators,
            holders: vec!["ann".into()],
            unrecorded: 0,
        };
        event(v, kind)
    }

    fn open(dir: &Path, names: &[&str]) -> Vec<Opened> {
        names
            .iter()
            .map(|n| Opened {
                path: dir.join(n),
                file: File::open(dir.join(n)).unwrap(),
                current: *n == "history.jsonl",
            })
            .collect()
    }

    /// Read from the end, the newest `n` events a filter takes are those
    /// a whole read gives, merged and cut, in every case.
    #[test]
    fn the_newest_events_read_backwards_are_those_of_a_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let long = "x".repeat(20_000);
        let rotated: String = (1..=3).map(|v| paused(v, &format!("r{v}"))).collect();
        std::fs::write(d.join("history.1.jsonl"), rotated + "not json\n").unwrap();
        let current = format!(
            "{}{}\n{}{}{}{{\"v\":7,\"at",
            paused(4, &long),
            paused(5, "five"),
            paused(5, "five again"),
            paused(6, "six"),
            paused(7, "seven, not committed")
        );
        std::fs::write(d.join("history.jsonl"), current).unwrap();
        std::fs::write(d.join("refusals.1.jsonl"), refused(2) + &refused(4)).unwrap();
        std::fs::write(d.join("refusals.jsonl"), refused(6) + &refused(7) + "{\"v\"").unwrap();
        let files = ["history.1.jsonl", "history.jsonl"];
        let refusal_files = ["refusals.1.jsonl", "refusals.jsonl"];
        let whole = read_committed(open(d, &files), 6).unwrap();
        let kept = super::super::refusals::read(d).unwrap();
        let all = merge(whole.events, kept.events);
        type Filter = fn(&Event) -> bool;
        let filters: [Filter; 3] = [
            |_| true,
            |e| matches!(e.kind, EventKind::Paused { .. }),
            |e| e.v % 2 == 0,
        ];
        for admits in filters {
            for n in [0, 1, 2, 5, 100] {
                let mut want: Vec<Event> = all.iter().filter(|e| admits(e)).cloned().collect();
                want.drain(..want.len().saturating_sub(n));
                let got = read_last(open(d, &files), 6, &[], open(d, &refusal_files), n, &admits).unwrap();
                assert_eq!(got.events, want, "n = {n}");
            }
        }
        let got = read_last(open(d, &files), 6, &[], Vec::new(), 100, &|_| true).unwrap();
        assert_eq!(got.bad.len(), 1, "the damaged line is said");
        assert_eq!(got.bad[0].line, 4, "by its number");
    }
}
