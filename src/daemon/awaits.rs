//! Released at once: an approval committed to a loop the daemon schedules
//! starts its tick now rather than at its next firing, whoever opened the
//! await (the daemon's own tick, a hand-run one, `approve --run`, another
//! host). The daemon hears of approvals by its store's change feed: told
//! by the store's server (a shared store, on the daemon's listening
//! thread), or looked for every [`AWAIT_POLL`] on a store that has none
//! ([`crate::store::Store::watch_few`], which also tells of the commits to
//! the loops awaiting approval, followed here). Whether the approvals
//! given release the await is the tick's to decide, under the lock, as at
//! any firing: the daemon only fires it early, and a tick they do not
//! release records nothing new.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dispatch::Dispatcher;
use crate::state::Status;
use crate::store::{Changes, Stores};

/// How often the feed of a store with no server to tell is looked at.
pub(super) const AWAIT_POLL: Duration = Duration::from_millis(250);

/// The daemon's part that watches approvals: the loops awaiting one, when
/// they are next looked at, the loops an approval released, and the feed
/// they are heard of by. Its state is its own; the dispatcher asks it, and
/// fires what it releases.
pub(super) struct Awaits {
    /// The loops awaiting approval, followed by the feed.
    watched: HashSet<Arc<str>>,
    /// When the feed is next looked at.
    next_poll: Instant,
    /// Loops an approval released, until their tick is handed out: that
    /// tick waits a moment for a lock the approving command still holds.
    released: HashSet<Arc<str>>,
    /// The feed looked at every [`AWAIT_POLL`]: `None` on a store whose
    /// server tells the daemon's listening thread of every change.
    feed: Option<Box<dyn Changes>>,
}

impl Awaits {
    pub(super) fn new(stores: &Stores) -> Awaits {
        let feed = match stores.notifies() {
            true => None,
            false => stores
                .watch_few()
                .map_err(|e| tracing::warn!("approvals are acted on at the loops' next firings: {e}"))
                .ok(),
        };
        Awaits {
            watched: HashSet::new(),
            next_poll: Instant::now(),
            released: HashSet::new(),
            feed,
        }
    }

    /// Follows loop `name`, found awaiting approval, from now on.
    pub(super) fn watch(&mut self, name: &Arc<str>) {
        self.watched.insert(Arc::clone(name));
        if let Some(feed) = &mut self.feed {
            feed.follow(name, true);
        }
    }

    /// Watches `name` no longer: it is not awaiting approval.
    pub(super) fn forget(&mut self, name: &str) {
        if self.watched.remove(name)
            && let Some(feed) = &mut self.feed
        {
            feed.follow(name, false);
        }
    }

    /// Whether an approval released `name` (asked once, as its tick is
    /// handed out).
    pub(super) fn take_released(&mut self, name: &str) -> bool {
        self.released.remove(name)
    }

    /// When the next look is due, while the feed is looked at.
    pub(super) fn next_look(&self) -> Option<Instant> {
        self.feed.is_some().then_some(self.next_poll)
    }
}

impl Dispatcher<'_> {
    /// Looks at the feed, when a look is due: each loop approved, or
    /// awaiting and changed, is looked at now ([`Dispatcher::heard_of`]).
    pub(super) fn poll_awaits(&mut self) {
        if Instant::now() < self.awaits.next_poll {
            return;
        }
        self.awaits.next_poll = Instant::now() + AWAIT_POLL;
        let Some(feed) = &mut self.awaits.feed else {
            return;
        };
        let changed = match feed.wait(Duration::ZERO) {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!("{}", crate::error::with_causes(&e));
                return;
            }
        };
        for change in changed {
            self.heard_of(&change.name);
        }
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
        self.awaits.watched.insert(Arc::clone(&name));
        self.release_if_approved(&name);
    }

    /// Fires loop `name` now when it awaits approval and holds one; it is
    /// watched no longer once fired or no longer awaiting.
    pub(super) fn release_if_approved(&mut self, name: &Arc<str>) {
        let Some(entry) = self.loops.get(name) else {
            self.awaits.forget(name);
            return;
        };
        if !self.awaits.watched.contains(name)
            || self.running.contains_key(name)
            || self.awaits.released.contains(name)
        {
            return;
        }
        // Followed from this record on, if nothing fires below.
        self.awaits.watch(name);
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
