//! Scheduling: what fires a loop's ticks. The OS backends and the embedded
//! daemon build on this module.

use crate::root::{LoopName, Root};

/// Called once, outside the loop's lock, after a tick halted or completed
/// the loop: an OS schedule that keeps firing a stopped loop only makes
/// `inactive` ticks. No backend is installed by this build, so there is
/// nothing to disable yet.
pub fn loop_stopped(root: &Root, name: &LoopName) {
    tracing::debug!(
        "loop {name:?} stopped; no OS schedule to disable under {}",
        root.path().display()
    );
}
