//! Released at once: a loop whose last tick left it awaiting approval is
//! watched, and an approval committed to it starts its tick now rather
//! than at its next firing. On the file store the loop's commit marker is
//! looked at every [`AWAIT_POLL`] while any loop awaits (a `stat` each);
//! on a shared store the change notification says it. Whether the
//! approvals given release the await is the tick's to decide, under the
//! lock, as at any firing: the daemon only fires it early, and a tick
//! they do not release records nothing new.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dispatch::Dispatcher;
use super::scan::mtime;
use crate::state::Status;

/// How often the commit markers of loops awaiting approval are looked at.
pub(super) const AWAIT_POLL: Duration = Duration::from_millis(250);

impl Dispatcher<'_> {
    /// Looks at the loops that await approval, when a look is due: each
    /// whose record changed since its tick and now holds an approval is
    /// fired now.
    pub(super) fn poll_awaits(&mut self) {
        if Instant::now() < self.next_await_poll {
            return;
        }
        self.next_await_poll = Instant::now() + AWAIT_POLL;
        let changed: Vec<Arc<str>> = self
            .awaiting
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

    /// Whether any loop is watched by polling (the dispatcher then sleeps
    /// no longer than [`AWAIT_POLL`]).
    pub(super) fn polling_awaits(&self) -> bool {
        self.awaiting.values().any(Option::is_some)
    }

    /// Fires loop `name` now when it awaits approval and holds one; it is
    /// watched no longer once fired or no longer awaiting.
    pub(super) fn release_if_approved(&mut self, name: &Arc<str>) {
        let Some(entry) = self.loops.get(name) else {
            self.awaiting.remove(name);
            return;
        };
        if !self.awaiting.contains_key(name) || self.running.contains_key(name) {
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
            self.awaiting.remove(name);
            return;
        }
        self.awaiting.insert(Arc::clone(name), marker);
        if state.pending_approvals.is_empty() || entry.schedule.is_none() {
            return;
        }
        tracing::info!("loop {name:?}: approved; its tick starts now");
        self.awaiting.remove(name);
        if !self.fire_claimed(name, state.version) {
            self.queue.set(Arc::clone(name), crate::clock::now());
        }
    }
}
