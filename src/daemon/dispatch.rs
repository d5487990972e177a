//! The dispatcher: one thread that knows every scheduled loop's next
//! firing, hands due ticks to the workers (never two of one loop), takes
//! ended ones in, rescans the root and reports on a timer, and on a stop
//! signal stops firing, waits out the grace and cancels what still runs.

use std::collections::HashMap;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use jiff::{SignedDuration, Timestamp};

use super::due::jittered;
use super::presence::Presence;
use super::queue::Queue;
use super::report::Lags;
use super::scan::{Entry, mtime};
use super::workers::{Finished, Job, Jobs};
use super::{GATHER, MAX_SLEEP, Msg, Options};
use crate::error::Result;
use crate::root::Root;
use crate::state::Outcome;
use crate::store::Stores;
use crate::tick::{Cancel, TickReport};

pub(super) struct Dispatcher<'a> {
    pub(super) root: &'a Root,
    pub(super) stores: &'a Stores,
    pub(super) opts: &'a Options,
    pub(super) max: usize,
    pub(super) presence: Presence,
    pub(super) loops: HashMap<Arc<str>, Entry>,
    pub(super) queue: Queue<Arc<str>>,
    pub(super) running: HashMap<Arc<str>, Cancel>,
    pub(super) scans: u64,
    pub(super) listing: Option<(SystemTime, Instant)>,
    pub(super) ticks: u64,
    pub(super) lags: Lags,
    pub(super) last_report: Instant,
    /// The wall clock and the monotonic one at the last look, to notice the
    /// wall clock stepping back.
    pub(super) clock: (Timestamp, Instant),
}

impl<'a> Dispatcher<'a> {
    pub(super) fn new(
        root: &'a Root,
        stores: &'a Stores,
        opts: &'a Options,
        max: usize,
        presence: Presence,
    ) -> Dispatcher<'a> {
        Dispatcher {
            root,
            stores,
            opts,
            max,
            presence,
            loops: HashMap::new(),
            queue: Queue::default(),
            running: HashMap::new(),
            scans: 0,
            listing: None,
            ticks: 0,
            lags: Lags::default(),
            last_report: Instant::now(),
            clock: (crate::clock::now(), Instant::now()),
        }
    }

    pub(super) fn run(&mut self, jobs: &Jobs, rx: &mpsc::Receiver<Msg>, finished: &Finished) {
        let mut stop: Option<Instant> = None;
        let mut cancelled = false;
        let mut next_scan = Instant::now();
        let mut next_report = Instant::now() + self.opts.report.min(Duration::from_secs(1));
        loop {
            if stop.is_none() {
                if Instant::now() >= next_scan {
                    self.rescan();
                    next_scan = Instant::now() + self.opts.rescan;
                }
                self.check_clock();
                self.dispatch(jobs);
                if Instant::now() >= next_report {
                    self.report();
                    next_report = Instant::now() + self.opts.report;
                }
            } else if self.running.is_empty() {
                break;
            }
            let wait = match stop {
                Some(deadline) if !cancelled => deadline.saturating_duration_since(Instant::now()),
                Some(_) => MAX_SLEEP,
                None => self.sleep(next_scan.min(next_report)),
            };
            // Ticks that ended since the last look are taken in now;
            // those that end while it sleeps wake it only when needed.
            let ended = {
                let mut f = finished.lock();
                let ended = std::mem::take(&mut f.ended);
                if ended.is_empty() {
                    let must_wake = stop.is_some() || self.running.len() >= self.max;
                    f.sleeps_until = Some(match must_wake {
                        true => Instant::now() + MAX_SLEEP * 3600,
                        false => Instant::now() + wait,
                    });
                }
                ended
            };
            if !ended.is_empty() {
                for (name, result) in ended {
                    self.done(name, &result);
                }
                continue;
            }
            let msg = rx.recv_timeout(wait);
            finished.lock().sleeps_until = None;
            match msg {
                Ok(Msg::Signal(sig)) if stop.is_none() => {
                    let name = signal_hook::low_level::signal_name(sig).unwrap_or("signal");
                    match self.running.len() {
                        0 => tracing::info!("{name}: stopping"),
                        n => tracing::info!(
                            "{name}: no more ticks are started; waiting up to {} for {n} running \
                             (a second signal stops their steps now)",
                            crate::duration::format(self.opts.grace)
                        ),
                    }
                    stop = Some(Instant::now() + self.opts.grace);
                }
                Ok(Msg::Signal(_)) => stop = Some(Instant::now()),
                Ok(Msg::Done) => {}
                Ok(Msg::Changed(names)) => {
                    if self.changed(&names) {
                        next_scan = Instant::now();
                    }
                }
                Ok(Msg::Resync) => {
                    self.resync();
                    next_scan = Instant::now();
                }
                Err(_) => {}
            }
            if let Some(deadline) = stop
                && !cancelled
                && Instant::now() >= deadline
                && !self.running.is_empty()
            {
                tracing::warn!("cancelling the steps of {} running ticks", self.running.len());
                for c in self.running.values() {
                    c.cancel();
                }
                cancelled = true;
            }
        }
    }

    /// Hands due loops to idle workers, most overdue first.
    pub(super) fn dispatch(&mut self, jobs: &Jobs) {
        let now = crate::clock::now();
        while self.running.len() < self.max {
            let Some((due, name)) = self.queue.pop_due(now) else {
                break;
            };
            let Some(entry) = self.loops.get_mut(&name) else {
                continue;
            };
            if entry.schedule.is_none() || self.running.contains_key(&name) {
                continue;
            }
            entry.fired = entry.nominal.take().or(Some(now));
            if entry
                .inactive
                .is_some_and(|m| entry.state_path.as_deref().and_then(mtime) == Some(m))
            {
                // Paused, halted or completed, and unchanged since a tick
                // said so: nothing to fire. Look again at the next firing.
                reschedule(&mut self.queue, &name, entry, now);
                continue;
            }
            let lag = Duration::try_from(now.duration_since(due)).unwrap_or_default();
            self.lags.add(&name, lag);
            self.ticks += 1;
            let cancel = Cancel::default();
            self.running.insert(Arc::clone(&name), cancel.clone());
            // Daemons on other hosts fire the same loop: a tick started
            // within half a cadence of this firing ran it already.
            let ran_since = match (self.stores.is_shared(), &entry.schedule, entry.fired) {
                (true, Some((_, when)), Some(fired)) => {
                    let half = SignedDuration::try_from(when.period(now) / 2).unwrap_or_default();
                    fired.checked_sub(half).ok()
                }
                _ => None,
            };
            jobs.give(Job {
                name,
                cancel,
                ran_since,
            });
        }
    }

    /// Loops a shared store said changed: their config is read again and a
    /// paused one looked at again; an unknown name means a new loop, and
    /// asks for a scan now (the answer).
    pub(super) fn changed(&mut self, names: &[String]) -> bool {
        let mut scan = false;
        for name in names {
            match self.loops.get_mut(name.as_str()) {
                Some(e) => {
                    e.config_mtime = None;
                    e.inactive = None;
                    scan = true;
                }
                None => {
                    self.listing = None;
                    scan = true;
                }
            }
        }
        scan
    }

    /// Forgets every config read and the listing, so the next scans read
    /// them all again: what a gap in the notifications may have hidden.
    pub(super) fn resync(&mut self) {
        for e in self.loops.values_mut() {
            e.config_mtime = None;
            e.inactive = None;
        }
        self.listing = None;
    }

    pub(super) fn done(&mut self, name: Arc<str>, result: &Result<TickReport>) {
        self.running.remove(&name);
        let now = crate::clock::now();
        if let Some(entry) = self.loops.get_mut(&name) {
            entry.inactive = match result {
                Ok(r) if r.outcome == Outcome::Inactive => entry.state_path.as_deref().and_then(mtime),
                _ => None,
            };
            reschedule(&mut self.queue, &name, entry, now);
        }
    }

    /// How long to sleep: until the next due firing ([`GATHER`] after it,
    /// to start those due soon after it too), scan or report, at most a
    /// second. With every worker busy, a due firing cannot start before a
    /// running tick ends, which wakes the dispatcher; sleeping until an
    /// overdue firing would be no sleep at all, and it would spin.
    pub(super) fn sleep(&mut self, next: Instant) -> Duration {
        let mut wait = next.saturating_duration_since(Instant::now()).min(MAX_SLEEP);
        if self.running.len() < self.max
            && let Some((due, _)) = self.queue.peek()
        {
            let until = Duration::try_from(due.duration_since(crate::clock::now())).unwrap_or_default();
            wait = wait.min(until + GATHER);
        }
        wait
    }

    /// When the wall clock stepped back, no `every` loop may stay due
    /// further off than its cadence (and jitter).
    pub(super) fn check_clock(&mut self) {
        let (wall, mono) = (crate::clock::now(), Instant::now());
        let (last_wall, last_mono) = self.clock;
        self.clock = (wall, mono);
        let expected = last_wall
            .checked_add(SignedDuration::try_from(mono - last_mono).unwrap_or_default())
            .unwrap_or(wall);
        if expected.duration_since(wall) < SignedDuration::from_secs(2) {
            return;
        }
        tracing::warn!("the wall clock stepped back; due times are brought within one cadence");
        let due: Vec<(Arc<str>, Timestamp)> = self.queue.iter().map(|(k, t)| (Arc::clone(k), t)).collect();
        for (name, t) in due {
            if let Some((s, when)) = self.loops.get(&name).and_then(|e| e.schedule.as_ref()) {
                self.queue.set(name, when.clamp(t, wall, s.jitter.map(|j| j.0)));
            }
        }
    }
}

/// Queues `entry`'s next firing after the one it just filled.
pub(super) fn reschedule(queue: &mut Queue<Arc<str>>, name: &Arc<str>, entry: &mut Entry, now: Timestamp) {
    let next = match (&entry.schedule, entry.fired) {
        (Some((s, when)), Some(fired)) => when
            .after(fired, now)
            .map(|t| (t, jittered(t, s.jitter.map(|j| j.0)))),
        _ => None,
    };
    entry.nominal = next.map(|(t, _)| t);
    match next {
        Some((_, at)) => queue.set(Arc::clone(name), at),
        None => queue.unset(name),
    }
}
