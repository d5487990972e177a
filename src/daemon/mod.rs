//! `automaton daemon`: the embedded scheduler. It fires due ticks of every
//! loop with a `[schedule]` in this process, on a fixed pool of
//! `max_concurrent` workers, never two of one loop; a loop whose lock is held
//! elsewhere answers `busy` at once and is tried again at its next firing.
//! With a store daemons on several hosts share (PostgreSQL), the store
//! keeps the next firings and the daemons claim the due ones between them
//! (`claims`), so each firing is offered to one daemon.
//!
//! Due times live in a timer queue (`queue`), so a firing costs O(log n) in
//! the loops known. The root is rescanned every few seconds: the loop list
//! is read again only when the loops directory changed (or half a minute
//! passed), opening only the loops new to the daemon, and a config only
//! when its mtime did. On Linux each config is watched (`watch`, inotify)
//! and a rescan looks only at those it was told changed; configs without
//! a watch (past the watches to be had, on other systems) are looked at a
//! thousand at most a rescan, in turns, so an idle daemon's cost stays
//! flat. Loops of one cron
//! expression share one parse of it. Loops found due at once (a new root, or
//! after downtime) are spread over one cadence rather than fired in a burst.
//! A removed loop is logged and never ticked again. Every few seconds the
//! daemon publishes how far behind it is (`presence`), and warns, with
//! figures, when ticks start late.
//!
//! On SIGTERM or SIGINT it stops firing, lets running ticks finish for the
//! grace period, then cancels their steps, waits for the ticks to record
//! that, and returns. A second signal cancels at once.
//!
//! This file only wires the threads and the shutdown. The parts, one file
//! each: `phase` (the daemon's life: serving, draining, cancelling,
//! stopped), `dispatch` (the dispatcher's loop, a list of named phases:
//! serve, sleep, take in, cancel), `scan` (finding loops and their
//! schedules), `workers` (the pool that runs ticks and the hand-off
//! between it and the dispatcher, which keeps the wake-up rules), `report`
//! (lag figures and the daemon's log line for a tick), `due` (when a
//! schedule fires), `queue` (the timer queue) and `presence` (the record
//! of the daemon serving a root), `messages` (what wakes the dispatcher,
//! and the threads that send it: signals, a shared store's changes), and
//! on Windows `service` (the daemon under the Service Control Manager).

mod awaits;
mod claims;
mod dispatch;
mod due;
mod ledger;
mod messages;
mod phase;
pub(crate) mod presence;
mod queue;
mod refused;
mod report;
mod scan;
#[cfg(windows)]
pub(crate) mod service;
mod watch;
mod workers;

use std::thread;
use std::time::Duration;

pub(crate) use due::When;
pub(crate) use presence::{DaemonStatus, daemon_status};

use crate::error::{Error, Result};
use crate::gate::GateHost;
use crate::root::Root;
use crate::store::Stores;
use dispatch::Dispatcher;
use messages::{listen_for_signals, relay_changes};
use presence::Presence;
use workers::{Handoff, worker};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Ticks running at once, at most (at least 1): the worker threads.
    pub max_concurrent: usize,
    /// After a stop signal: how long running ticks may go on before their
    /// steps are cancelled.
    pub grace: Duration,
    /// How often the root is scanned for new, changed and removed loops.
    pub rescan: Duration,
    /// How often the daemon publishes its record and judges its lag.
    pub report: Duration,
    /// `--metrics ADDR`: where `/metrics` is answered (src/exposition/listen.rs).
    pub metrics: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_concurrent: 4,
            grace: Duration::from_secs(30),
            rescan: Duration::from_secs(2),
            report: Duration::from_secs(15),
            metrics: None,
        }
    }
}

/// The longest the daemon sleeps between looks at the clock, so a machine
/// that slept (and a changed wall clock) is noticed soon after.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// The loop list is read in full at least this often, even when the loops
/// directory's mtime says nothing changed, unless the directory is watched
/// (its watch tells of every loop that comes or goes).
const FULL_LISTING: Duration = Duration::from_secs(30);

/// At most about this many configs without a watch are looked at (one
/// `stat` each) per rescan: a root with more has them looked at in turns,
/// each once every few rescans, so an idle daemon's cost stays flat as
/// loops grow. A watched config is looked at when its watch tells of a
/// change.
const CONFIGS_PER_SCAN: usize = 1000;

/// A tick that starts later than this after its due time counts as late.
const LATE: Duration = Duration::from_secs(1);

/// Firings due within this of the next one start at the same wake-up of
/// the dispatcher: a tick may start up to this late, and a daemon firing
/// hundreds of ticks a second wakes a fraction as often.
const GATHER: Duration = Duration::from_millis(10);

/// The same for claimed firings (a store daemons share): a daemon asks
/// for due firings this long after the next falls due, so one claim takes
/// those due together. Every daemon sharing the store wakes for the same
/// next firing; asking at once, each would pay a claim for every firing
/// and all but one come back empty.
const CLAIM_GATHER: Duration = Duration::from_millis(50);

/// Runs the scheduler until a stop signal; returns once every tick it
/// started has ended. The wiring: a thread for signals, the workers, a
/// thread for a shared store's notifications, and the dispatcher on this
/// thread; its [`phase::Phase`] is the daemon's life, and when it returns
/// the hand-off closes, which ends every other thread.
pub(crate) fn run(root: &Root, opts: &Options) -> Result<()> {
    let max = opts.max_concurrent.max(1);
    let (handoff, inbox) = Handoff::new(max);
    let signals = listen_for_signals(&handoff)?;
    let host = shared_host(root, max);
    let stores = Stores::open(root)?;
    if let Err(e) = stores.keep_bookkeeping() {
        // Made when next needed, as one the server ended is.
        tracing::warn!(
            "cannot keep a connection for the ledger of firings yet: {}",
            crate::error::with_causes(&e)
        );
    }
    let metrics = match &opts.metrics {
        Some(addr) => Some(crate::exposition::listen::Listener::bind(
            addr,
            &root.settings().metrics,
        )?),
        None => None,
    };
    let figures = std::sync::Arc::new(crate::exposition::DaemonFigures::default());
    let stop_metrics = std::sync::atomic::AtomicBool::new(false);
    let presence = Presence::claim(root);
    // A step confined at every tick: the places granted around the root
    // are opened once, not at each tick.
    crate::step::confine::keep_places_open();
    // Webhooks are delivered off the workers, and given a moment at the end.
    let _webhooks = crate::notify::webhook::Queue::start();
    tracing::info!(
        "daemon started on {} (at most {max} ticks at once)",
        root.path().display()
    );
    let result = thread::scope(|scope| {
        let _closing = handoff.closing();
        for i in 0..max {
            let (stores, host, handoff) = (&stores, host.as_ref(), &handoff);
            let name = format!("tick-{i}");
            thread::Builder::new()
                .name(name.clone())
                .spawn_scoped(scope, move || worker(root, stores, host, handoff))
                .map_err(|source| Error::DaemonThread { name, source })?;
        }
        // A store that notifies tells of every change; on one that does
        // not, the dispatcher looks at the few loops it waits on itself.
        if stores.notifies() {
            let (stores, handoff, mut listener) = (&stores, &handoff, stores.watch()?);
            let name = "listen";
            thread::Builder::new()
                .name(name.into())
                .spawn_scoped(scope, move || relay_changes(stores, &mut listener, handoff))
                .map_err(|source| Error::DaemonThread {
                    name: name.into(),
                    source,
                })?;
        }
        if let Some(listener) = &metrics {
            let (stores, figures, stop) = (&stores, &*figures, &stop_metrics);
            if let Some(addr) = listener.local_addr() {
                tracing::info!("answering /metrics on http://{addr}/metrics");
            }
            let name = "metrics";
            thread::Builder::new()
                .name(name.into())
                .spawn_scoped(scope, move || listener.serve(root, stores, figures, stop))
                .map_err(|source| Error::DaemonThread {
                    name: name.into(),
                    source,
                })?;
        }
        // However the dispatcher ends, the listener stops with it.
        let _stop = StopOnDrop(&stop_metrics);
        let mut d = Dispatcher::new(root, &stores, opts, max, presence);
        d.figures = std::sync::Arc::clone(&figures);
        d.run(&handoff, &inbox);
        tracing::info!(
            "{} ticks started, {} of them busy (the loop's lock was held)",
            d.ticks,
            d.busy
        );
        d.presence.release(root);
        d.fatal.map_or(Ok(()), Err)
    });
    signals.close();
    tracing::info!("daemon stopped");
    result
}

/// Sets its flag when dropped: the `/metrics` listener's stop.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One gate host for every tick; if it cannot be built, each tick of a
/// loop with gates builds its own (and reports why that fails).
fn shared_host(root: &Root, max: usize) -> Option<GateHost> {
    match GateHost::resident(Some(root.cache_dir()), max) {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("cannot build the shared gate host: {e}");
            None
        }
    }
}
