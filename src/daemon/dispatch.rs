//! The dispatcher: one thread that knows every scheduled loop's next
//! firing, hands due ticks to the workers (never two of one loop), takes
//! ended ones in, rescans the root and reports on a timer, and on a stop
//! signal stops firing, waits out the grace and cancels what still runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};

use super::awaits::Awaits;
use super::claims::Claimant;
use super::due::jittered;
use super::ledger::{Writer, schedule_key, stands_for};
use super::messages::Msg;
use super::phase::Phase;
use super::presence::Presence;
use super::queue::Queue;
use super::report::Lags;
use super::scan::{Entry, Scanner};
use super::workers::{Handoff, Inbox, Job, Woken};
use super::{GATHER, MAX_SLEEP, Options};
use crate::error::Result;
use crate::root::Root;
use crate::state::Outcome;
use crate::store::{Change, Stores};
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
    /// The scan's own bookkeeping: how many scans, the listing last read,
    /// when the next is due, the OS schedules' records last seen (`scan`).
    pub(super) scanner: Scanner,
    pub(super) ticks: u64,
    pub(super) lags: Lags,
    pub(super) last_report: Instant,
    /// When the record is next published.
    pub(super) next_report: Instant,
    /// The loops awaiting approval, watched so an approval fires them at
    /// once, and those it released (`awaits`).
    pub(super) awaits: Awaits,
    /// The wall clock and the monotonic one at the last look, to notice the
    /// wall clock stepping back.
    pub(super) clock: (Timestamp, Instant),
    /// With a store daemons share: this daemon's claims of firings
    /// (`claims`), in place of its own timer queue.
    pub(super) claimant: Option<Claimant>,
    /// Firings that found the loop's lock held and ran nothing.
    pub(super) busy: u64,
    /// What writes the ledger of firings.
    pub(super) ledger: Writer,
    /// The figures `--metrics` answers (src/exposition/daemon.rs).
    pub(super) figures: Arc<crate::exposition::DaemonFigures>,
    /// The server refuses new connections: no tick starts meanwhile.
    pub(super) refused: Option<super::refused::Refused>,
    /// Why the daemon must stop (the store's schema was upgraded under
    /// it): it stops as on a signal and ends with this error.
    pub(super) fatal: Option<crate::error::Error>,
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
            scanner: Scanner::of(root, stores.notifies()),
            ticks: 0,
            lags: Lags::default(),
            last_report: Instant::now(),
            next_report: Instant::now() + opts.report.min(Duration::from_secs(1)),
            awaits: Awaits::new(stores),
            clock: (crate::clock::now(), Instant::now()),
            claimant: stores.claims().map(|_| Claimant::new()),
            busy: 0,
            ledger: Writer::new(crate::clock::now()),
            figures: Arc::default(),
            refused: None,
            fatal: None,
        }
    }

    /// The dispatcher's loop, a list of named phases: serve (rescan,
    /// check the clock, fire what is due, report), sleep until a tick
    /// ends, a message comes or the next thing is due, take in what woke
    /// it, and cancel the running steps once a stop's grace is over.
    /// Returns once stopping with no tick running.
    pub(super) fn run(&mut self, handoff: &Handoff, inbox: &Inbox) {
        let mut phase = Phase::Serving;
        loop {
            if !phase.stopping() {
                self.serve(handoff);
                if self.fatal.is_some() {
                    phase = phase.signalled(Instant::now(), self.opts.grace);
                    continue;
                }
            } else if phase.stopped(self.running.len()) {
                break;
            } else {
                // The claims of the ticks still running are kept while they finish.
                self.renew_claims();
            }
            let wait = match phase.wait(Instant::now(), MAX_SLEEP) {
                Some(wait) => wait,
                None => self.sleep(self.scanner.next().min(self.next_report)),
            };
            match handoff.sleep(inbox, wait, phase) {
                // Ticks that ended since the last look are taken in now;
                // those that end while it sleeps wake it only when needed.
                Woken::Ended(ended) => {
                    for (name, result) in ended {
                        self.done(name, &result);
                    }
                    continue;
                }
                Woken::Msg(msg) => phase = self.receive(msg, phase),
                Woken::Timeout => {}
            }
            if phase.grace_over(Instant::now(), self.running.len()) {
                self.cancel_running();
                phase = Phase::Cancelling;
            }
        }
    }

    /// One round while serving: the root rescanned and the daemon's
    /// record published when each is due, the clock checked, and the due
    /// ticks handed out.
    fn serve(&mut self, handoff: &Handoff) {
        if self.scanner.due() {
            self.rescan();
            self.scanner.next_in(self.opts.rescan);
        }
        self.check_clock();
        self.poll_awaits();
        match self.claimant {
            Some(_) => {
                self.renew_claims();
                self.dispatch_claimed(handoff);
            }
            None => self.dispatch(handoff),
        }
        if Instant::now() >= self.next_report {
            self.report();
            self.next_report = Instant::now() + self.opts.report;
        }
        self.figures.set_ticks(self.running.len(), self.ticks, self.busy);
    }

    /// Acts on a message; the phase after it.
    fn receive(&mut self, msg: Msg, phase: Phase) -> Phase {
        match msg {
            Msg::Signal(sig) => {
                if !phase.stopping() {
                    self.say_stopping(sig);
                }
                return phase.signalled(Instant::now(), self.opts.grace);
            }
            Msg::Done => {}
            Msg::Changed(names) => {
                if self.changed(&names) {
                    self.scanner.now();
                }
            }
            Msg::Resync => {
                self.resync();
                self.scanner.now();
            }
        }
        phase
    }

    /// The first stop signal: what happens to the ticks running.
    fn say_stopping(&self, sig: i32) {
        #[cfg(unix)]
        let name = signal_hook::low_level::signal_name(sig).unwrap_or("signal");
        #[cfg(windows)]
        let name = match sig {
            2 => "Ctrl-C",
            super::messages::SERVICE_STOP => "the service's stop",
            _ => "Ctrl-Break",
        };
        match self.running.len() {
            0 => tracing::info!("{name}: stopping"),
            n => tracing::info!(
                "{name}: no more ticks are started; waiting up to {} for {n} running \
                 (a second signal stops their steps now)",
                crate::duration::format(self.opts.grace)
            ),
        }
    }

    /// The grace is over: the steps of the ticks still running are
    /// cancelled (each tick records that and ends).
    fn cancel_running(&self) {
        tracing::warn!("cancelling the steps of {} running ticks", self.running.len());
        for c in self.running.values() {
            c.cancel();
        }
    }

    /// Hands due loops to idle workers, most overdue first.
    pub(super) fn dispatch(&mut self, handoff: &Handoff) {
        self.review_try();
        let now = crate::clock::now();
        while self.room() > 0 {
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
            entry.started = Some(now);
            if let Some(detail) = entry.refusal(self.stores.me()) {
                // Its user may not tick it: the firing is recorded as
                // refused, and the next one queued.
                reschedule(&mut self.queue, &name, entry, now);
                self.record(&name, None, |w, at, key| w.of_refused(at, key, detail));
                continue;
            }
            if entry.inactive.is_some_and(|m| entry.dir.stamp() == Some(m)) {
                // Paused, halted or completed, and unchanged since a tick
                // said so: nothing to fire. Look again at the next firing.
                reschedule(&mut self.queue, &name, entry, now);
                self.record(&name, None, super::ledger::Writer::of_inactive);
                continue;
            }
            let lag = Duration::try_from(now.duration_since(due)).unwrap_or_default();
            self.lags.add(&name, lag);
            self.ticks += 1;
            let cancel = Cancel::default();
            self.running.insert(Arc::clone(&name), cancel.clone());
            // Daemons on other hosts fire the same loop: a tick started
            // within half a cadence of this firing ran it already.
            let released = self.awaits.take_released(&name);
            let ran_since = match (self.stores.is_shared(), &entry.schedule, entry.fired) {
                // An approval's release is a firing of its own.
                _ if released => None,
                (true, Some((_, when)), Some(fired)) => {
                    let half = SignedDuration::try_from(when.period(now) / 2).unwrap_or_default();
                    fired.checked_sub(half).ok()
                }
                _ => None,
            };
            self.started_one(&name);
            handoff.give(Job {
                name,
                cancel,
                ran_since,
                released,
            });
        }
    }

    /// Loops a shared store said changed: a paused one is looked at again,
    /// one that awaits approval and holds one is fired, and, unless only
    /// its state changed, its config is read again; an unknown name means
    /// a new loop, and asks for a scan now (the answer).
    pub(super) fn changed(&mut self, changes: &[Change]) -> bool {
        let mut scan = false;
        for Change { name, state_only } in changes {
            let known = self
                .loops
                .get_key_value(name.as_str())
                .map(|(k, _)| Arc::clone(k));
            if let (Some(known), Some(e)) = (known, self.loops.get_mut(name.as_str())) {
                e.inactive = None;
                // A commit changes no config: nothing to read again.
                if !state_only {
                    e.config_mtime = None;
                    self.scanner.reread(&known);
                    scan = true;
                }
                self.heard_of(name);
            } else {
                self.scanner.relist();
                scan = true;
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
        self.scanner.reread_all();
        self.scanner.relist();
    }

    pub(super) fn done(&mut self, name: Arc<str>, result: &Result<TickReport>) {
        if result.as_ref().is_ok_and(|r| r.outcome == Outcome::Busy) {
            self.busy += 1;
        }
        if self.stores.is_shared() {
            self.connection_answer(Some(&name), result.as_ref().err());
        }
        let crashed = result
            .as_ref()
            .ok()
            .and_then(|r| r.recovered_crash.zip(r.crashed_started));
        self.record(&name, crashed, |w, at, key| w.of_tick(at, key, result));
        if self.claimant.is_some() {
            self.settle(&name);
        }
        self.running.remove(&name);
        let now = crate::clock::now();
        if let Some(entry) = self.loops.get_mut(&name) {
            entry.inactive = match result {
                Ok(r) if r.outcome == Outcome::Inactive => entry.dir.stamp(),
                _ => None,
            };
            match result {
                Ok(r) if r.outcome == Outcome::AwaitingApproval => self.awaits.watch(&name),
                _ => {
                    self.awaits.forget(&name);
                }
            }
            if self.claimant.is_none() {
                reschedule(&mut self.queue, &name, entry, now);
            }
        }
    }

    /// Writes the record of the firing `name` last filled (`this` makes
    /// it, given when it fell due and the schedule's name) in its ledger,
    /// after the firings unaccounted for since its last record (the one a
    /// tick that `crashed`, its number and start, filled among them).
    pub(super) fn record(
        &self,
        name: &Arc<str>,
        crashed: Option<(u64, Timestamp)>,
        this: impl FnOnce(&Writer, Timestamp, &str) -> crate::fires::Fire,
    ) {
        let Some(entry) = self.loops.get(name) else { return };
        let (Some((s, when)), Some(at)) = (&entry.schedule, entry.fired) else {
            return;
        };
        let key = schedule_key(s);
        let at = stands_for(when, at, entry.started.unwrap_or(at));
        let mut fire = Some(this(&self.ledger, at, &key)).map(|mut f| {
            if f.kind == crate::fires::Kind::Ran {
                f.started = entry.started;
            }
            f
        });
        let written = entry.dir.record_fires(&mut |last| {
            let mut out = last
                .map(|l| self.ledger.gap(when, &key, l, at, crashed))
                .unwrap_or_default();
            // A crashed tick the gap does not account for filled this very
            // firing (taken again once its claim ran out, or at once by the
            // next daemon): the firing's first record is the crash.
            let again = crashed.filter(|(tick, started)| {
                last.is_none_or(|l| l.tick != Some(*tick) && *started > l.last_at())
                    && out.iter().all(|r| r.tick != Some(*tick))
            });
            out.extend(again.map(|c| self.ledger.of_crashed(at, &key, c)));
            out.extend(fire.take());
            out
        });
        if let Err(e) = written {
            tracing::warn!(
                "loop {name:?}: the firing is not in its ledger: {}",
                crate::error::with_causes(&e)
            );
        }
    }

    /// How long to sleep: until the next due firing ([`GATHER`] after it,
    /// to start those due soon after it too), scan or report, at most a
    /// second. With every worker busy, a due firing cannot start before a
    /// running tick ends, which wakes the dispatcher; sleeping until an
    /// overdue firing would be no sleep at all, and it would spin.
    pub(super) fn sleep(&mut self, next: Instant) -> Duration {
        let mut wait = next.saturating_duration_since(Instant::now()).min(MAX_SLEEP);
        if let Some(look) = self.awaits.next_look() {
            wait = wait.min(look.saturating_duration_since(Instant::now()));
        }
        // While the server refuses connections, nothing starts before the
        // pause ends, however overdue.
        if let Some(until) = self.refused_until() {
            wait = wait.min(until.saturating_duration_since(Instant::now()));
        }
        if self.room() > 0
            && let Some(at) = self.next_claim()
        {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        } else if self.room() > 0
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
