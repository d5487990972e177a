//! Whether a daemon serves a root, and how far behind it is. The daemon
//! holds `<root>/daemon.lock` for its life and rewrites `<root>/daemon.json`
//! (atomically) a few times a minute; `daemon --status` and `status` read
//! them. A second daemon on the root finds the lock held, says so, and
//! takes over the record when the first one goes.

use std::path::PathBuf;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lock::{self, RootLock};
use crate::root::Root;
use crate::who;

const RECORD: &str = "daemon.json";
const LOCK: &str = "daemon.lock";

/// What a daemon last said about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DaemonRecord {
    pub pid: u32,
    pub host: String,
    pub since: Timestamp,
    /// When this record was written.
    pub updated: Timestamp,
    pub max_concurrent: usize,
    /// Loops known, and those with a schedule the daemon fires.
    pub loops: usize,
    pub scheduled: usize,
    /// Ticks running when the record was written.
    pub running: usize,
    /// Ticks started since the daemon started.
    pub ticks: u64,
    /// Of those, the ones that found the loop's lock held and ran nothing
    /// (`busy`): a command or another host's tick had it.
    #[serde(default)]
    pub busy: u64,
    /// Scheduled firings already due but not yet started.
    pub overdue: usize,
    /// How late the most overdue of those is, in milliseconds.
    pub behind_ms: u64,
    /// Ticks started in the last `window_secs` seconds, and how late.
    pub window_secs: u64,
    pub window_ticks: u64,
    pub lag_p50_ms: u64,
    pub lag_p99_ms: u64,
    pub lag_max_ms: u64,
}

/// A daemon serving a root, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DaemonStatus {
    /// Some process holds the daemon lock (when the record is from another
    /// host, its freshness is all there is to go by).
    pub serving: bool,
    #[serde(flatten)]
    pub record: DaemonRecord,
}

fn record_path(root: &Root) -> PathBuf {
    root.path().join(RECORD)
}

fn lock_path(root: &Root) -> PathBuf {
    root.path().join(LOCK)
}

/// The daemon serving `root`, if any: `None` when no daemon ever wrote a
/// record, or the last one stopped. A record whose daemon died is returned
/// with `serving` false.
pub(crate) fn daemon_status(root: &Root) -> Result<Option<DaemonStatus>> {
    let path = record_path(root);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading", &path)(e)),
    };
    // A torn or foreign record says nothing useful: treat it as absent.
    let Ok(record) = serde_json::from_slice::<DaemonRecord>(&text) else {
        return Ok(None);
    };
    let serving = lock::is_held(&lock_path(root));
    Ok(Some(DaemonStatus { serving, record }))
}

impl DaemonStatus {
    /// One line for people: who serves the root and how far behind it is.
    pub(crate) fn describe(&self) -> String {
        let r = &self.record;
        let since = crate::clock::local(r.since);
        let age = crate::clock::now().duration_since(r.updated).as_secs().max(0);
        if !self.serving {
            return format!(
                "no daemon serves this root (the last one, pid {} on {}, stopped without a word; \
                 its record is {age}s old)",
                r.pid, r.host
            );
        }
        let behind = match (r.overdue, r.behind_ms) {
            (0, _) => "keeping up".to_owned(),
            (n, ms) => format!("{n} firings overdue, the oldest by {}", human_ms(ms)),
        };
        format!(
            "daemon pid {} on {} since {since}: {} loops scheduled, {}/{} ticks running, {behind}; \
             last {}s: {} ticks, lag p50 {} p99 {} (record {age}s old)",
            r.pid,
            r.host,
            r.scheduled,
            r.running,
            r.max_concurrent,
            r.window_secs,
            r.window_ticks,
            human_ms(r.lag_p50_ms),
            human_ms(r.lag_p99_ms),
        )
    }
}

fn human_ms(ms: u64) -> String {
    crate::duration::format(std::time::Duration::from_millis(ms))
}

/// This daemon's hold on the root.
pub(crate) struct Presence {
    lock: Option<RootLock>,
    pub since: Timestamp,
}

impl Presence {
    /// Takes the root's daemon lock, or says who holds it.
    pub(crate) fn claim(root: &Root) -> Presence {
        let mut p = Presence {
            lock: None,
            since: crate::clock::now(),
        };
        if !p.try_lock(root)
            && let Ok(Some(other)) = daemon_status(root)
        {
            let r = other.record;
            tracing::warn!(
                "another daemon serves this root: pid {} on {} since {}; both fire ticks, \
                 and a loop's lock keeps each tick to one of them",
                r.pid,
                r.host,
                crate::clock::local(r.since)
            );
        }
        p
    }

    fn try_lock(&mut self, root: &Root) -> bool {
        if self.lock.is_none() {
            match lock::try_hold(&lock_path(root)) {
                Ok(l) => self.lock = l,
                Err(e) => tracing::warn!("{e}"),
            }
        }
        self.lock.is_some()
    }

    /// A record of this daemon, its figures still zero.
    pub(crate) fn record(&self, max_concurrent: usize) -> DaemonRecord {
        DaemonRecord {
            pid: std::process::id(),
            host: who::host(),
            since: self.since,
            updated: crate::clock::now(),
            max_concurrent,
            loops: 0,
            scheduled: 0,
            running: 0,
            ticks: 0,
            busy: 0,
            overdue: 0,
            behind_ms: 0,
            window_secs: 0,
            window_ticks: 0,
            lag_p50_ms: 0,
            lag_p99_ms: 0,
            lag_max_ms: 0,
        }
    }

    /// Writes `record` when this daemon holds the lock (taking it if the
    /// daemon that held it has gone). Best effort.
    pub(crate) fn publish(&mut self, root: &Root, record: &DaemonRecord) {
        if !self.try_lock(root) {
            return;
        }
        let Ok(mut bytes) = serde_json::to_vec_pretty(record) else {
            return;
        };
        bytes.push(b'\n');
        if let Err(e) = crate::fsx::write_file(root.path(), &record_path(root), &bytes) {
            tracing::warn!("cannot write the daemon record: {e}");
        }
    }

    /// The daemon stops: its record goes, then its lock.
    pub(crate) fn release(mut self, root: &Root) {
        if let Some(held) = self.lock.take() {
            let _ = std::fs::remove_file(record_path(root));
            drop(held);
        }
    }
}
