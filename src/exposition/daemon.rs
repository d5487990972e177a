//! A daemon's own figures for `/metrics`: the dispatcher sets them as it
//! serves (loops served, firings queued, ticks running and started, busy
//! skips) and times each claim on a shared store; the daemon's listener
//! reads them at scrape time. They are this process's, not the team's.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::figures::Hist;

/// The upper bounds of the claim duration histogram: 1 ms to 10 s.
pub(crate) const CLAIM_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// What the dispatcher publishes, shared with the listener.
#[derive(Debug, Default)]
pub(crate) struct DaemonFigures {
    loops_served: AtomicU64,
    queue_depth: AtomicU64,
    overdue: AtomicU64,
    running: AtomicU64,
    ticks_started: AtomicU64,
    busy_skips: AtomicU64,
    claims: Mutex<Option<Hist>>,
}

/// The figures as one scrape reads them.
#[derive(Debug, Clone)]
pub(crate) struct DaemonRead {
    pub loops_served: u64,
    pub queue_depth: u64,
    pub overdue: u64,
    pub running: u64,
    pub ticks_started: u64,
    pub busy_skips: u64,
    /// None when the daemon claims nothing (a store it alone serves).
    pub claims: Option<Hist>,
}

impl DaemonFigures {
    /// The dispatcher's counts after a round: ticks running, started,
    /// and found busy.
    pub(crate) fn set_ticks(&self, running: usize, ticks: u64, busy: u64) {
        self.running.store(running as u64, Ordering::Relaxed);
        self.ticks_started.store(ticks, Ordering::Relaxed);
        self.busy_skips.store(busy, Ordering::Relaxed);
    }

    /// The dispatcher's counts at a report: loops with a schedule, firings
    /// queued, and those of them due already.
    pub(crate) fn set_queue(&self, loops_served: usize, queue_depth: usize, overdue: usize) {
        self.loops_served.store(loops_served as u64, Ordering::Relaxed);
        self.queue_depth.store(queue_depth as u64, Ordering::Relaxed);
        self.overdue.store(overdue as u64, Ordering::Relaxed);
    }

    /// How long one claim of due firings took the shared store.
    pub(crate) fn claimed_in(&self, took: Duration) {
        let mut claims = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        claims
            .get_or_insert_with(|| Hist::new(CLAIM_BUCKETS))
            .observe(took.as_secs_f64());
    }

    pub(crate) fn read(&self) -> DaemonRead {
        DaemonRead {
            loops_served: self.loops_served.load(Ordering::Relaxed),
            queue_depth: self.queue_depth.load(Ordering::Relaxed),
            overdue: self.overdue.load(Ordering::Relaxed),
            running: self.running.load(Ordering::Relaxed),
            ticks_started: self.ticks_started.load(Ordering::Relaxed),
            busy_skips: self.busy_skips.load(Ordering::Relaxed),
            claims: self
                .claims
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }
}
