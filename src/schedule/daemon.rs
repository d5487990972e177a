//! `automaton daemon`: the embedded scheduler. It fires due ticks of every
//! loop with a `[schedule]` in this process, on a fixed pool of
//! `max_concurrent` workers, never two of one loop; a loop whose lock is held
//! elsewhere answers `busy` at once and is tried again at its next firing.
//!
//! Due times live in a timer queue (`queue`), so a firing costs O(log n) in
//! the loops known. The root is rescanned every few seconds, linearly: the
//! loop list is read again only when the loops directory changed, and a
//! config only when its mtime did; past a thousand loops the configs' mtimes
//! are looked at in turns (each every few rescans), so an idle daemon's cost
//! stays flat. Loops found due at once (a new root, or
//! after downtime) are spread over one cadence rather than fired in a burst.
//! A removed loop is logged and never ticked again. Every few seconds the
//! daemon publishes how far behind it is (`presence`), and warns, with
//! figures, when ticks start late.
//!
//! On SIGTERM or SIGINT it stops firing, lets running ticks finish for the
//! grace period, then cancels their steps, waits for the ticks to record
//! that, and returns. A second signal cancels at once.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use jiff::{SignedDuration, Timestamp};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::ScheduleError;
use super::due::{When, jittered};
use super::presence::{DaemonRecord, Presence};
use super::queue::Queue;
use crate::config::Schedule;
use crate::error::Result;
use crate::gate::GateHost;
use crate::root::Root;
use crate::state::Outcome;
use crate::store::{LoopStore, Stores};
use crate::tick::{self, Cancel, TickReport};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Ticks running at once, at most (at least 1): the worker threads.
    pub max_concurrent: usize,
    /// After a stop signal: how long running ticks may go on before their
    /// steps are cancelled.
    pub grace: Duration,
    /// How often the root is scanned for new, changed and removed loops.
    pub rescan: Duration,
    /// How often the daemon publishes its record and judges its lag.
    pub report: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_concurrent: 4,
            grace: Duration::from_secs(30),
            rescan: Duration::from_secs(2),
            report: Duration::from_secs(15),
        }
    }
}

/// The longest the daemon sleeps between looks at the clock, so a machine
/// that slept (and a changed wall clock) is noticed soon after.
const MAX_SLEEP: Duration = Duration::from_secs(1);
/// The loop list is read in full at least this often, even when the loops
/// directory's mtime says nothing changed.
const FULL_LISTING: Duration = Duration::from_secs(30);
/// At most about this many configs are looked at (one `stat` each) per
/// rescan: a root with more has its configs looked at in turns, each once
/// every few rescans, so an idle daemon's cost stays flat as loops grow.
const CONFIGS_PER_SCAN: usize = 1000;
/// A tick that starts later than this after its due time counts as late.
const LATE: Duration = Duration::from_secs(1);
/// Firings due within this of the next one start at the same wake-up of
/// the dispatcher: a tick may start up to this late, and a daemon firing
/// hundreds of ticks a second wakes a fraction as often.
const GATHER: Duration = Duration::from_millis(10);

enum Msg {
    Signal(i32),
    /// A tick ended and the dispatcher is needed now (see [`Finished`]).
    Done,
    /// A shared store said these loops changed (a commit, a new loop, an
    /// edit, a removal), possibly on another host.
    Changed(Vec<String>),
    /// The shared store's notifications had a gap (their connection was
    /// lost and made again): any loop may have changed unseen.
    Resync,
}

/// Ticks that ended, for the dispatcher to take in when it next wakes.
///
/// A worker wakes the dispatcher (with [`Msg::Done`]) only when it is
/// needed now: it sleeps with every worker busy or while stopping, or would
/// sleep past [`LAZY`]. Otherwise it is about to wake anyway (the next due
/// firing, at a hundred ticks a second, is milliseconds away) and takes the
/// ended ticks in then: a tick costs one wake-up of the dispatcher, not two.
#[derive(Default)]
struct Finished {
    inner: Mutex<FinishedInner>,
}

#[derive(Default)]
struct FinishedInner {
    ended: Vec<(Arc<str>, Result<TickReport>)>,
    /// While the dispatcher sleeps, until when; `None` while it is awake
    /// (it looks here before it sleeps).
    sleeps_until: Option<Instant>,
}

/// How long the dispatcher may leave an ended tick untaken when it is to
/// wake by then anyway: the loop's next firing is computed from its
/// nominal time, so the wait moves no due time.
const LAZY: Duration = Duration::from_millis(50);

impl Finished {
    fn lock(&self) -> std::sync::MutexGuard<'_, FinishedInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an ended tick; whether the dispatcher must be woken for it.
    fn push(&self, name: Arc<str>, result: Result<TickReport>) -> bool {
        let mut f = self.lock();
        f.ended.push((name, result));
        f.sleeps_until.is_some_and(|at| at > Instant::now() + LAZY)
    }
}

/// The ticks handed to the workers and not yet taken. Each one given wakes
/// one idle worker, and only that one.
#[derive(Default)]
struct Jobs {
    queue: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

impl Jobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, (VecDeque<Job>, bool)> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn give(&self, job: Job) {
        self.lock().0.push_back(job);
        self.ready.notify_one();
    }

    /// The next tick to run, waiting for one; `None` once closed.
    fn take(&self) -> Option<Job> {
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
    fn close(&self) {
        self.lock().1 = true;
        self.ready.notify_all();
    }
}

/// Closes the queue when dropped, however the dispatcher's scope ends (a
/// worker that cannot be started ends it early), so no worker waits on.
struct CloseJobs<'a>(&'a Jobs);

impl Drop for CloseJobs<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A tick for a worker.
struct Job {
    name: Arc<str>,
    cancel: Cancel,
    /// With a shared store: a tick started since then ran this firing.
    ran_since: Option<Timestamp>,
}

/// A loop the daemon knows.
struct Entry {
    dir: Box<dyn LoopStore>,
    /// The config's mtime when last read; `None` before the first read.
    config_mtime: Option<Option<SystemTime>>,
    /// The schedule as last read; `None` when it has none or its config is invalid.
    schedule: Option<(Schedule, When)>,
    /// The firing the last tick filled (its due time before jitter).
    fired: Option<Timestamp>,
    /// The firing queued, before jitter.
    nominal: Option<Timestamp>,
    /// The state file's mtime when a tick found the loop paused, halted or
    /// completed: until the state changes, a firing is passed over without
    /// a tick.
    inactive: Option<SystemTime>,
    /// The scan that last saw the loop.
    seen: u64,
    /// Which turn of the rescans looks at its config.
    turn: u64,
    config_path: PathBuf,
    /// A file whose mtime moves with every commit (the file store).
    state_path: Option<PathBuf>,
}

impl Entry {
    fn new(dir: Box<dyn LoopStore>) -> Entry {
        Entry {
            config_path: dir.config_path(),
            state_path: dir.commit_marker(),
            dir,
            config_mtime: None,
            schedule: None,
            fired: None,
            nominal: None,
            inactive: None,
            seen: 0,
            turn: 0,
        }
    }
}

/// Runs the scheduler until a stop signal; returns once every tick it
/// started has ended.
pub fn run(root: &Root, opts: &Options) -> Result<()> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut signals = Signals::new([SIGTERM, SIGINT]).map_err(ScheduleError::Signals)?;
    let signal_handle = signals.handle();
    let to_main = tx.clone();
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if to_main.send(Msg::Signal(sig)).is_err() {
                    break;
                }
            }
        })
        .map_err(ScheduleError::Signals)?;
    // One gate host for every tick; if it cannot be built, each tick of a
    // loop with gates builds its own (and reports why that fails).
    let host = match GateHost::resident(Some(root.cache_dir()), opts.max_concurrent.max(1)) {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("cannot build the shared gate host: {e}");
            None
        }
    };
    let max = opts.max_concurrent.max(1);
    let stores = Stores::open(root)?;
    let presence = Presence::claim(root);
    tracing::info!(
        "daemon started on {} (at most {max} ticks at once)",
        root.path().display()
    );
    let listening = std::sync::atomic::AtomicBool::new(true);
    let finished = Finished::default();
    let jobs = Jobs::default();
    let result = thread::scope(|scope| {
        let _close = CloseJobs(&jobs);
        for i in 0..max {
            let tx = tx.clone();
            let host = host.as_ref();
            let (stores, finished, jobs) = (&stores, &finished, &jobs);
            thread::Builder::new()
                .name(format!("tick-{i}"))
                .spawn_scoped(scope, move || worker(root, stores, host, jobs, finished, &tx))
                .map_err(ScheduleError::Signals)?;
        }
        if let Some(listener) = stores.listen() {
            let (stores, tx, listening) = (&stores, tx.clone(), &listening);
            let mut listener = listener?;
            thread::Builder::new()
                .name("listen".into())
                .spawn_scoped(scope, move || {
                    while listening.load(std::sync::atomic::Ordering::Relaxed) {
                        match stores.wait_changes(&mut listener, MAX_SLEEP) {
                            Ok(names) if names.is_empty() => {}
                            Ok(names) => {
                                if tx.send(Msg::Changed(names)).is_err() {
                                    return;
                                }
                            }
                            Err(e) => {
                                tracing::warn!("{e}; changes are seen at the next scan");
                                thread::sleep(MAX_SLEEP);
                                match stores.listen() {
                                    Some(Ok(l)) => {
                                        listener = l;
                                        tracing::info!(
                                            "listening for changes again; every loop's config is read anew"
                                        );
                                        if tx.send(Msg::Resync).is_err() {
                                            return;
                                        }
                                    }
                                    _ => continue,
                                }
                            }
                        }
                    }
                })
                .map_err(ScheduleError::Signals)?;
        }
        let mut d = Dispatcher::new(root, &stores, opts, max, presence);
        d.run(&jobs, &rx, &finished);
        listening.store(false, std::sync::atomic::Ordering::Relaxed);
        d.presence.release(root);
        Ok(())
    });
    signal_handle.close();
    tracing::info!("daemon stopped");
    result
}

/// A worker: runs the ticks it is handed, one at a time, until the
/// dispatcher hangs up. It blocks while there is nothing to run.
fn worker(
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

/// How late the ticks of one report window started.
#[derive(Default)]
struct Lags {
    millis: Vec<u64>,
    worst: Option<(u64, Arc<str>)>,
}

impl Lags {
    fn add(&mut self, name: &Arc<str>, lag: Duration) {
        let ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX);
        self.millis.push(ms);
        if self.worst.as_ref().is_none_or(|(w, _)| ms > *w) {
            self.worst = Some((ms, Arc::clone(name)));
        }
    }

    fn percentile(sorted: &[u64], p: usize) -> u64 {
        match sorted.len() {
            0 => 0,
            n => sorted[((n * p).div_ceil(100)).clamp(1, n) - 1],
        }
    }
}

struct Dispatcher<'a> {
    root: &'a Root,
    stores: &'a Stores,
    opts: &'a Options,
    max: usize,
    presence: Presence,
    loops: HashMap<Arc<str>, Entry>,
    queue: Queue<Arc<str>>,
    running: HashMap<Arc<str>, Cancel>,
    scans: u64,
    listing: Option<(SystemTime, Instant)>,
    ticks: u64,
    lags: Lags,
    last_report: Instant,
    /// The wall clock and the monotonic one at the last look, to notice the
    /// wall clock stepping back.
    clock: (Timestamp, Instant),
}

impl<'a> Dispatcher<'a> {
    fn new(
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
            clock: (Timestamp::now(), Instant::now()),
        }
    }

    fn run(&mut self, jobs: &Jobs, rx: &mpsc::Receiver<Msg>, finished: &Finished) {
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
    fn dispatch(&mut self, jobs: &Jobs) {
        let now = Timestamp::now();
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
    fn changed(&mut self, names: &[String]) -> bool {
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
    fn resync(&mut self) {
        for e in self.loops.values_mut() {
            e.config_mtime = None;
            e.inactive = None;
        }
        self.listing = None;
    }

    fn done(&mut self, name: Arc<str>, result: &Result<TickReport>) {
        self.running.remove(&name);
        let now = Timestamp::now();
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
    fn sleep(&mut self, next: Instant) -> Duration {
        let mut wait = next.saturating_duration_since(Instant::now()).min(MAX_SLEEP);
        if self.running.len() < self.max
            && let Some((due, _)) = self.queue.peek()
        {
            let until = Duration::try_from(due.duration_since(Timestamp::now())).unwrap_or_default();
            wait = wait.min(until + GATHER);
        }
        wait
    }

    /// When the wall clock stepped back, no `every` loop may stay due
    /// further off than its cadence (and jitter).
    fn check_clock(&mut self) {
        let (wall, mono) = (Timestamp::now(), Instant::now());
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

    /// Picks up new and removed loops, and configs that changed. Linear in
    /// the loops; the listing is read again only when the loops directory
    /// changed (and every half minute regardless).
    fn rescan(&mut self) {
        self.scans += 1;
        let scan = self.scans;
        let loops_dir = self.root.loops_dir();
        let dir_mtime = mtime(&loops_dir);
        let relist = match (self.listing, dir_mtime) {
            (Some((m, at)), Some(now_m)) => m != now_m || at.elapsed() >= FULL_LISTING,
            _ => true,
        };
        if relist {
            let dirs = match self.stores.list() {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("cannot list the loops: {e}");
                    return;
                }
            };
            self.listing = dir_mtime.map(|m| (m, Instant::now()));
            for dir in dirs {
                let name: Arc<str> = Arc::from(dir.name().as_str());
                let known = self.loops.len() as u64;
                self.loops
                    .entry(name)
                    .or_insert_with(|| Entry {
                        turn: known,
                        ..Entry::new(dir)
                    })
                    .seen = scan;
            }
        } else {
            for e in self.loops.values_mut() {
                e.seen = scan;
            }
        }
        let now = Timestamp::now();
        let mut starting: Vec<Arc<str>> = Vec::new();
        let mut scheduled: Vec<Arc<str>> = Vec::new();
        let turns = self.loops.len().div_ceil(CONFIGS_PER_SCAN).max(1) as u64;
        for (name, entry) in self.loops.iter_mut() {
            // A loop never read is read now; the others in their turn.
            if entry.config_mtime.is_some() && entry.turn % turns != scan % turns {
                continue;
            }
            let modified = mtime(&entry.config_path);
            if entry.config_mtime == Some(modified) {
                continue;
            }
            entry.config_mtime = Some(modified);
            let schedule = read_schedule(name, entry.dir.as_ref());
            let same = match (&entry.schedule, &schedule) {
                (Some((a, _)), Some((b, _))) => a == b,
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            entry.schedule = schedule;
            match &entry.schedule {
                None => {
                    self.queue.unset(name);
                    entry.nominal = None;
                }
                Some(_) if self.running.contains_key(name) => {
                    // Rescheduled with the new cadence when its tick ends.
                }
                Some((s, when)) => {
                    let last = entry.fired.or_else(|| {
                        entry
                            .dir
                            .load()
                            .ok()
                            .and_then(|st| st.last_tick.map(|t| t.started_at))
                    });
                    let Some(first) = when.first(last, now) else {
                        tracing::warn!("loop {name:?} is not scheduled: its cadence never fires again");
                        continue;
                    };
                    scheduled.push(Arc::clone(name));
                    if first <= now {
                        starting.push(Arc::clone(name));
                    } else {
                        entry.nominal = Some(first);
                        self.queue
                            .set(Arc::clone(name), jittered(first, s.jitter.map(|j| j.0)));
                    }
                }
            }
        }
        self.spread(&starting, now);
        self.log_scheduled(&scheduled, starting.len());
        self.forget_removed(scan);
    }

    /// One line a newly scheduled loop; a summary (and the lines at debug
    /// level) when many were scheduled at once.
    fn log_scheduled(&self, names: &[Arc<str>], spread: usize) {
        let many = names.len() > 5;
        if many {
            tracing::info!(
                "{} loops scheduled; {spread} due now, spread over their cadence",
                names.len()
            );
        }
        for name in names {
            let Some(e) = self.loops.get(name) else { continue };
            let (Some((s, _)), Some(next)) = (&e.schedule, e.nominal) else {
                continue;
            };
            let next = next.round(jiff::Unit::Second).unwrap_or(next);
            match many {
                true => tracing::debug!("loop {name:?} scheduled ({}), next at {next}", super::describe(s)),
                false => tracing::info!("loop {name:?} scheduled ({}), next at {next}", super::describe(s)),
            }
        }
    }

    /// Loops due at once when found (a new root, a daemon that was down) are
    /// spread over one cadence, in name order among the loops of that
    /// cadence, rather than fired in one burst; a loop alone at its cadence
    /// fires now.
    fn spread(&mut self, starting: &[Arc<str>], now: Timestamp) {
        let mut groups: HashMap<Duration, Vec<&Arc<str>>> = HashMap::new();
        for name in starting {
            if let Some((_, when)) = self.loops.get(name).and_then(|e| e.schedule.as_ref()) {
                groups.entry(when.period(now)).or_default().push(name);
            }
        }
        for (period, mut names) in groups {
            names.sort();
            let n = names.len() as u32;
            for (i, name) in (0u32..).zip(names) {
                let Some(entry) = self.loops.get_mut(name) else {
                    continue;
                };
                let Some((s, _)) = &entry.schedule else {
                    continue;
                };
                let offset = period.mul_f64(f64::from(i) / f64::from(n));
                let at = now
                    .checked_add(SignedDuration::try_from(offset).unwrap_or_default())
                    .unwrap_or(now);
                entry.nominal = Some(at);
                self.queue
                    .set(Arc::clone(name), jittered(at, s.jitter.map(|j| j.0)));
            }
        }
    }

    /// Loops gone from the root: logged, and never fired again. A running
    /// tick of one finishes on its own.
    fn forget_removed(&mut self, scan: u64) {
        let gone: Vec<Arc<str>> = self
            .loops
            .iter()
            .filter(|(_, e)| e.seen != scan)
            .map(|(n, _)| Arc::clone(n))
            .collect();
        for name in gone {
            self.loops.remove(&name);
            self.queue.unset(&name);
            tracing::info!("loop {name:?} was removed: it is no longer ticked");
        }
    }

    /// Publishes the record and warns when ticks started late.
    fn report(&mut self) {
        let now = Timestamp::now();
        let mut lags = std::mem::take(&mut self.lags);
        lags.millis.sort_unstable();
        let overdue: Vec<Timestamp> = self
            .queue
            .iter()
            .filter(|(_, t)| *t <= now)
            .map(|(_, t)| t)
            .collect();
        let behind = overdue
            .iter()
            .min()
            .map(|t| now.duration_since(*t).as_millis().max(0) as u64)
            .unwrap_or(0);
        let mut record: DaemonRecord = self.presence.record(self.max);
        record.loops = self.loops.len();
        record.scheduled = self.loops.values().filter(|e| e.schedule.is_some()).count();
        record.running = self.running.len();
        record.ticks = self.ticks;
        record.overdue = overdue.len();
        record.behind_ms = behind;
        record.window_secs = self.last_report.elapsed().as_secs();
        self.last_report = Instant::now();
        record.window_ticks = lags.millis.len() as u64;
        record.lag_p50_ms = Lags::percentile(&lags.millis, 50);
        record.lag_p99_ms = Lags::percentile(&lags.millis, 99);
        record.lag_max_ms = lags.millis.last().copied().unwrap_or(0);
        let late = lags
            .millis
            .iter()
            .filter(|&&m| m > LATE.as_millis() as u64)
            .count();
        if late > 0 || behind > LATE.as_millis() as u64 {
            let worst = lags
                .worst
                .as_ref()
                .map(|(ms, n)| format!(", worst {ms} ms ({n})"))
                .unwrap_or_default();
            tracing::warn!(
                "falling behind: {late} of {} ticks started more than {} late (p50 {} ms, p99 {} ms{worst}); \
                 {} firings overdue, the oldest by {} ms; {}/{} workers busy. \
                 Raise --max-concurrent or lengthen cadences",
                record.window_ticks,
                crate::duration::format(LATE),
                record.lag_p50_ms,
                record.lag_p99_ms,
                record.overdue,
                behind,
                record.running,
                self.max
            );
        }
        self.presence.publish(self.root, &record);
    }
}

/// Queues `entry`'s next firing after the one it just filled.
fn reschedule(queue: &mut Queue<Arc<str>>, name: &Arc<str>, entry: &mut Entry, now: Timestamp) {
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

fn read_schedule(name: &str, dir: &dyn LoopStore) -> Option<(Schedule, When)> {
    let schedule = match dir.config() {
        Ok(c) if !c.runner.allows(&crate::who::host()) => {
            tracing::info!(
                "loop {name:?} runs on {} only; not scheduled on this host",
                c.runner.hosts.join(", ")
            );
            None
        }
        Ok(c) => c.schedule,
        Err(e) => {
            tracing::warn!("loop {name:?} is not scheduled: {e}");
            None
        }
    }?;
    match When::of(&schedule) {
        Ok(w) => Some((schedule, w)),
        Err(e) => {
            tracing::warn!("loop {name:?} is not scheduled: {e}");
            None
        }
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn log_tick(name: &str, result: &Result<TickReport>, shared: bool) {
    match result {
        // With daemons on several hosts, losing a firing to another is normal.
        Ok(r) if shared && r.outcome == Outcome::Busy => {
            tracing::debug!(
                "{name} tick {}: busy: {}",
                r.tick,
                r.reason.as_deref().unwrap_or("")
            );
        }
        Ok(r) => {
            let mut line = format!("{name} tick {}: {}", r.tick, r.outcome);
            let mut said = None;
            if let Some(step) = &r.step {
                let ended = format!("step {step}");
                line += &format!(" ({ended})");
                said = Some(ended);
            }
            if let Some(reason) = r.reason.as_ref().filter(|r| Some(*r) != said.as_ref()) {
                line += &format!(": {reason}");
            }
            // A loop still waiting for the approval an earlier firing asked
            // for is said once, when the wait starts.
            if r.outcome == crate::state::Outcome::AwaitingApproval && !r.started_waiting {
                tracing::debug!("{line}");
            } else {
                tracing::info!("{line}");
            }
        }
        Err(e) => tracing::warn!("{name}: tick failed: {e}"),
    }
}
