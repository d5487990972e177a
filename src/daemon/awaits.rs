//! Released at once: an approval committed to a loop the daemon schedules
//! starts its tick now rather than at its next firing, whoever opened the
//! await (the daemon's own tick, a hand-run one, `approve --run`, another
//! host). The daemon hears of approvals by the store's change
//! notification (a shared store), or on the file store by the root's
//! `approved` file that `approve` rewrites, looked at every
//! [`AWAIT_POLL`] (one `stat`); a loop its own tick left awaiting is also
//! watched by its commit marker. Whether the approvals given release the
//! await is the tick's to decide, under the lock, as at any firing: the
//! daemon only fires it early, and a tick they do not release records
//! nothing new.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::dispatch::Dispatcher;
use super::scan::mtime;
use crate::state::Status;
use crate::store::Stores;

/// How often the commit markers of loops awaiting approval are looked at.
pub(super) const AWAIT_POLL: Duration = Duration::from_millis(250);

/// The daemon's part that watches approvals: the loops awaiting one, when
/// they are next looked at, the loops an approval released, and the
/// approvals said in the root. Its state is its own; the dispatcher asks
/// it, and fires what it releases.
pub(super) struct Awaits {
    /// The loops a tick left awaiting approval, with their commit
    /// marker's mtime then (`None` for a store that notifies instead).
    watched: HashMap<Arc<str>, Option<SystemTime>>,
    /// When the loops awaiting approval are next looked at.
    next_poll: Instant,
    /// Loops an approval released, until their tick is handed out: that
    /// tick waits a moment for a lock the approving command still holds.
    released: HashSet<Arc<str>>,
    /// The approvals said in the root, on a store that does not notify.
    said: Said,
}

impl Awaits {
    pub(super) fn new(stores: &Stores) -> Awaits {
        Awaits {
            watched: HashMap::new(),
            next_poll: Instant::now(),
            released: HashSet::new(),
            said: Said::new(stores),
        }
    }

    /// Watches loop `name`, found awaiting approval with its commit
    /// marker at `marker`.
    pub(super) fn watch(&mut self, name: &Arc<str>, marker: Option<SystemTime>) {
        self.watched.insert(Arc::clone(name), marker);
    }

    /// Watches `name` no longer: it is not awaiting approval.
    pub(super) fn forget(&mut self, name: &str) {
        self.watched.remove(name);
    }

    /// Whether an approval released `name` (asked once, as its tick is
    /// handed out).
    pub(super) fn take_released(&mut self, name: &str) -> bool {
        self.released.remove(name)
    }

    /// When the next look is due, while approvals are watched by polling.
    pub(super) fn next_look(&self) -> Option<Instant> {
        self.polling().then_some(self.next_poll)
    }

    /// Whether approvals are watched by polling (the dispatcher then
    /// sleeps no longer than [`AWAIT_POLL`]).
    fn polling(&self) -> bool {
        self.said.marker.is_some() || self.watched.values().any(Option::is_some)
    }
}

impl Dispatcher<'_> {
    /// Looks at the loops that await approval, when a look is due: each
    /// whose record changed since its tick and now holds an approval is
    /// fired now.
    pub(super) fn poll_awaits(&mut self) {
        if Instant::now() < self.awaits.next_poll {
            return;
        }
        self.awaits.next_poll = Instant::now() + AWAIT_POLL;
        let start = !self.awaits.said.read_once;
        for (name, version) in self.awaits.said.news(self.stores) {
            // At start the file holds approvals long acted on: only those
            // that made the loop's state as it is now are news.
            if start && !self.unacted(&name, version) {
                continue;
            }
            self.heard_of(&name);
        }
        let changed: Vec<Arc<str>> = self
            .awaits
            .watched
            .iter()
            .filter(|(name, seen)| {
                let marker = self.loops.get(*name).and_then(|e| e.state_path.as_deref());
                seen.is_some() && marker.and_then(mtime) != **seen
            })
            .map(|(name, _)| Arc::clone(name))
            .collect();
        for name in changed {
            self.release_if_approved(&name);
        }
    }

    /// Whether loop `name`'s state is still the one its approval made at
    /// `version`: nothing (a tick, an operator) has acted since.
    fn unacted(&self, name: &str, version: u64) -> bool {
        self.loops
            .get(name)
            .and_then(|e| e.dir.load().ok())
            .is_some_and(|s| s.version == version)
    }

    /// Loop `name` was approved (the store said so): if the daemon
    /// schedules it, it is looked at now and fired if it awaits approval
    /// and holds one; if it awaits without one, it is watched.
    pub(super) fn heard_of(&mut self, name: &str) {
        let Some((name, entry)) = self.loops.get_key_value(name) else {
            return;
        };
        if entry.schedule.is_none() {
            return;
        }
        let name = Arc::clone(name);
        self.awaits.watched.entry(Arc::clone(&name)).or_insert(None);
        self.release_if_approved(&name);
    }

    /// Fires loop `name` now when it awaits approval and holds one; it is
    /// watched no longer once fired or no longer awaiting.
    pub(super) fn release_if_approved(&mut self, name: &Arc<str>) {
        let Some(entry) = self.loops.get(name) else {
            self.awaits.forget(name);
            return;
        };
        if !self.awaits.watched.contains_key(name)
            || self.running.contains_key(name)
            || self.awaits.released.contains(name)
        {
            return;
        }
        // Watched again from this record on, if nothing fires below.
        let marker = entry.state_path.as_deref().and_then(mtime);
        let state = match entry.dir.load() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("loop {name:?}: {e}");
                return;
            }
        };
        if state.status != Status::AwaitingApproval {
            self.awaits.forget(name);
            return;
        }
        self.awaits.watch(name, marker);
        if state.pending_approvals.is_empty() || entry.schedule.is_none() {
            return;
        }
        tracing::info!("loop {name:?}: approved; its tick starts now");
        self.awaits.forget(name);
        self.awaits.released.insert(Arc::clone(name));
        if !self.fire_claimed(name, state.version) {
            self.queue.set(Arc::clone(name), crate::clock::now());
        }
    }
}

/// The approvals said in the root, as a daemon on a store that does not
/// notify learns of them ([`crate::store::Store::approvals_marker`]).
#[derive(Default)]
pub(super) struct Said {
    /// The file to look at; `None` for a store that notifies.
    pub(super) marker: Option<PathBuf>,
    /// Its inode and modification time when last read.
    seen: Option<(u64, SystemTime)>,
    /// What it held then.
    known: HashSet<(String, u64)>,
    /// Whether it was read at all (the first read is the daemon's start).
    pub(super) read_once: bool,
}

impl Said {
    pub(super) fn new(stores: &Stores) -> Said {
        Said {
            marker: stores.approvals_marker(),
            ..Said::default()
        }
    }

    /// The loops approved since the last look, each once with the version
    /// its newest approval made: none unless the file was replaced (one
    /// `stat`), else those of the lines new to it.
    fn news(&mut self, stores: &Stores) -> Vec<(String, u64)> {
        let Some(marker) = &self.marker else {
            return Vec::new();
        };
        let now = identity(marker);
        if now == self.seen && self.read_once {
            return Vec::new();
        }
        self.seen = now;
        self.read_once = true;
        let all: HashSet<(String, u64)> = stores.approvals_said().into_iter().collect();
        let mut newest: HashMap<String, u64> = HashMap::new();
        for (name, version) in all.difference(&self.known) {
            let v = newest.entry(name.clone()).or_insert(*version);
            *v = (*v).max(*version);
        }
        self.known = all;
        newest.into_iter().collect()
    }
}

/// A file's inode and modification time: a file replaced by a rename has
/// a new inode, whatever the clock's grain.
fn identity(path: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.modified().ok()?))
}
