//! What follows a change to a loop's course, outside its lock: the one
//! place that keeps the loop's OS schedule and its notifications in step
//! with what happened, and that wakes a daemon to an approval. Every path
//! that can stop, start again or end a tick calls [`follow`] once the
//! lock is let go (and a command once its output is written): `tick`, the
//! daemon's workers, `check-gate --apply`, `pause`, `resume`, `approve`,
//! `reject` and `cancel`. Best
//! effort: a scheduler, notify command or webhook that fails is logged and
//! never fails the command that changed the loop.

use crate::notify::Notice;
use crate::root::{LoopName, Root};
use crate::store::LoopStore;
use crate::tick::TickReport;

/// What happened to a loop, as far as its schedule and its people care.
pub enum Change<'a> {
    /// A tick of the loop `store` ended (whatever its outcome): a halt or
    /// completion disables the schedule, and the notify command hears of
    /// what it is for, through the store already open.
    Ticked(&'a dyn LoopStore, &'a TickReport),
    /// The loop was halted or completed by something other than a tick
    /// (`check-gate --apply`, `reject`): its schedule is disabled.
    Stopped(&'a LoopName),
    /// The loop may run again (`resume`): a schedule a stop disabled is
    /// enabled.
    Resumed(&'a LoopName),
    /// An approval was committed, making the state `version`: a daemon
    /// that serves the root hears of it and starts the tick it releases
    /// at once, whoever opened the await (its own tick, a hand-run one,
    /// another host's).
    Approved(&'a dyn LoopStore, u64),
    /// An operator changed the loop (`pause`, `resume`, `approve`,
    /// `reject`, `cancel`): its people hear of it, if its `[notify] on`
    /// lists `operator`.
    Operated(&'a dyn LoopStore, Box<Notice>),
}

/// Acts on `change`, outside the loop's lock.
pub fn follow(root: &Root, change: Change<'_>) {
    match change {
        Change::Ticked(store, report) => {
            if report.stopped() {
                crate::schedule::loop_stopped(root, &report.loop_name);
            }
            crate::notify::after_tick(root, store, report);
        }
        Change::Stopped(name) => crate::schedule::loop_stopped(root, name.as_str()),
        Change::Resumed(name) => crate::schedule::loop_resumed(root, name),
        Change::Approved(store, version) => {
            if let Err(e) = store.say_approved(version) {
                tracing::warn!(
                    "loop {:?}: a daemon hears of the approval at its next firing only: {e}",
                    store.name().as_str()
                );
            }
        }
        Change::Operated(store, notice) => crate::notify::operated(root, store, *notice),
    }
}
