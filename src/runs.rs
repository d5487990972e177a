//! A loop's run directories, `runs/<tick>/` (this is the one code that
//! names them, in either store), and the files automaton itself reads and
//! writes there: the step's and verifier's output, the
//! metrics file, the note `cancel` leaves and the process group files.
//!
//! All of it is reached through [`fsx::Dir`] from the loop's directory:
//! the loop's directory and `runs/` are refused when they are symbolic
//! links, and nothing beneath them is followed. Pruning removes trees
//! through directory descriptors, unlinking a link met on the way rather
//! than following it. The step writes in its run directory as it likes
//! (it is the user's process); what automaton writes there replaces any
//! link or FIFO the step planted under its name rather than writing
//! through it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fsx::{self, Dir};
use crate::state::{Cancellation, ProcessStart};

/// The folder of run directories in a loop's directory.
pub(crate) const RUNS: &str = "runs";
/// The file in `runs/<tick>/` that `AUTOMATON_METRICS` names.
pub(crate) const METRICS: &str = "metrics";
/// The file in `runs/<tick>/` that `automaton cancel` writes (who asked,
/// as one line, then why, if they said) before it signals the step: the
/// tick then records itself as cancelled by them, and runs no verifier.
pub(crate) const CANCEL: &str = "cancel";
/// The most of the cancel note and of a group file that is read: room for
/// a name and a reason, each at most [`crate::bounds::MAX_TEXT`].
const NOTE_MAX: u64 = 16 * 1024;

/// The file in `runs/<tick>/` that holds `what`'s (`step`, `verifier`)
/// standard output, or its standard error.
pub(crate) fn output_name(what: &str, stderr: bool) -> String {
    format!("{what}.{}", if stderr { "err" } else { "out" })
}

/// The file in `runs/<tick>/` naming the process group of `what` while it
/// runs, with its leader's start, so `automaton cancel` can signal it from
/// outside: the verifier's, and the step's when its group could not be
/// made before the tick's `in_flight` record (which names it otherwise).
pub(crate) fn pgid_name(what: &str) -> String {
    format!("{what}.pgid")
}

/// The loop directory `base`, held open; refused when it is a link.
pub(crate) fn open_base(base: &Path) -> Result<Dir> {
    Dir::open(base).map_err(fsx::io_error("opening", base))
}

/// A loop's `runs/`, held open.
#[derive(Debug)]
pub(crate) struct Runs {
    dir: Dir,
}

impl Runs {
    /// `runs/` in the loop directory `base`; `None` when it is missing.
    pub(crate) fn open(base: &Path) -> Result<Option<Runs>> {
        let base = open_base(base)?;
        let dir = base.open_dir(RUNS).map_err(base.error("opening", RUNS))?;
        Ok(dir.map(|dir| Runs { dir }))
    }

    /// `runs/` in the loop directory `base`, made (0700, 02770 in a group's
    /// root) when missing.
    pub(crate) fn make(base: &Path) -> Result<Runs> {
        let base = open_base(base)?;
        let dir = base
            .make_dir(RUNS)
            .map_err(base.error("creating directory", RUNS))?;
        Ok(Runs { dir })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The run directory of `tick`, when there is one.
    pub(crate) fn run(&self, tick: u64) -> Result<Option<Dir>> {
        let name = tick.to_string();
        self.dir.open_dir(&name).map_err(self.dir.error("opening", &name))
    }

    /// The run directory of `tick`, made when missing (by `cancel`, when
    /// it comes before the tick has made it).
    pub(crate) fn make_run(&self, tick: u64) -> Result<Dir> {
        let name = tick.to_string();
        self.dir
            .make_dir(&name)
            .map_err(self.dir.error("creating directory", &name))
    }

    /// Makes `runs/<tick>` (mode 0700, 02770 in a group's root) for a tick
    /// about to run its step, and leaves at most `keep` run directories
    /// with it. When an old one
    /// has to go, the oldest is emptied and renamed to the new tick's name
    /// rather than removed: a rename costs the file system less than
    /// removing one directory and making another. A directory of that
    /// tick already there (`cancel` makes it when it comes first) is kept
    /// as it is. Only making the directory can fail; an old one that
    /// cannot be removed is logged and left for the next tick.
    pub(crate) fn make_for_tick(&self, tick: u64, keep: usize) -> io::Result<Dir> {
        let name = tick.to_string();
        let mut old = self.newest_first().unwrap_or_else(|e| {
            tracing::warn!("cannot list {}: {e}", self.path().display());
            Vec::new()
        });
        old.retain(|t| *t != tick);
        let doomed = old.split_off(old.len().min(keep.saturating_sub(1)));
        let mut ready = match self.dir.open_dir(&name) {
            // A link planted under the new run's name is ours to replace.
            Err(e) if fsx::is_link(&e) => self.dir.unlink(&name).map(|()| None)?,
            found => found?,
        };
        for t in doomed.iter().rev() {
            let done = match ready {
                Some(_) => self.dir.remove_tree(t.to_string()),
                None => self.recycle(*t, &name).map(|dir| ready = dir),
            };
            if let Err(e) = done {
                tracing::warn!(
                    "cannot prune the old run {}: {e}",
                    self.dir.join(t.to_string()).display()
                );
            }
        }
        match ready {
            Some(dir) => Ok(dir),
            None => self.dir.make_dir(&name),
        }
    }

    /// Removes all but the newest `keep` run directories (named by tick
    /// number; other entries are left alone). Returns how many it removed.
    pub(crate) fn prune(&self, keep: usize) -> io::Result<usize> {
        let mut removed = 0;
        for t in self.newest_first()?.iter().skip(keep) {
            self.dir.remove_tree(t.to_string())?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Empties the run directory of tick `from` and renames it to `to`;
    /// `None` when something is at `to` already (`from` is then removed).
    fn recycle(&self, from: u64, to: &str) -> io::Result<Option<Dir>> {
        let from = from.to_string();
        let Some(dir) = self.dir.open_dir(&from)? else {
            return Ok(None);
        };
        dir.remove_all()?;
        // A step may have opened its directory to others; the next one's
        // is private again (or its group's, in a group's root). Another
        // member's directory, whose mode only they may set, is made anew.
        #[cfg(unix)]
        let not_owner = |e: &io::Error| e.raw_os_error() == Some(nix::libc::EPERM);
        #[cfg(windows)]
        let not_owner = |e: &io::Error| e.kind() == io::ErrorKind::PermissionDenied;
        match dir.set_mode(self.dir.modes().dir()) {
            Err(e) if not_owner(&e) => {
                return self.dir.remove_tree(&from).map(|()| None);
            }
            done => done?,
        }
        match self.dir.rename_noreplace(&from, to) {
            Ok(()) => Ok(Some(dir.renamed(self.dir.join(to)))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self.dir.remove_tree(&from).map(|()| None),
            Err(e) => Err(e),
        }
    }

    /// The ticks of the run directories, newest first; other entries are
    /// passed over, and so is a link named like one.
    fn newest_first(&self) -> io::Result<Vec<u64>> {
        let mut runs: Vec<u64> = self
            .dir
            .entries()?
            .into_iter()
            .filter(|(_, is_dir)| *is_dir)
            .filter_map(|(name, _)| name.to_str()?.parse().ok())
            .collect();
        runs.sort_unstable_by(|a, b| b.cmp(a));
        Ok(runs)
    }
}

/// Removes all but the newest `keep` run directories of the loop whose
/// directory is `base`; how many it removed.
pub(crate) fn prune(base: &Path, keep: usize) -> Result<usize> {
    let Some(runs) = Runs::open(base)? else {
        return Ok(0);
    };
    runs.prune(keep).map_err(fsx::io_error("pruning", runs.path()))
}

/// Leaves the note of who cancels the tick, and why, in its run directory.
pub(crate) fn write_note(run: &Dir, note: &Cancellation) -> Result<()> {
    let mut text = format!("{}\n", note.by);
    if let Some(reason) = &note.reason {
        text += reason;
        text.push('\n');
    }
    write_small(run, CANCEL, text.as_bytes()).map_err(run.error("writing", CANCEL))
}

/// Takes back a note `cancel` left and then signalled nothing on.
pub(crate) fn remove_note(run: &Dir) {
    if let Err(e) = run.unlink(CANCEL) {
        tracing::warn!("cannot remove {}: {e}", run.join(CANCEL).display());
    }
}

/// Whether the run directory holds a cancel note: a regular file (a link
/// the step left by its name is none).
pub(crate) fn has_note(run: &Dir) -> bool {
    run.has_file(CANCEL)
}

/// Who cancelled the tick whose run directory this is, and why, if anyone
/// did: the note's first line (`an operator` when it names nobody) and
/// the rest (no reason when it is blank). A note that is not a regular
/// file (a link, a FIFO) is no note.
pub(crate) fn cancelled_by(run: &Dir) -> Option<Cancellation> {
    let text = match run.read(CANCEL, NOTE_MAX) {
        Ok(text) => text?,
        Err(e) => {
            tracing::warn!("{e}");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&text);
    let (by, reason) = text.split_once('\n').unwrap_or((&text, ""));
    let (by, reason) = (by.trim(), reason.trim());
    Some(Cancellation {
        by: if by.is_empty() { "an operator" } else { by }.to_owned(),
        reason: (!reason.is_empty()).then(|| reason.to_owned()),
    })
}

/// Writes `what`'s group file: `<pgid> <ticks> <boot>`, the leader's start
/// as [`ProcessStart`] says it (the group alone where it is not known).
pub(crate) fn write_group(run: &Dir, what: &str, pgid: i32, start: Option<&ProcessStart>) -> io::Result<()> {
    let line = match start {
        Some(s) => format!("{pgid} {} {}\n", s.ticks, s.boot),
        None => format!("{pgid}\n"),
    };
    write_small(run, &pgid_name(what), line.as_bytes())
}

/// `what`'s group file, read: the group and its leader's start, if said.
pub(crate) fn read_group(run: &Dir, what: &str) -> Option<(i32, Option<ProcessStart>)> {
    let text = run.read(pgid_name(what), NOTE_MAX).ok()??;
    let text = String::from_utf8(text).ok()?;
    let mut words = text.split_whitespace();
    let pgid = words.next()?.parse().ok()?;
    let start = match (words.next().and_then(|t| t.parse().ok()), words.next()) {
        (Some(ticks), Some(boot)) => Some(ProcessStart {
            ticks,
            boot: boot.to_owned(),
        }),
        _ => None,
    };
    Some((pgid, start))
}

/// Writes a small file of ours (0600, 0660 in a group's root) in `dir`,
/// replacing whatever non-file was there under its name.
fn write_small(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    dir.create(name)?.write_all(bytes)
}

/// The path of `runs/<tick>` in the loop directory `base`, for messages
/// and the step's environment.
pub(crate) fn run_path(base: &Path, tick: u64) -> PathBuf {
    base.join(RUNS).join(tick.to_string())
}

#[cfg(all(test, unix))]
mod tests;
