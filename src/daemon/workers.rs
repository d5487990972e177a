//! The pool of workers that run ticks, and the hand-off between it and
//! the dispatcher ([`Handoff`]): the queue of ticks to run, the ticks that
//! ended, and the dispatcher's inbox. Its fields are private to this file,
//! so the wake-up rules below hold by construction: a tick is given only
//! by [`Handoff::give`], which wakes exactly one worker; it is taken only
//! by a [`worker`]; an ended tick is handed back only by a worker, which
//! wakes the dispatcher exactly when it must; and the dispatcher sleeps
//! only in [`Handoff::sleep`], which says while it sleeps until when, and
//! judges itself whether an ended tick is urgent (every worker busy, or the
//! daemon stopping): it counts the ticks it gave and the dispatcher has not
//! taken in, and is told the daemon's [`Phase`], never a verdict.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::messages::Msg;
use super::phase::Phase;
use super::report::log_tick;
use crate::error::Result;
use crate::gate::GateHost;
use crate::root::Root;
use crate::store::Stores;
use crate::tick::{self, Cancel, TickReport};

/// How long the dispatcher may leave an ended tick untaken when it is to
/// wake by then anyway: the loop's next firing is computed from its
/// nominal time, so the wait moves no due time.
const LAZY: Duration = Duration::from_millis(50);

/// A tick for a worker.
pub(super) struct Job {
    pub(super) name: Arc<str>,
    pub(super) cancel: Cancel,
    /// With a shared store: a tick started since then ran this firing.
    pub(super) ran_since: Option<Timestamp>,
    /// An approval released the loop: the command that gave it may still
    /// hold the lock (its change is told before its lock is let go), so
    /// the tick waits for it a moment before it answers `busy`.
    pub(super) released: bool,
}

/// How long a released tick waits for the approving command's lock.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// A tick that ended, and how.
pub(super) type Ended = (Arc<str>, Result<TickReport>);

/// Between the dispatcher and the workers (and the threads that message
/// the dispatcher).
///
/// Ticks given and not yet taken wait in a queue; each one given wakes one
/// idle worker, and only that one.
///
/// Ticks that ended wait for the dispatcher to take them in when it next
/// wakes. A worker wakes it (with [`Msg::Done`]) only when it is needed
/// now: it sleeps with every worker busy or while stopping, or would sleep
/// past [`LAZY`]. Otherwise it is about to wake anyway (the next due
/// firing, at a hundred ticks a second, is milliseconds away) and takes
/// the ended ticks in then: a tick costs one wake-up of the dispatcher,
/// not two.
pub(super) struct Handoff {
    /// The workers there are: with as many ticks out, every one is busy.
    workers: usize,
    /// Ticks given whose end the dispatcher has not taken in: those
    /// running, as the dispatcher counts them. Only the dispatcher's
    /// thread changes it (in [`Handoff::give`] and [`Handoff::sleep`]).
    out: AtomicUsize,
    jobs: Mutex<Jobs>,
    ready: Condvar,
    ended: Mutex<Finished>,
    /// Set once the daemon stops: no more ticks are given and no more
    /// messages are wanted.
    closed: AtomicBool,
    to_dispatcher: mpsc::Sender<Msg>,
}

#[derive(Default)]
struct Jobs {
    waiting: VecDeque<Job>,
    closed: bool,
}

#[derive(Default)]
struct Finished {
    ended: Vec<Ended>,
    /// While the dispatcher sleeps, until when; `None` while it is awake
    /// (it looks here before it sleeps).
    sleeps_until: Option<Instant>,
}

/// The dispatcher's end of its messages: read only through
/// [`Handoff::sleep`].
pub(super) struct Inbox(mpsc::Receiver<Msg>);

/// What ended the dispatcher's sleep.
pub(super) enum Woken {
    /// Ticks had ended before it slept: it did not.
    Ended(Vec<Ended>),
    Msg(Msg),
    /// The time it meant to sleep passed.
    Timeout,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Handoff {
    /// The hand-off for a pool of `workers` workers.
    pub(super) fn new(workers: usize) -> (Handoff, Inbox) {
        let (tx, rx) = mpsc::channel();
        let handoff = Handoff {
            workers,
            out: AtomicUsize::new(0),
            jobs: Mutex::default(),
            ready: Condvar::new(),
            ended: Mutex::default(),
            closed: AtomicBool::new(false),
            to_dispatcher: tx,
        };
        (handoff, Inbox(rx))
    }

    /// Where another thread (signals, the store's notifications) sends the
    /// dispatcher a message.
    pub(super) fn sender(&self) -> mpsc::Sender<Msg> {
        self.to_dispatcher.clone()
    }

    /// Gives a tick to the workers, waking one idle worker.
    pub(super) fn give(&self, job: Job) {
        self.out.fetch_add(1, Ordering::Relaxed);
        lock(&self.jobs).waiting.push_back(job);
        self.ready.notify_one();
    }

    /// The next tick to run, waiting for one; `None` once closed.
    fn take(&self) -> Option<Job> {
        let mut q = lock(&self.jobs);
        loop {
            if let Some(job) = q.waiting.pop_front() {
                return Some(job);
            }
            if q.closed {
                return None;
            }
            q = self
                .ready
                .wait(q)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Records a tick that ended, and wakes the dispatcher when it must;
    /// false once the dispatcher is gone.
    fn hand_back(&self, ended: Ended) -> bool {
        let wake = {
            let mut f = lock(&self.ended);
            f.ended.push(ended);
            f.sleeps_until.is_some_and(|at| at > Instant::now() + LAZY)
        };
        !wake || self.to_dispatcher.send(Msg::Done).is_ok()
    }

    /// The dispatcher's one way to wait: the ticks that ended since it last
    /// looked, at once; else a message, or nothing within `wait`. While it
    /// sleeps, a tick that ends wakes it only when it would sleep on past
    /// [`LAZY`], or at once when that is urgent: every worker is busy (no
    /// tick can start before one ends), or the daemon is stopping (`phase`).
    pub(super) fn sleep(&self, inbox: &Inbox, wait: Duration, phase: Phase) -> Woken {
        let urgent = phase.stopping() || self.out.load(Ordering::Relaxed) >= self.workers;
        {
            let mut f = lock(&self.ended);
            if !f.ended.is_empty() {
                let ended = std::mem::take(&mut f.ended);
                self.out.fetch_sub(ended.len(), Ordering::Relaxed);
                return Woken::Ended(ended);
            }
            f.sleeps_until = Some(match urgent {
                true => Instant::now() + Duration::from_hours(1),
                false => Instant::now() + wait,
            });
        }
        let msg = inbox.0.recv_timeout(wait);
        lock(&self.ended).sleeps_until = None;
        match msg {
            Ok(msg) => Woken::Msg(msg),
            Err(_) => Woken::Timeout,
        }
    }

    /// Whether the daemon is stopping: a thread that messages the
    /// dispatcher ends at its next look.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// A guard that closes the hand-off when dropped, however the
    /// dispatcher's scope ends (a worker that cannot be started ends it
    /// early), so no worker waits on.
    pub(super) fn closing(&self) -> Closing<'_> {
        Closing(self)
    }

    /// No more ticks: each worker ends once the queue is empty.
    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        lock(&self.jobs).closed = true;
        self.ready.notify_all();
    }
}

/// Closes the hand-off when dropped (see [`Handoff::closing`]).
pub(super) struct Closing<'a>(&'a Handoff);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A worker: runs the ticks it is handed, one at a time, until the
/// hand-off closes. It blocks while there is nothing to run.
pub(super) fn worker(root: &Root, stores: &Stores, host: Option<&GateHost>, handoff: &Handoff) {
    while let Some(Job {
        name,
        cancel,
        ran_since,
        released,
    }) = handoff.take()
    {
        let opts = tick::Options {
            never_wait: true,
            brief_wait: released.then_some(RELEASE_WAIT),
            host,
            cancel: Some(&cancel),
            ran_since,
            fired_by: crate::fires::FiredBy::Daemon,
            ..tick::Options::default()
        };
        // In the worker, outside the lock, before the firing counts as
        // done: a halt or completion disables the loop's OS schedule, and
        // the notify command hears of it, on the store the tick used.
        let result = stores.handle(&name).and_then(|dir| {
            let report = tick::run_on(root, dir.as_ref(), stores.me(), &opts)?;
            tick::after::follow(root, tick::after::Change::Ticked(&report, dir.as_ref()));
            Ok(report)
        });
        log_tick(&name, &result, stores.is_shared());
        if !handoff.hand_back((name, result)) {
            return;
        }
    }
}
