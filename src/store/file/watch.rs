//! The file store's change feed ([`crate::store::Store::watch`]): the
//! files hold no channel to be told on, so the feed looks at each loop's
//! commit marker (its state file, whose modification time moves with every
//! commit) and at the list of loops, every [`POLL`] while it is waited on.
//! Its callers see what a store that notifies would tell: the loops that
//! changed, and the loops that came or went.
//!
//! A caller that follows a few loops only (the daemon) is given [`Few`]
//! instead: the root's record of approvals (`approved`, one `stat`) and the
//! commit markers of the loops it follows, whatever the number of loops.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::{LoopDir, approved, list_loops};
use crate::error::Result;
use crate::root::{LoopName, Root};
use crate::store::{Change, Changes, Stamp};

/// How often the markers are looked at while the feed is waited on.
const POLL: Duration = Duration::from_millis(250);

/// Each loop's commit marker's modification time, by the loop's name.
type Marks = HashMap<String, Option<SystemTime>>;

/// The feed: the markers as last looked at.
pub(super) struct Poll {
    root: Root,
    seen: Marks,
}

impl Poll {
    /// Looks at the markers now, so that every change committed after
    /// this returns is told.
    pub(super) fn start(root: &Root) -> Result<Poll> {
        let seen = marks(&list_loops(root)?);
        Ok(Poll {
            root: root.clone(),
            seen,
        })
    }

    /// What changed since the last look: loops whose marker moved (their
    /// state), and loops that came or went.
    fn look(&mut self) -> Result<Vec<Change>> {
        let now = marks(&list_loops(&self.root)?);
        let mut changed: Vec<Change> = now
            .iter()
            .filter(|(name, at)| self.seen.get(*name) != Some(at))
            .map(|(name, _)| Change {
                name: name.clone(),
                state_only: self.seen.contains_key(name),
            })
            .collect();
        changed.extend(
            self.seen
                .keys()
                .filter(|name| !now.contains_key(*name))
                .map(|name| Change {
                    name: name.clone(),
                    state_only: false,
                }),
        );
        changed.sort_by(|a, b| a.name.cmp(&b.name));
        self.seen = now;
        Ok(changed)
    }
}

impl Changes for Poll {
    fn wait(&mut self, timeout: Duration) -> Result<Vec<Change>> {
        waited(timeout, || self.look())
    }
}

/// Looks with `look` until it finds changes or `timeout` has passed,
/// every [`POLL`].
fn waited(timeout: Duration, mut look: impl FnMut() -> Result<Vec<Change>>) -> Result<Vec<Change>> {
    let until = Instant::now() + timeout;
    loop {
        let changed = look()?;
        let left = until.saturating_duration_since(Instant::now());
        if !changed.is_empty() || left.is_zero() {
            return Ok(changed);
        }
        std::thread::sleep(POLL.min(left));
    }
}

/// The feed of a caller that follows a few loops
/// ([`crate::store::Store::watch_few`]): the approvals the root's record
/// holds that are new to it, and the followed loops whose commit marker
/// moved.
pub(super) struct Few {
    root: Root,
    /// The record of approvals: its inode and modification time when last
    /// read, and what it held then.
    seen: Option<(u64, SystemTime)>,
    known: HashSet<(String, u64)>,
    /// The loops followed: each one's commit marker, and its stamp when
    /// it was followed or last told of.
    followed: HashMap<String, (PathBuf, Option<Stamp>)>,
}

impl Few {
    /// Reads the record of approvals now: those it holds are not news.
    pub(super) fn start(root: &Root) -> Few {
        let mut few = Few {
            root: root.clone(),
            seen: None,
            known: HashSet::new(),
            followed: HashMap::new(),
        };
        few.approvals();
        few
    }

    /// The loops approved since the last look, each once: none unless the
    /// record was replaced (one `stat`), else those of the lines new to it.
    fn approvals(&mut self) -> Vec<Change> {
        let now = identity(&approved::path(self.root.path()));
        if now.is_some() && now == self.seen {
            return Vec::new();
        }
        self.seen = now;
        let all: HashSet<(String, u64)> = approved::read(self.root.path()).into_iter().collect();
        let mut names: Vec<String> = all.difference(&self.known).map(|(n, _)| n.clone()).collect();
        self.known = all;
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| Change {
                name,
                state_only: true,
            })
            .collect()
    }

    /// The followed loops whose commit marker moved since the last look.
    fn commits(&mut self) -> Vec<Change> {
        let mut changed = Vec::new();
        for (name, (marker, seen)) in &mut self.followed {
            let now = stamp(marker);
            if now != *seen {
                *seen = now;
                changed.push(Change {
                    name: name.clone(),
                    state_only: true,
                });
            }
        }
        changed
    }
}

impl Changes for Few {
    fn wait(&mut self, timeout: Duration) -> Result<Vec<Change>> {
        waited(timeout, || {
            let mut changed = self.approvals();
            changed.extend(self.commits());
            changed.sort_by(|a, b| a.name.cmp(&b.name));
            changed.dedup();
            Ok(changed)
        })
    }

    fn follow(&mut self, name: &str, on: bool) {
        let Ok(loop_name) = LoopName::new(name) else {
            return;
        };
        match on {
            true => {
                let marker = LoopDir::new(&self.root, loop_name).state_path();
                let now = stamp(&marker);
                self.followed.insert(name.to_owned(), (marker, now));
            }
            false => {
                self.followed.remove(name);
            }
        }
    }
}

/// The stamp of a loop's commit marker: its modification time.
pub(super) fn stamp(marker: &Path) -> Option<Stamp> {
    std::fs::metadata(marker)
        .and_then(|m| m.modified())
        .ok()
        .map(Stamp)
}

/// A file's inode and modification time: a file replaced by a rename has
/// a new inode, whatever the clock's grain.
fn identity(path: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((crate::os::file_id(&meta).0, meta.modified().ok()?))
}

/// The modification time of each loop's commit marker, or of its
/// refusals when they are newer (a refusal is no commit, but an event).
fn marks(dirs: &[LoopDir]) -> Marks {
    dirs.iter()
        .map(|d| {
            let at = |p: std::path::PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            (d.name.to_string(), at(d.state_path()).max(at(d.refusals_path())))
        })
        .collect()
}
