//! `automaton daemon`: the embedded scheduler. It fires due ticks of every
//! loop with a `[schedule]` in this process, at most `max_concurrent` at a
//! time and never two of one loop; a loop whose lock is held elsewhere
//! answers `busy` at once and is tried again at its next firing. It rescans
//! the root every few seconds (new and removed loops, changed configs, by
//! mtime). On SIGTERM or SIGINT it stops firing, lets running ticks finish
//! for the grace period, then cancels their steps, waits for the ticks to
//! record that, and returns. A second signal cancels at once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use jiff::Timestamp;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::ScheduleError;
use super::due::{When, jittered};
use crate::config::Schedule;
use crate::error::Result;
use crate::gate::GateHost;
use crate::root::Root;
use crate::store::{self, LoopDir};
use crate::tick::{self, Cancel, TickReport};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Ticks running at once, at most (at least 1).
    pub max_concurrent: usize,
    /// After a stop signal: how long running ticks may go on before their
    /// steps are cancelled.
    pub grace: Duration,
    /// How often the root is scanned for new, changed and removed loops.
    pub rescan: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_concurrent: 4,
            grace: Duration::from_secs(30),
            rescan: Duration::from_secs(2),
        }
    }
}

/// The longest the daemon sleeps between looks at the clock, so a machine
/// that slept (and a changed wall clock) is noticed soon after.
const MAX_SLEEP: Duration = Duration::from_secs(1);

enum Msg {
    Signal(i32),
    Done {
        name: String,
        result: Result<TickReport>,
    },
}

/// A loop the daemon knows.
struct Entry {
    dir: LoopDir,
    config_mtime: Option<SystemTime>,
    /// The schedule as last read; `None` when it has none or its config is invalid.
    schedule: Option<(Schedule, When)>,
    due: Option<Timestamp>,
    fired: Option<Timestamp>,
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
    let host = match GateHost::new(Some(root.cache_dir())) {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("cannot build the shared gate host: {e}");
            None
        }
    };
    let max = opts.max_concurrent.max(1);
    tracing::info!(
        "daemon started on {} (at most {max} ticks at once)",
        root.path().display()
    );
    let result = thread::scope(|scope| {
        let mut loops: HashMap<String, Entry> = HashMap::new();
        let mut running: HashMap<String, Cancel> = HashMap::new();
        let mut stop: Option<Instant> = None;
        let mut cancelled = false;
        let mut next_scan = Instant::now();
        loop {
            if stop.is_none() {
                if Instant::now() >= next_scan {
                    rescan(root, &mut loops, &running);
                    next_scan = Instant::now() + opts.rescan;
                }
                let now = Timestamp::now();
                for e in loops.values_mut() {
                    if let (Some(due), Some((s, when))) = (e.due, &e.schedule) {
                        e.due = Some(when.clamp(due, now, s.jitter.map(|j| j.0)));
                    }
                }
                while running.len() < max {
                    let Some(name) = next_due(&loops, &running, now) else {
                        break;
                    };
                    let entry = loops.get_mut(&name).expect("a due loop is known");
                    entry.fired = Some(now);
                    entry.due = None;
                    if !runnable(&entry.dir) {
                        // Paused, halted or completed: nothing to fire. Look
                        // again at the next firing.
                        reschedule(entry, now);
                        continue;
                    }
                    let cancel = Cancel::default();
                    running.insert(name.clone(), cancel.clone());
                    let tx = tx.clone();
                    let host = host.as_ref();
                    scope.spawn(move || {
                        let opts = tick::Options {
                            never_wait: true,
                            host,
                            cancel: Some(&cancel),
                            ..tick::Options::default()
                        };
                        let result = tick::run(root, &name, &opts);
                        let _ = tx.send(Msg::Done { name, result });
                    });
                }
            } else if running.is_empty() {
                break;
            }
            let wait = match stop {
                Some(deadline) if !cancelled => deadline.saturating_duration_since(Instant::now()),
                Some(_) => MAX_SLEEP,
                None => sleep_until(&loops, &running, next_scan, running.len() >= max),
            };
            match rx.recv_timeout(wait) {
                Ok(Msg::Signal(sig)) if stop.is_none() => {
                    let name = signal_hook::low_level::signal_name(sig).unwrap_or("signal");
                    match running.len() {
                        0 => tracing::info!("{name}: stopping"),
                        n => tracing::info!(
                            "{name}: no more ticks are started; waiting up to {} for {n} running \
                             (a second signal stops their steps now)",
                            humantime::format_duration(opts.grace)
                        ),
                    }
                    stop = Some(Instant::now() + opts.grace);
                }
                Ok(Msg::Signal(_)) => stop = Some(Instant::now()),
                Ok(Msg::Done { name, result }) => {
                    running.remove(&name);
                    if result.as_ref().is_ok_and(TickReport::stopped) {
                        super::loop_stopped(root, &name);
                    }
                    log_tick(&name, &result);
                    if let Some(entry) = loops.get_mut(&name) {
                        reschedule(entry, Timestamp::now());
                    }
                }
                Err(_) => {}
            }
            if let Some(deadline) = stop
                && !cancelled
                && Instant::now() >= deadline
                && !running.is_empty()
            {
                tracing::warn!("cancelling the steps of {} running ticks", running.len());
                for c in running.values() {
                    c.cancel();
                }
                cancelled = true;
            }
        }
        Ok(())
    });
    signal_handle.close();
    tracing::info!("daemon stopped");
    result
}

/// Whether a tick would do anything: a loop that is paused, halted or
/// completed is not fired (the tick would only say `inactive`).
fn runnable(dir: &LoopDir) -> bool {
    match dir.read_state() {
        Ok(state) => state.status.is_runnable() || state.in_flight.is_some(),
        // Let the tick report what is wrong.
        Err(_) => true,
    }
}

fn reschedule(entry: &mut Entry, now: Timestamp) {
    entry.due = match (&entry.schedule, entry.fired) {
        (Some((s, when)), Some(fired)) => when.after(fired, now).map(|t| jittered(t, s.jitter.map(|j| j.0))),
        _ => None,
    };
}

/// The loop that is most overdue, not running, if any is due.
fn next_due(
    loops: &HashMap<String, Entry>,
    running: &HashMap<String, Cancel>,
    now: Timestamp,
) -> Option<String> {
    loops
        .iter()
        .filter(|(name, e)| !running.contains_key(*name) && e.due.is_some_and(|d| d <= now))
        .min_by_key(|(_, e)| e.due)
        .map(|(name, _)| name.clone())
}

/// How long to sleep: until the next due firing or scan, at most a second.
/// With every worker busy (`full`), a due firing cannot start before a
/// running tick ends, which wakes the dispatcher; sleeping until an overdue
/// firing would be no sleep at all, and the dispatcher would spin.
fn sleep_until(
    loops: &HashMap<String, Entry>,
    running: &HashMap<String, Cancel>,
    next_scan: Instant,
    full: bool,
) -> Duration {
    let now = Timestamp::now();
    let mut wait = next_scan.saturating_duration_since(Instant::now()).min(MAX_SLEEP);
    if full {
        return wait;
    }
    for (name, e) in loops {
        if let Some(due) = e.due
            && !running.contains_key(name)
        {
            let until = Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO);
            wait = wait.min(until);
        }
    }
    wait
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Picks up new and removed loops, and configs that changed.
fn rescan(root: &Root, loops: &mut HashMap<String, Entry>, running: &HashMap<String, Cancel>) {
    let dirs = match store::list_loops(root) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("cannot list the loops: {e}");
            return;
        }
    };
    let present: Vec<String> = dirs.iter().map(|d| d.name().to_string()).collect();
    loops.retain(|name, _| present.contains(name) || running.contains_key(name));
    let now = Timestamp::now();
    for dir in dirs {
        let name = dir.name().to_string();
        let modified = mtime(&dir.config_path());
        if loops.get(&name).is_some_and(|e| e.config_mtime == modified) {
            continue;
        }
        let schedule = match dir.config() {
            Ok(c) => c.schedule,
            Err(e) => {
                tracing::warn!("loop {name:?} is not scheduled: {e}");
                None
            }
        };
        let schedule = schedule.and_then(|s| match When::of(&s) {
            Ok(w) => Some((s, w)),
            Err(e) => {
                tracing::warn!("loop {name:?} is not scheduled: {e}");
                None
            }
        });
        let entry = loops.entry(name.clone()).or_insert_with(|| Entry {
            dir: dir.clone(),
            config_mtime: None,
            schedule: None,
            due: None,
            fired: None,
        });
        entry.config_mtime = modified;
        let same = match (&entry.schedule, &schedule) {
            (Some((a, _)), Some((b, _))) => a == b,
            (None, None) => true,
            _ => false,
        };
        if same {
            continue;
        }
        entry.schedule = schedule;
        entry.due = entry.schedule.as_ref().and_then(|(s, when)| {
            let last = match entry.fired {
                Some(f) => Some(f),
                None => dir
                    .read_state()
                    .ok()
                    .and_then(|st| st.last_tick.map(|t| t.started_at)),
            };
            let first = jittered(when.first(last, now)?, s.jitter.map(|j| j.0));
            let at = first.round(jiff::Unit::Second).unwrap_or(first);
            tracing::info!("loop {name:?} scheduled ({}), next at {at}", super::describe(s));
            Some(first)
        });
    }
}

fn log_tick(name: &str, result: &Result<TickReport>) {
    match result {
        Ok(r) => {
            let mut line = format!("{name} tick {}: {}", r.tick, r.outcome);
            if let Some(step) = &r.step {
                line += &format!(" (step {step})");
            }
            if let Some(reason) = &r.reason {
                line += &format!(": {reason}");
            }
            tracing::info!("{line}");
        }
        Err(e) => tracing::warn!("{name}: tick failed: {e}"),
    }
}
