//! What `doctor` finds wrong with a loop directory, looked at without the lock
//! and without changing anything.

use std::time::Duration;

use super::flight::{self, Flight, Found};
use super::{FLIGHT, HISTORY, LoopDir, NEW_PREFIX, REMOVED_PREFIX, journal, rotation};
use crate::lock;
use crate::root::{LoopName, Root};
use crate::store::{Finding, Level};

/// Every finding on `dir`.
pub(super) fn findings(dir: &LoopDir) -> Vec<Finding> {
    let mut out = Vec::new();
    let (found, file_state) = Finding::state(dir.read_state(), ".state.loop");
    out.push(found);
    let holder = lock::recorded_holder(&dir.lock_path());
    let ticking = matches!(&holder, Some((h, true)) if h.command == "tick");
    let mut state = file_state.clone();
    if let Some(s) = &file_state {
        let (found, whole) = dir.check_flight(s.version, ticking);
        out.extend(found);
        if let Some(f) = whole {
            state = Some(f.state);
        }
    }
    match &holder {
        Some((h, true)) => out.push(Finding::ok("lock", format!("held by {}", h.describe()))),
        Some((h, false)) => out.push(Finding::new(
            "lock",
            Level::Note,
            format!(
                "the lock file names pid {} on {}, which is gone; the lock is free",
                h.pid, h.host
            ),
            "nothing: the next holder writes its own record",
        )),
        None => out.push(Finding::ok("lock", "free")),
    }
    if let Some(f) = state.as_ref().and_then(|s| s.in_flight.as_ref()) {
        out.push(Finding::in_flight(f, ticking));
    }
    if let Some(s) = &file_state {
        out.extend(dir.check_history(s.version));
    }
    match dir.stray_files() {
        Ok(strays) if !strays.is_empty() => out.push(
            Finding::new(
                "temp-files",
                Level::Warning,
                match strays.len() {
                    1 => "a temporary file left by a writer that died".to_owned(),
                    n => format!("{n} temporary files left by writers that died"),
                },
                "the next command on the loop removes them; `--fix` does it now",
            )
            .fixable(),
        ),
        Ok(_) => {}
        Err(e) => out.push(Finding::new(
            "temp-files",
            Level::Error,
            e.to_string(),
            "check the directory's permissions",
        )),
    }
    out
}

impl LoopDir {
    /// The `in_flight` record's findings, against the state file's
    /// `version`, and the record when it is whole and of the next version.
    fn check_flight(&self, version: u64, ticking: bool) -> (Option<Finding>, Option<Flight>) {
        match flight::read(&self.flight_path(), version + 1) {
            Ok(Found::Missing) => (None, None),
            Ok(Found::Whole(f)) => (
                Some(Finding::ok(
                    "in-flight-record",
                    format!("{FLIGHT} commits version {}", f.version()),
                )),
                Some(*f),
            ),
            // The record of a tick that committed: every loop that ticked
            // has one, and there is nothing to say of it.
            Ok(Found::Stale) => (None, None),
            Ok(Found::Newer(v)) => (
                Some(Finding::new(
                    "in-flight-record",
                    Level::Warning,
                    format!("{FLIGHT} is of version {v}, ahead of the state's {version}; it is ignored"),
                    "nothing is lost: the state and history do not depend on it; the next tick writes over it",
                )),
                None,
            ),
            Ok(Found::Torn) if ticking => (
                Some(Finding::ok(
                    "in-flight-record",
                    format!("{FLIGHT} is being written by the running tick"),
                )),
                None,
            ),
            Ok(Found::Torn) => (
                Some(Finding::new(
                    "in-flight-record",
                    Level::Note,
                    format!("{FLIGHT} is torn (its writer died mid-write); it is ignored"),
                    "nothing: a torn record never counted, and the next tick writes over it",
                )),
                None,
            ),
            Err(e) => (
                Some(Finding::new(
                    "in-flight-record",
                    Level::Error,
                    e.to_string(),
                    format!("move {FLIGHT} aside: the loop cannot be used while it does not read"),
                )),
                None,
            ),
        }
    }

    /// The history's findings: an unfinished commit at its end, lines that
    /// cannot be read, rotated files an older build left with a gap.
    fn check_history(&self, version: u64) -> Vec<Finding> {
        let mut out: Vec<Finding> = rotation::check(&self.dir).into_iter().collect();
        match journal::uncommitted(&self.history_path(), version) {
            Ok(0) => {}
            Ok(n) => out.push(
                Finding::new(
                    "history",
                    Level::Warning,
                    format!("{n} bytes at the end of {HISTORY} are an unfinished commit (a writer died mid-commit); readers pass over them"),
                    "the next command on the loop cuts them; `--fix` does it now",
                )
                .fixable(),
            ),
            Err(e) => out.push(Finding::new("history", Level::Error, e.to_string(), "move the file aside")),
        }
        let read =
            rotation::open_all(&self.dir).and_then(|(files, _)| journal::read_committed(files, version));
        match read {
            Ok(h) if h.bad.is_empty() => {
                out.push(Finding::ok("history", format!("{} events", h.events.len())));
            }
            Ok(h) => {
                for b in h.bad.iter().take(5) {
                    out.push(Finding::new(
                        "history",
                        Level::Warning,
                        format!("{}:{} cannot be read: {}", b.path.display(), b.line, b.reason),
                        "readers pass over it; if it matters, mend or remove the line by hand",
                    ));
                }
            }
            Err(e) => out.push(Finding::new(
                "history",
                Level::Error,
                e.to_string(),
                "move the file aside",
            )),
        }
        out
    }
}

/// What is wrong in `root`'s loops directory itself: loop directories
/// that are links, and what a killed `new` or `rm` left (removed by `fix`
/// once older than `leftover_age`, so a `new` or `rm` at work is spared).
pub(crate) fn check_loops_dir(root: &Root, fix: bool, leftover_age: Duration) -> Vec<Finding> {
    let mut out = Vec::new();
    let loops = root.loops_dir();
    for entry in std::fs::read_dir(&loops).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|t| t.is_symlink()) && LoopName::new(&name).is_ok() {
            out.push(Finding::new(
                "loop directory",
                Level::Error,
                format!(
                    "{} is a symbolic link; automaton follows no link to a loop's files, so every command refuses loop {name:?}",
                    entry.path().display()
                ),
                "move the directory it points to into loops/ in its place, or remove the link",
            ));
            continue;
        }
        if !(name.starts_with(NEW_PREFIX) || name.starts_with(REMOVED_PREFIX)) {
            continue;
        }
        // A `new` or `rm` may be at work on it right now: only old ones go.
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() > leftover_age);
        let path = entry.path();
        if fix && old && std::fs::remove_dir_all(&path).is_ok() {
            out.push(Finding::ok("leftovers", format!("removed {}", path.display())));
            continue;
        }
        let finding = Finding::new(
            "leftovers",
            Level::Warning,
            format!("{} was left by a `new` or `rm` that was killed", path.display()),
            "`--fix` removes it once it is ten minutes old",
        );
        out.push(if old { finding.fixable() } else { finding });
    }
    out
}
