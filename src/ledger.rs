//! The run ledger: what a gate asks to see of a loop's history
//! (`context.history`, WIT 0.3.0), the last runs and each metric's sum over
//! windows ending now, computed by the host.
//!
//! A run is a `tick` event whose step ran. The ledger keeps one compact
//! entry a run, oldest first, carrying the run's metrics and the running
//! sums (of the metrics, the runs and the failures) up to and including it:
//! a window's sums are the newest entry's running sums less those of the
//! last entry before the window, so a window of any length costs two
//! look-ups. The file store keeps the ledger in a file, `ledger.jsonl` in
//! the loop's directory, where both look-ups are binary
//! searches over byte offsets and the last runs are read from the end; it
//! is a cache derived from the history, brought up to the state's last
//! run before each use and made again when it is missing, damaged or
//! belongs to an older loop of the same name. The PostgreSQL store keeps
//! the same entries in a table the server writes with each commit
//! (`src/store/pg/runs.rs`); a store that keeps none makes them in memory
//! from the history ([`from_events`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::domain::{GateHistory, HistoryRequest, PastRun, WindowSums};
use crate::history::{Event, EventKind};

/// One run in the ledger, with the running sums up to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The tick's number.
    pub tick: u64,
    /// When it ended, in milliseconds since the Unix epoch (never before
    /// the entry before it).
    pub at: u64,
    /// Whether the step (and verifier) succeeded.
    #[serde(default, skip_serializing_if = "is_false")]
    pub failed: bool,
    /// The metrics its step reported.
    #[serde(default, rename = "m", skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
    /// Each metric's running sum up to and including this run.
    #[serde(default, rename = "s", skip_serializing_if = "BTreeMap::is_empty")]
    pub sums: BTreeMap<String, f64>,
    /// Runs up to and including this one.
    pub n: u64,
    /// Failed runs up to and including this one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub f: u64,
    /// A mark that the history holds no runs up to `tick` beyond the
    /// entries before it (a run lost with a rotated or crashed tick), so
    /// they are not looked for again: not a run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub gap: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Entry {
    /// The entry of a run after `prev`.
    pub fn after(prev: Option<&Entry>, run: &PastRun) -> Entry {
        let mut sums = prev.map(|p| p.sums.clone()).unwrap_or_default();
        for (k, v) in &run.metrics {
            *sums.entry(k.clone()).or_insert(0.0) += v;
        }
        Entry {
            tick: run.tick,
            at: run.ended_at_ms.max(prev.map_or(0, |p| p.at)),
            failed: !run.ok,
            metrics: run.metrics.clone(),
            sums,
            n: prev.map_or(0, |p| p.n) + 1,
            f: prev.map_or(0, |p| p.f) + u64::from(!run.ok),
            gap: false,
        }
    }

    /// A gap mark at `tick` after `prev` (its sums carried on).
    fn gap(prev: Option<&Entry>, tick: u64) -> Entry {
        Entry {
            tick,
            gap: true,
            metrics: BTreeMap::new(),
            failed: false,
            ..prev.cloned().unwrap_or_default()
        }
    }

    fn run(&self) -> PastRun {
        PastRun {
            tick: self.tick,
            ended_at_ms: self.at,
            ok: !self.failed,
            metrics: self.metrics.clone(),
        }
    }
}

/// The run an event records, if it is a tick whose step ran.
pub fn run_of(event: &Event) -> Option<PastRun> {
    let EventKind::Tick {
        tick,
        step: Some(step),
        verifier,
        metrics,
        ..
    } = &event.kind
    else {
        return None;
    };
    Some(PastRun {
        tick: *tick,
        ended_at_ms: u64::try_from(event.at.as_millisecond()).unwrap_or(0),
        ok: step.success()
            && verifier
                .as_ref()
                .is_none_or(crate::state::ProcessOutcome::success),
        metrics: metrics.clone(),
    })
}

/// Where the entries are: what answering a request needs of them.
pub trait Entries {
    /// The newest entry.
    fn newest(&mut self) -> std::io::Result<Option<Entry>>;
    /// The newest `n` entries, oldest first (gap marks among them).
    fn last(&mut self, n: usize) -> std::io::Result<Vec<Entry>>;
    /// The newest entry that ended at or before `at` (ms).
    fn at_or_before(&mut self, at: u64) -> std::io::Result<Option<Entry>>;
}

impl Entries for &[Entry] {
    fn newest(&mut self) -> std::io::Result<Option<Entry>> {
        Ok(<[Entry]>::last(self).cloned())
    }

    fn last(&mut self, n: usize) -> std::io::Result<Vec<Entry>> {
        Ok(self[self.len().saturating_sub(n)..].to_vec())
    }

    fn at_or_before(&mut self, at: u64) -> std::io::Result<Option<Entry>> {
        let i = self.partition_point(|e| e.at <= at);
        Ok(i.checked_sub(1).map(|i| self[i].clone()))
    }
}

/// What `request` asks for at `now` (ms) from `entries`, with `current`
/// (this tick's run, not yet committed, after its step) counted as the
/// newest run.
pub fn answer(
    entries: &mut dyn Entries,
    request: &HistoryRequest,
    now: u64,
    current: Option<&PastRun>,
) -> std::io::Result<GateHistory> {
    let request = request.bounded();
    let mut history = GateHistory::default();
    let newest = entries.newest()?;
    let newest = match current {
        Some(run) if newest.as_ref().is_none_or(|e| e.tick < run.tick) => {
            Some(Entry::after(newest.as_ref(), run))
        }
        _ => newest,
    };
    let Some(newest) = newest else {
        history.windows = request
            .windows_ms
            .iter()
            .map(|&w| WindowSums {
                window_ms: w,
                ..WindowSums::default()
            })
            .collect();
        return Ok(history);
    };
    if request.runs > 0 {
        let want = request.runs as usize;
        let counted = usize::from(current.is_some_and(|c| c.tick == newest.tick));
        // Gap marks are not runs: read past them (they are rare).
        let mut read = want;
        loop {
            let entries_read = entries.last(read)?;
            let runs: Vec<&Entry> = entries_read.iter().filter(|e| !e.gap).collect();
            if runs.len() + counted >= want || entries_read.len() < read {
                let skip = (runs.len() + counted).saturating_sub(want);
                history.runs = runs.iter().skip(skip).map(|e| e.run()).collect();
                break;
            }
            read += want - runs.len() - counted;
        }
        if counted == 1 {
            history.runs.push(newest.run());
        }
    }
    for &window in &request.windows_ms {
        let start = now.saturating_sub(window);
        let base = entries.at_or_before(start)?;
        history.windows.push(between(base.as_ref(), &newest, window));
    }
    Ok(history)
}

/// The sums of the runs after `base` up to `newest`.
fn between(base: Option<&Entry>, newest: &Entry, window_ms: u64) -> WindowSums {
    let sums = newest
        .sums
        .iter()
        .map(|(k, &to)| {
            let from = base.and_then(|b| b.sums.get(k)).copied().unwrap_or(0.0);
            (k.clone(), difference(to, from))
        })
        .filter(|(_, v)| *v != 0.0)
        .collect();
    let (n, f) = base.map_or((0, 0), |b| (b.n, b.f));
    WindowSums {
        window_ms,
        runs: u32::try_from(newest.n - n).unwrap_or(u32::MAX),
        failures: u32::try_from(newest.f - f).unwrap_or(u32::MAX),
        sums,
    }
}

/// `to - from` of two running sums, rid of the rounding error a difference
/// of large sums brings (`2.3000000000000003` for `2.3`): kept to 12
/// significant digits of the larger.
fn difference(to: f64, from: f64) -> f64 {
    let d = to - from;
    let magnitude = to.abs().max(from.abs());
    if d == 0.0 || !d.is_finite() || magnitude == 0.0 {
        return d;
    }
    #[allow(clippy::cast_possible_truncation)]
    let digits = 12 - magnitude.log10().ceil() as i32;
    let scale = 10f64.powi(digits);
    let rounded = (d * scale).round() / scale;
    if rounded.is_finite() { rounded } else { d }
}

/// The ledger of `events` (a loop's history, oldest first), made in memory.
pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for run in events.into_iter().filter_map(run_of) {
        let e = Entry::after(entries.last(), &run);
        entries.push(e);
    }
    entries
}

/// A ledger file.
pub struct LedgerFile {
    path: PathBuf,
    file: Option<File>,
    len: u64,
}

/// The most bytes of ledger a look-up reads one line at a time, once the
/// binary search narrowed it down.
const SCAN: u64 = 4096;

impl LedgerFile {
    /// The ledger at `path`, which may not exist yet.
    pub fn open(path: &Path) -> std::io::Result<LedgerFile> {
        let file = match File::open(path) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let len = match &file {
            Some(f) => f.metadata()?.len(),
            None => 0,
        };
        Ok(LedgerFile {
            path: path.to_owned(),
            file,
            len,
        })
    }

    /// Replaces the ledger with `entries`, atomically.
    pub fn write_all(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let modes = crate::fsx::Modes::of_dir(dir);
        let mut tmp = crate::fsx::mode::builder(modes).tempfile_in(dir)?;
        modes.set_file(tmp.as_file())?;
        {
            let mut w = std::io::BufWriter::new(tmp.as_file_mut());
            for e in entries {
                serde_json::to_writer(&mut w, e).map_err(std::io::Error::other)?;
                w.write_all(b"\n")?;
            }
            w.flush()?;
        }
        // Closed first: Windows renames over no open file.
        self.file = None;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        *self = LedgerFile::open(&self.path)?;
        Ok(())
    }

    /// Adds `entries` at the end, in one write.
    pub fn append(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut buf, e).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        // Made as the root's files are: 0600 (0660 in a group's root), an
        // owner-only ACL on Windows.
        let modes = crate::fsx::Modes::of_dir(dir);
        let mut f = crate::fsx::create_mode(
            std::fs::OpenOptions::new().append(true).create(true),
            modes.file(),
        )
        .open(&self.path)?;
        if f.metadata()?.len() == 0 {
            modes.set_file(&f)?;
        }
        f.write_all(&buf)?;
        *self = LedgerFile::open(&self.path)?;
        Ok(())
    }

    /// The first whole line starting at or after `offset`: its start and
    /// entry.
    fn line_from(&mut self, offset: u64) -> std::io::Result<Option<(u64, Entry)>> {
        let Some(file) = self.file.as_mut() else {
            return Ok(None);
        };
        let start = offset.saturating_sub(1);
        file.seek(SeekFrom::Start(start))?;
        let mut r = BufReader::with_capacity(512, file);
        let mut line = Vec::new();
        let mut at = start;
        if offset > 0 {
            // The rest of the line `offset - 1` is in.
            at += r.read_until(b'\n', &mut line)? as u64;
            line.clear();
        }
        if at >= self.len {
            return Ok(None);
        }
        r.read_until(b'\n', &mut line)?;
        Ok(Some((at, parse(&line)?)))
    }
}

fn parse(line: &[u8]) -> std::io::Result<Entry> {
    serde_json::from_slice(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

impl Entries for LedgerFile {
    fn newest(&mut self) -> std::io::Result<Option<Entry>> {
        Ok(self.last(1)?.pop())
    }

    fn last(&mut self, n: usize) -> std::io::Result<Vec<Entry>> {
        let Some(file) = self.file.as_mut() else {
            return Ok(Vec::new());
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        // Read back from the end in growing chunks until n lines are in.
        let mut chunk = 256 * n as u64;
        loop {
            let from = self.len.saturating_sub(chunk);
            file.seek(SeekFrom::Start(from))?;
            let mut buf = Vec::new();
            Read::by_ref(file).take(self.len - from).read_to_end(&mut buf)?;
            let mut text: &[u8] = &buf;
            if from > 0 {
                // Drop the partial first line.
                match text.iter().position(|&b| b == b'\n') {
                    Some(i) => text = &text[i + 1..],
                    None => text = &[],
                }
            }
            let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
            if lines.len() >= n || from == 0 {
                return lines[lines.len().saturating_sub(n)..]
                    .iter()
                    .map(|l| parse(l))
                    .collect();
            }
            chunk *= 2;
        }
    }

    fn at_or_before(&mut self, at: u64) -> std::io::Result<Option<Entry>> {
        // Lines starting at or after `hi` all ended after `at` (the entries'
        // ends never decrease); `lo` is 0 or the start of a line that ended
        // at or before it, so the answer starts there or later.
        let (mut lo, mut hi) = (0, self.len);
        while hi - lo > SCAN {
            let mid = lo + (hi - lo) / 2;
            match self.line_from(mid)? {
                Some((start, e)) if start < hi => {
                    if e.at > at {
                        hi = start;
                    } else {
                        lo = start;
                    }
                }
                _ => hi = mid,
            }
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(None);
        };
        file.seek(SeekFrom::Start(lo))?;
        let mut r = BufReader::new(Read::by_ref(file).take(self.len - lo));
        let mut found = None;
        let mut line = Vec::new();
        let mut pos = lo;
        while pos < hi {
            line.clear();
            let read = r.read_until(b'\n', &mut line)? as u64;
            if read == 0 {
                break;
            }
            pos += read;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let e = parse(&line)?;
            if e.at > at {
                break;
            }
            found = Some(e);
        }
        Ok(found)
    }
}

/// The ledger at `path` brought up to the committed run `committed` (the
/// state's tick before this tick's step), the missing runs read from the
/// history by `newer` (the runs after a tick, at most n, oldest first) or,
/// when the ledger is missing or does not fit, all of them by `all`.
///
/// # Errors
/// What reading the history or the ledger's file failed with.
pub fn sync<E>(
    path: &Path,
    committed: u64,
    newer: &mut dyn FnMut(u64, usize) -> Result<Vec<PastRun>, E>,
    all: &mut dyn FnMut() -> Result<Vec<PastRun>, E>,
) -> Result<LedgerFile, SyncError<E>> {
    let mut ledger = LedgerFile::open(path).map_err(SyncError::Io)?;
    let newest = ledger.newest().ok().flatten();
    match newest {
        Some(e) if e.tick == committed => return Ok(ledger),
        Some(e) if e.tick < committed => {
            let missing = usize::try_from(committed - e.tick).unwrap_or(usize::MAX);
            let runs = newer(e.tick, missing).map_err(SyncError::History)?;
            let after = e.tick;
            let mut prev = e;
            let mut add = Vec::new();
            for run in runs.iter().filter(|r| r.tick > after && r.tick <= committed) {
                prev = Entry::after(Some(&prev), run);
                add.push(prev.clone());
            }
            if prev.tick < committed {
                prev = Entry::gap(Some(&prev), committed);
                add.push(prev);
            }
            ledger.append(&add).map_err(SyncError::Io)?;
        }
        _ => {
            let runs = all().map_err(SyncError::History)?;
            let mut entries: Vec<Entry> = Vec::new();
            for run in runs.iter().filter(|r| r.tick <= committed) {
                let e = Entry::after(entries.last(), run);
                entries.push(e);
            }
            if entries.last().is_none_or(|e| e.tick < committed) && committed > 0 {
                let g = Entry::gap(entries.last(), committed);
                entries.push(g);
            }
            ledger.write_all(&entries).map_err(SyncError::Io)?;
        }
    }
    Ok(ledger)
}

/// Why a ledger could not be brought up to date.
#[derive(Debug)]
pub enum SyncError<E> {
    Io(std::io::Error),
    History(E),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(tick: u64, at: u64, ok: bool, cost: f64) -> PastRun {
        PastRun {
            tick,
            ended_at_ms: at,
            ok,
            metrics: [("cost_usd".to_owned(), cost)].into(),
        }
    }

    fn entries(runs: &[PastRun]) -> Vec<Entry> {
        let mut out: Vec<Entry> = Vec::new();
        for r in runs {
            let e = Entry::after(out.last(), r);
            out.push(e);
        }
        out
    }

    /// 2,000 runs a minute apart (tick i at i minutes, cost i/10, every
    /// 7th failing), in memory and in a file: both answer alike, and as a
    /// sum over the runs does.
    #[test]
    fn windows_and_last_runs_from_memory_and_file_agree_with_a_plain_sum() {
        let runs: Vec<PastRun> = (1..=2000)
            .map(|i| {
                run(
                    i,
                    i * 60_000,
                    i % 7 != 0,
                    f64::from(u32::try_from(i).unwrap()) / 10.0,
                )
            })
            .collect();
        let all = entries(&runs);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.jsonl");
        let mut file = LedgerFile::open(&path).unwrap();
        file.write_all(&all).unwrap();
        let now = 2000 * 60_000 + 30_000;
        let request = HistoryRequest {
            runs: 3,
            windows_ms: vec![3_600_000, 86_400_000, 1, 0, 60_000 * 500 + 30_000],
        };
        let from_memory = answer(&mut all.as_slice(), &request, now, None).unwrap();
        let from_file = answer(&mut file, &request, now, None).unwrap();
        assert_eq!(from_memory, from_file);
        assert_eq!(
            from_file.runs.iter().map(|r| r.tick).collect::<Vec<_>>(),
            [1998, 1999, 2000]
        );
        for (w, got) in request.windows_ms.iter().zip(&from_file.windows) {
            let inside: Vec<&PastRun> = runs.iter().filter(|r| r.ended_at_ms > now - w).collect();
            let sum: f64 = inside.iter().map(|r| r.metrics["cost_usd"]).sum();
            assert_eq!(got.runs as usize, inside.len(), "window {w}");
            assert_eq!(got.failures as usize, inside.iter().filter(|r| !r.ok).count());
            assert!(
                (got.sums.get("cost_usd").copied().unwrap_or(0.0) - sum).abs() < 1e-6,
                "{w}: {got:?} vs {sum}"
            );
        }
        assert_eq!(from_file.windows[0].runs, 60);
        assert_eq!(from_file.windows[1].runs, 1440);
        // Every instant's base, against the slice's.
        for at in (0..2002 * 60_000).step_by(37_129) {
            assert_eq!(
                file.at_or_before(at).unwrap(),
                all.as_slice().at_or_before(at).unwrap(),
                "at {at}"
            );
        }
    }

    #[test]
    #[allow(clippy::float_cmp)] // exactly: the rounding is what is tested
    fn the_current_run_counts_and_sums_are_rounded() {
        let all = entries(&[run(1, 1000, true, 0.1), run(2, 2000, true, 0.2)]);
        let current = run(3, 3000, false, 2.0);
        let request = HistoryRequest {
            runs: 2,
            windows_ms: vec![1500],
        };
        let h = answer(&mut all.as_slice(), &request, 3000, Some(&current)).unwrap();
        assert_eq!(h.runs.iter().map(|r| r.tick).collect::<Vec<_>>(), [2, 3]);
        assert_eq!((h.windows[0].runs, h.windows[0].failures), (2, 1));
        assert_eq!(h.windows[0].sums["cost_usd"], 2.2);
    }

    #[test]
    #[allow(clippy::float_cmp)] // sums of whole numbers are exact
    fn sync_appends_the_missing_runs_marks_gaps_and_remakes_a_ledger_that_does_not_fit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger/l.jsonl");
        let history: Vec<PastRun> = (1..=5).map(|i| run(i, i * 10, true, 1.0)).collect();
        let mut asked_all = 0;
        let mut newer = |after: u64, n: usize| -> Result<Vec<PastRun>, ()> {
            Ok(history
                .iter()
                .filter(|r| r.tick > after)
                .take(n)
                .cloned()
                .collect())
        };
        let mut all = || {
            asked_all += 1;
            Ok::<_, ()>(history[..3].to_vec())
        };
        let mut l = sync(&path, 3, &mut newer, &mut all).unwrap();
        assert_eq!(l.newest().unwrap().unwrap().n, 3);
        let mut l2 = sync(&path, 5, &mut newer, &mut || Ok(vec![])).unwrap();
        assert_eq!(l2.newest().unwrap().unwrap().sums["cost_usd"], 5.0);
        // Tick 7's run is nowhere in the history: a gap mark, not asked again.
        let l3 = sync(&path, 7, &mut newer, &mut || Ok(vec![])).unwrap();
        let lines = std::fs::read_to_string(&l3.path).unwrap();
        assert_eq!(lines.lines().count(), 6);
        assert!(lines.lines().last().unwrap().contains("\"gap\":true"));
        let mut fail = |_: u64, _: usize| -> Result<Vec<PastRun>, ()> { Err(()) };
        let mut l4 = sync(&path, 7, &mut fail, &mut || Err(())).unwrap();
        let h = answer(
            &mut l4,
            &HistoryRequest {
                runs: 10,
                windows_ms: vec![1000],
            },
            100,
            None,
        )
        .unwrap();
        assert_eq!(h.runs.len(), 5, "gap marks are not runs");
        assert_eq!(h.windows[0].runs, 5);
        // A newer ledger than the state (the loop made again): remade, once
        // no other handle has it open (Windows replaces no open file).
        drop((l, l2, l3, l4));
        let mut l5 = sync(&path, 2, &mut fail, &mut || Ok(history[..2].to_vec())).unwrap();
        assert_eq!(l5.newest().unwrap().unwrap().tick, 2);
        assert_eq!(asked_all, 1);
    }
}
