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
//!
//! The parts, one file each: `dispatch` (the dispatcher's loop: what is
//! due, handing ticks out, taking ended ones in, stopping), `scan` (finding
//! loops and their schedules), `workers` (the pool that runs ticks and the
//! hand-offs between it and the dispatcher), `report` (lag figures and the
//! daemon's log line for a tick), `due` (when a schedule fires), `queue`
//! (the timer queue) and `presence` (the record of the daemon serving a
//! root).

mod dispatch;
mod due;
pub mod presence;
mod queue;
mod report;
mod scan;
mod workers;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

pub use due::{When, next_due};
pub use presence::{DaemonRecord, DaemonStatus, daemon_line, daemon_status};

use crate::error::Result;
use crate::gate::GateHost;
use crate::root::Root;
use crate::schedule::ScheduleError;
use crate::store::Stores;
use dispatch::Dispatcher;
use presence::Presence;
use workers::{CloseJobs, Finished, Jobs, worker};

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
                        match listener.wait(MAX_SLEEP) {
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
