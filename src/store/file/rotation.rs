//! Which files hold a loop's history, in what order: `history.jsonl`,
//! which commits append to, and the files it was rotated into,
//! `history.<n>.jsonl`, `n` one more than the highest there at each
//! rotation. A rotation is one rename, so a rotated history never has a
//! gap; readers list the directory and never stop at a missing number.
//! Files an older build rotated, `history.jsonl.<n>` (1 its newest), are
//! older than all of those and are read first; only `doctor --fix`
//! renames them, when their numbers have a gap (an older build stopped
//! mid-rotation), one rename at a time in an order readers can follow.
//! Readers open every file of one listing and list again, so a rotation
//! that runs meanwhile is seen (docs/store.md gives the argument).

use std::cmp::Ordering;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsx;
use crate::store::{Finding, Level};

/// The history file commits append to.
pub(super) const HISTORY: &str = "history.jsonl";

/// A rotated history file, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rotated {
    /// `history.jsonl.<n>`, rotated by an older build: 1 is its newest.
    Old(u64),
    /// `history.<n>.jsonl`: the higher, the newer.
    Seq(u64),
}

impl Rotated {
    /// The rotated file `name` names, if it names one. Numbers are
    /// decimal from 1, without leading zeros, so each file has one name.
    fn parse(name: &str) -> Option<Rotated> {
        let number = |s: &str| -> Option<u64> {
            let canonical = !s.is_empty() && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit());
            canonical.then(|| s.parse().ok()).flatten()
        };
        if let Some(n) = name.strip_prefix("history.jsonl.") {
            return number(n).map(Rotated::Old);
        }
        let n = name.strip_prefix("history.")?.strip_suffix(".jsonl")?;
        number(n).map(Rotated::Seq)
    }

    pub(super) fn file_name(self) -> String {
        match self {
            Rotated::Old(n) => format!("{HISTORY}.{n}"),
            Rotated::Seq(n) => format!("history.{n}.jsonl"),
        }
    }
}

/// Oldest first: an older build's files (the highest number first), then
/// this build's (the lowest first).
impl Ord for Rotated {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Rotated::Old(a), Rotated::Old(b)) => b.cmp(a),
            (Rotated::Old(_), Rotated::Seq(_)) => Ordering::Less,
            (Rotated::Seq(_), Rotated::Old(_)) => Ordering::Greater,
            (Rotated::Seq(a), Rotated::Seq(b)) => a.cmp(b),
        }
    }
}

impl PartialOrd for Rotated {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A loop directory's history files as one listing saw them, each with
/// its inode number (so a name given to another file is a change).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Listing {
    /// Rotated files, oldest first.
    rotated: Vec<(Rotated, u64)>,
    /// `history.jsonl`, when it is there.
    current: Option<u64>,
}

/// Lists the history files in `dir`.
pub(super) fn list(dir: &Path) -> Result<Listing> {
    let mut listing = Listing::default();
    for entry in fs::read_dir(dir).map_err(Error::io("listing", dir))? {
        let entry = entry.map_err(Error::io("listing", dir))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name == HISTORY {
            listing.current = Some(crate::os::entry_id(&entry));
        } else if let Some(r) = Rotated::parse(&name) {
            listing.rotated.push((r, crate::os::entry_id(&entry)));
        }
    }
    listing.rotated.sort();
    Ok(listing)
}

impl Listing {
    /// The rotated files, oldest first.
    pub(super) fn rotated(&self) -> impl DoubleEndedIterator<Item = Rotated> + '_ {
        self.rotated.iter().map(|(r, _)| *r)
    }

    /// Every history file's path, oldest first: the rotated ones, then
    /// `history.jsonl` (whether or not it is there).
    pub(super) fn paths(&self, dir: &Path) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.rotated().map(|r| dir.join(r.file_name())).collect();
        paths.push(dir.join(HISTORY));
        paths
    }

    /// The numbers missing among an older build's files, below its
    /// highest: where that build's readers stop.
    pub(super) fn gaps(&self) -> Vec<u64> {
        let old: Vec<u64> = self.old().collect();
        let highest = old.first().copied().unwrap_or(0);
        (1..highest).filter(|n| !old.contains(n)).collect()
    }

    /// The numbers of an older build's files, oldest (highest) first.
    fn old(&self) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.rotated().filter_map(|r| match r {
            Rotated::Old(n) => Some(n),
            Rotated::Seq(_) => None,
        })
    }

    /// The numbers of this build's files, oldest (lowest) first.
    fn seqs(&self) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.rotated().filter_map(|r| match r {
            Rotated::Seq(n) => Some(n),
            Rotated::Old(_) => None,
        })
    }
}

/// What `doctor` says of the rotated files' names: a gap among an older
/// build's (which `--fix` mends), or that there are some, read first.
pub(super) fn check(dir: &Path) -> Option<Finding> {
    let listing = match list(dir) {
        Ok(l) => l,
        Err(e) => {
            let action = "check the directory's permissions";
            return Some(Finding::new("history", Level::Error, e.to_string(), action));
        }
    };
    let old: Vec<u64> = listing.old().collect();
    let (&oldest, &newest) = (old.first()?, old.last()?);
    let gaps = listing.gaps();
    let which = match oldest == newest {
        true => format!("{HISTORY}.{newest}"),
        false => format!("{HISTORY}.{newest} to .{oldest}"),
    };
    if gaps.is_empty() {
        return Some(Finding::ok(
            "history",
            format!("{which}: rotated by an older build, read before the others"),
        ));
    }
    let missing: Vec<String> = gaps.iter().map(|n| format!("{HISTORY}.{n}")).collect();
    let message = format!(
        "{} of the files an older build rotated ({which}) {} missing: that build was stopped \
         mid-rotation; this build reads every file in order, but older builds stop at the gap",
        missing.join(", "),
        if missing.len() == 1 { "is" } else { "are" },
    );
    let action = "`--fix` renames them to history.<n>.jsonl in order, losing nothing";
    Some(Finding::new("history", Level::Warning, message, action).fixable())
}

/// One history file open for reading.
pub(super) struct Opened {
    pub path: PathBuf,
    pub file: File,
    /// Whether it is `history.jsonl`, the one commits append to.
    pub current: bool,
}

/// Opens every history file in `dir`, oldest first, then lists the
/// directory again. Returns the files and whether nothing changed between
/// the two listings (no file renamed, made or deleted, and every file
/// listed still there to open): only then do they hold every event the
/// history had when the first listing was made that is still kept.
pub(super) fn open_all(dir: &Path) -> Result<(Vec<Opened>, bool)> {
    let before = list(dir)?;
    let mut settled = true;
    let mut files = Vec::new();
    let newest = before.rotated.len();
    for (i, path) in before.paths(dir).into_iter().enumerate() {
        let current = i == newest;
        match fsx::open_read(&path)? {
            Some((file, _)) => files.push(Opened { path, file, current }),
            // Renamed or deleted since the listing (or, for
            // `history.jsonl`, not made again yet after a rotation).
            None => settled &= current && before.current.is_none(),
        }
    }
    settled &= list(dir)? == before;
    Ok((files, settled))
}

/// Starts a new history file: `history.jsonl` is renamed to the next
/// `history.<n>.jsonl` (one rename: the rotation), the directory is
/// synced, then the oldest rotated files past `keep` are deleted, oldest
/// first. A failed deletion is left for the next rotation, which deletes
/// every file past `keep`. Only a lock holder may.
pub(super) fn rotate(dir: &Path, keep: usize) -> Result<()> {
    let listing = list(dir)?;
    let next = Rotated::Seq(listing.seqs().next_back().unwrap_or(0) + 1);
    let from = dir.join(HISTORY);
    let to = dir.join(next.file_name());
    fs::rename(&from, &to).map_err(Error::io("renaming", &from))?;
    fsx::sync_dir(dir)?;
    let mut rotated: Vec<Rotated> = listing.rotated().collect();
    rotated.push(next);
    let excess = rotated.len().saturating_sub(keep);
    for r in &rotated[..excess] {
        let path = dir.join(r.file_name());
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(
                    "cannot remove {}, past [history] keep ({e}); the next rotation tries again",
                    path.display()
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// Renames an older build's rotated files (`history.jsonl.<n>`) to this
/// build's names, below every `history.<n>.jsonl` there, in their order;
/// where there is no room below, this build's files first move up. Each
/// rename is one step that leaves the files in order for readers, synced
/// before the next: this build's files newest first, then the older
/// build's newest first, each taking the number just below the lowest.
/// Returns how many files were renamed. Only a lock holder may.
pub(super) fn renumber_old(dir: &Path) -> Result<usize> {
    let listing = list(dir)?;
    let old: Vec<u64> = listing.old().rev().collect();
    let count = old.len() as u64;
    let mut renamed = 0;
    let mut low = listing.seqs().next().unwrap_or(count + 1);
    if low <= count {
        let up = count + 1 - low;
        for n in listing.seqs().rev().collect::<Vec<_>>() {
            rename_step(dir, Rotated::Seq(n), Rotated::Seq(n + up))?;
            renamed += 1;
        }
        low += up;
    }
    for n in old {
        low -= 1;
        rename_step(dir, Rotated::Old(n), Rotated::Seq(low))?;
        renamed += 1;
    }
    Ok(renamed)
}

/// One rename of a rotated file, synced.
fn rename_step(dir: &Path, from: Rotated, to: Rotated) -> Result<()> {
    let (from, to) = (dir.join(from.file_name()), dir.join(to.file_name()));
    tracing::info!("renaming {} to {}", from.display(), to.display());
    fs::rename(&from, &to).map_err(Error::io("renaming", &from))?;
    fsx::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        list(dir).unwrap().rotated().map(Rotated::file_name).collect()
    }

    fn touch(dir: &Path, names: &[&str]) {
        for n in names {
            fs::write(dir.join(n), n).unwrap();
        }
    }

    #[test]
    fn names_are_read_oldest_first_and_nothing_else_is_taken_for_one() {
        let dir = tempfile::tempdir().unwrap();
        touch(
            dir.path(),
            &[
                "history.jsonl",
                "history.jsonl.1",
                "history.jsonl.3",
                "history.2.jsonl",
                "history.10.jsonl",
                "history.jsonl.01",
                "history.0.jsonl",
                "history.x.jsonl",
                "history.jsonl.tmp",
                "history.jsonl.1.jsonl",
            ],
        );
        assert_eq!(
            names(dir.path()),
            [
                "history.jsonl.3",
                "history.jsonl.1",
                "history.2.jsonl",
                "history.10.jsonl"
            ]
        );
        assert_eq!(list(dir.path()).unwrap().gaps(), [2]);
    }

    #[test]
    fn a_rotation_is_one_new_name_and_deletes_past_keep_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        touch(
            dir.path(),
            &["history.jsonl", "history.jsonl.2", "history.jsonl.1"],
        );
        rotate(dir.path(), 3).unwrap();
        assert_eq!(
            names(dir.path()),
            ["history.jsonl.2", "history.jsonl.1", "history.1.jsonl"]
        );
        touch(dir.path(), &["history.jsonl"]);
        rotate(dir.path(), 3).unwrap();
        assert_eq!(
            names(dir.path()),
            ["history.jsonl.1", "history.1.jsonl", "history.2.jsonl"]
        );
        touch(dir.path(), &["history.jsonl"]);
        rotate(dir.path(), 0).unwrap();
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn old_names_are_renumbered_below_new_ones_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let old = ["history.jsonl.5", "history.jsonl.3", "history.jsonl.2"];
        touch(dir.path(), &old);
        touch(dir.path(), &["history.1.jsonl", "history.2.jsonl"]);
        assert_eq!(renumber_old(dir.path()).unwrap(), 5);
        let after = names(dir.path());
        assert_eq!(
            after,
            [
                "history.1.jsonl",
                "history.2.jsonl",
                "history.3.jsonl",
                "history.4.jsonl",
                "history.5.jsonl"
            ]
        );
        let contents: Vec<String> = after
            .iter()
            .map(|n| fs::read_to_string(dir.path().join(n)).unwrap())
            .collect();
        assert_eq!(
            contents,
            [old[0], old[1], old[2], "history.1.jsonl", "history.2.jsonl"]
        );
        assert!(list(dir.path()).unwrap().gaps().is_empty());
    }
}
