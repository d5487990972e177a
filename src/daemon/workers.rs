//! The pool of workers that run ticks, and the two hand-offs between it
//! and the dispatcher: the queue of ticks to run ([`Jobs`]) and the ticks
//! that ended ([`Finished`]).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::Msg;
use super::report::log_tick;
use crate::error::Result;
use crate::gate::GateHost;
use crate::root::Root;
use crate::store::Stores;
use crate::tick::{self, Cancel, TickReport};

/// Ticks that ended, for the dispatcher to take in when it next wakes.
///
/// A worker wakes the dispatcher (with [`Msg::Done`]) only when it is
/// needed now: it sleeps with every worker busy or while stopping, or would
/// sleep past [`LAZY`]. Otherwise it is about to wake anyway (the next due
/// firing, at a hundred ticks a second, is milliseconds away) and takes the
/// ended ticks in then: a tick costs one wake-up of the dispatcher, not two.
#[derive(Default)]
pub(super) struct Finished {
    pub(super) inner: Mutex<FinishedInner>,
}

#[derive(Default)]
pub(super) struct FinishedInner {
    pub(super) ended: Vec<(Arc<str>, Result<TickReport>)>,
    /// While the dispatcher sleeps, until when; `None` while it is awake
    /// (it looks here before it sleeps).
    pub(super) sleeps_until: Option<Instant>,
}

/// How long the dispatcher may leave an ended tick untaken when it is to
/// wake by then anyway: the loop's next firing is computed from its
/// nominal time, so the wait moves no due time.
pub(super) const LAZY: Duration = Duration::from_millis(50);

impl Finished {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, FinishedInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an ended tick; whether the dispatcher must be woken for it.
    pub(super) fn push(&self, name: Arc<str>, result: Result<TickReport>) -> bool {
        let mut f = self.lock();
        f.ended.push((name, result));
        f.sleeps_until.is_some_and(|at| at > Instant::now() + LAZY)
    }
}

/// The ticks handed to the workers and not yet taken. Each one given wakes
/// one idle worker, and only that one.
#[derive(Default)]
pub(super) struct Jobs {
    pub(super) queue: Mutex<(VecDeque<Job>, bool)>,
    pub(super) ready: Condvar,
}

impl Jobs {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, (VecDeque<Job>, bool)> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn give(&self, job: Job) {
        self.lock().0.push_back(job);
        self.ready.notify_one();
    }

    /// The next tick to run, waiting for one; `None` once closed.
    pub(super) fn take(&self) -> Option<Job> {
        let mut q = self.lock();
        loop {
            if let Some(job) = q.0.pop_front() {
                return Some(job);
            }
            if q.1 {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// No more ticks: each worker ends once the queue is empty.
    pub(super) fn close(&self) {
        self.lock().1 = true;
        self.ready.notify_all();
    }
}

/// Closes the queue when dropped, however the dispatcher's scope ends (a
/// worker that cannot be started ends it early), so no worker waits on.
pub(super) struct CloseJobs<'a>(pub(super) &'a Jobs);

impl Drop for CloseJobs<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A tick for a worker.
pub(super) struct Job {
    pub(super) name: Arc<str>,
    pub(super) cancel: Cancel,
    /// With a shared store: a tick started since then ran this firing.
    pub(super) ran_since: Option<Timestamp>,
}

/// A worker: runs the ticks it is handed, one at a time, until the
/// dispatcher hangs up. It blocks while there is nothing to run.
pub(super) fn worker(
    root: &Root,
    stores: &Stores,
    host: Option<&GateHost>,
    jobs: &Jobs,
    finished: &Finished,
    tx: &mpsc::Sender<Msg>,
) {
    while let Some(Job {
        name,
        cancel,
        ran_since,
    }) = jobs.take()
    {
        let opts = tick::Options {
            never_wait: true,
            host,
            cancel: Some(&cancel),
            ran_since,
            ..tick::Options::default()
        };
        let result = stores
            .get(&name)
            .and_then(|dir| tick::run_on(root, dir.as_ref(), &opts));
        // In the worker, outside the lock, before the firing counts as
        // done: a halt or completion disables the loop's OS schedule, and
        // the notify command hears of it.
        if let Ok(report) = &result {
            tick::after::follow(root, tick::after::Change::Ticked(report));
        }
        log_tick(&name, &result, stores.is_shared());
        if finished.push(name, result) && tx.send(Msg::Done).is_err() {
            return;
        }
    }
}
