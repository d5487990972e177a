//! What the daemon says about itself: the lag of the ticks it started,
//! published every few seconds (with a warning, with figures, when ticks
//! start late), and its log line for each tick.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::LATE;
use super::dispatch::Dispatcher;
use super::presence::DaemonRecord;
use crate::error::Result;
use crate::state::Outcome;
use crate::tick::{TickReport, View};

/// How late the ticks of one report window started.
#[derive(Default)]
pub(super) struct Lags {
    pub(super) millis: Vec<u64>,
    pub(super) worst: Option<(u64, Arc<str>)>,
}

impl Lags {
    pub(super) fn add(&mut self, name: &Arc<str>, lag: Duration) {
        let ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX);
        self.millis.push(ms);
        if self.worst.as_ref().is_none_or(|(w, _)| ms > *w) {
            self.worst = Some((ms, Arc::clone(name)));
        }
    }

    pub(super) fn percentile(sorted: &[u64], p: usize) -> u64 {
        match sorted.len() {
            0 => 0,
            n => sorted[((n * p).div_ceil(100)).clamp(1, n) - 1],
        }
    }
}

impl Dispatcher<'_> {
    /// Publishes the record and warns when ticks started late.
    pub(super) fn report(&mut self) {
        let now = crate::clock::now();
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
            .map_or(0, |t| now.duration_since(*t).as_millis().max(0) as u64);
        let mut record: DaemonRecord = self.presence.record(self.max);
        record.loops = self.loops.len();
        record.scheduled = self.loops.values().filter(|e| e.schedule.is_some()).count();
        record.running = self.running.len();
        record.ticks = self.ticks;
        record.busy = self.busy;
        record.overdue = overdue.len();
        record.behind_ms = behind;
        self.figures
            .set_queue(record.scheduled, self.queue.len(), record.overdue);
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

/// The daemon's log line for a tick (the line the `tick` command prints
/// first, without what only a terminal gets): at info level, but at debug
/// when it says nothing new (a firing another daemon took, a loop still
/// waiting for the approval an earlier firing asked for).
pub(super) fn log_tick(name: &str, result: &Result<TickReport>, shared: bool) {
    let r = match result {
        Ok(r) => r,
        // A server out of connection slots is said once, by the
        // dispatcher, which stops starting ticks (src/daemon/refused.rs).
        Err(e) if shared && crate::store::refuses_connections(e) => {
            tracing::debug!("{name}: tick failed: {}", crate::error::with_causes(e));
            return;
        }
        Err(e) => {
            tracing::warn!("{name}: tick failed: {}", crate::error::with_causes(e));
            return;
        }
    };
    let line = r.line(View::Log);
    // With daemons on several hosts, losing a firing to another is normal;
    // a loop still waiting is said once, when the wait starts.
    let routine = (shared && r.outcome == Outcome::Busy)
        || (r.outcome == Outcome::AwaitingApproval && !r.started_waiting);
    if routine {
        tracing::debug!("{line}");
    } else {
        tracing::info!("{line}");
    }
}
