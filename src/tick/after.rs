//! What follows a change to a loop's course, outside its lock: the one
//! place that keeps the loop's OS schedule and its notifications in step
//! with what happened. (A daemon hears of an approval from its store's
//! change feed, [`crate::store::Store::watch_few`].) Every path
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
pub(crate) enum Change<'a> {
    /// A tick of the loop (its store, already open) ended, whatever its
    /// outcome: a halt or completion disables the schedule, and the
    /// notify command hears of what it is for.
    Ticked(&'a TickReport, &'a dyn LoopStore),
    /// The loop was halted or completed by something other than a tick
    /// (`check-gate --apply`, `reject`): its schedule is disabled.
    Stopped(&'a LoopName),
    /// The loop may run again (`resume`): a schedule a stop disabled is
    /// enabled.
    Resumed(&'a LoopName),
    /// An operator changed the loop (`pause`, `resume`, `approve`,
    /// `reject`, `cancel`): its people hear of it, if its `[notify] on`
    /// lists `operator`.
    Operated(&'a dyn LoopStore, Box<Notice>),
}

/// Acts on `change`, outside the loop's lock.
pub(crate) fn follow(root: &Root, change: Change<'_>) {
    match change {
        Change::Ticked(report, store) => {
            if report.stopped() {
                crate::schedule::loop_stopped(root, &report.loop_name);
            }
            crate::notify::after_tick(root, store, report);
        }
        Change::Stopped(name) => crate::schedule::loop_stopped(root, name.as_str()),
        Change::Resumed(name) => crate::schedule::loop_resumed(root, name),
        Change::Operated(store, notice) => crate::notify::operated(root, store, *notice),
    }
}
