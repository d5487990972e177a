//! When the daemon next fires a loop: from the loop's last tick when the
//! daemon first sees it (at most one catch-up tick, however long it was
//! down), and from the previous firing after that. Pure, apart from the
//! random jitter added to each firing.

use std::str::FromStr;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::config::{Cadence, Schedule};

/// A loop's cadence, ready to compute firings.
#[derive(Debug, Clone)]
pub enum When {
    Every(Duration),
    Cron(Box<croner::Cron>),
}

impl When {
    /// The cadence of `s`; an expression croner cannot read is refused.
    pub fn of(s: &Schedule) -> Result<When, String> {
        match &s.cadence {
            Cadence::Every(d) => Ok(When::Every(d.0)),
            Cadence::Cron(expr) => croner::Cron::from_str(expr)
                .map(|c| When::Cron(Box::new(c)))
                .map_err(|e| format!("cron = {expr:?}: {e}")),
        }
    }

    /// The first occurrence of a cron expression strictly after `t`, in the
    /// local time zone; `None` when there is none.
    fn next_cron(cron: &croner::Cron, t: Timestamp) -> Option<Timestamp> {
        let t02 = jiff02::Timestamp::from_second(t.as_second()).ok()?;
        let zoned = t02.to_zoned(jiff02::tz::TimeZone::system());
        let next = cron.find_next_occurrence(&zoned, false).ok()?;
        Timestamp::from_second(next.timestamp().as_second()).ok()
    }

    /// When a loop first seen now should fire, given when its last tick
    /// started. A missed run (or several) gives one firing now, never a
    /// burst; a loop that never ticked fires now (`every`) or at the next
    /// occurrence (`cron`).
    pub fn first(&self, last: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
        match (self, last) {
            (When::Every(_), None) => Some(now),
            (When::Every(d), Some(l)) => Some(add(l, *d).max(now)),
            (When::Cron(c), None) => Self::next_cron(c, now),
            (When::Cron(c), Some(l)) => Self::next_cron(c, l).map(|n| n.max(now)),
        }
    }

    /// When to fire again after a firing at `fired` that ended at `now`:
    /// `every` counts from the firing (at once if that has passed), `cron`
    /// takes the next occurrence after now, so a long tick never queues up
    /// the runs it overlapped.
    pub fn after(&self, fired: Timestamp, now: Timestamp) -> Option<Timestamp> {
        match self {
            When::Every(d) => Some(add(fired, *d).max(now)),
            When::Cron(c) => Self::next_cron(c, now.max(fired)),
        }
    }
}

impl When {
    /// The time between two firings around `now`: the interval, or for a
    /// cron expression the time to its next occurrence (a minute if none).
    pub fn period(&self, now: Timestamp) -> Duration {
        match self {
            When::Every(d) => *d,
            When::Cron(c) => Self::next_cron(c, now)
                .and_then(|n| Duration::try_from(n.duration_since(now)).ok())
                .unwrap_or(Duration::from_secs(60)),
        }
    }

    /// `due` brought back within reach when the wall clock stepped back: an
    /// `every` loop is never due further off than its cadence plus its
    /// jitter. (A cron occurrence is where it is.)
    pub fn clamp(&self, due: Timestamp, now: Timestamp, jitter: Option<Duration>) -> Timestamp {
        match self {
            When::Every(d) => {
                let reach = add(now, *d + jitter.unwrap_or_default());
                if due > reach { add(now, *d) } else { due }
            }
            When::Cron(_) => due,
        }
    }
}

/// When a daemon that sees `s` now fires it next, given when its last
/// tick started (before jitter, and before a daemon spreads loops found due
/// together); `None` when the cadence never fires again or is invalid.
pub fn next_due(s: &Schedule, last_started: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
    When::of(s).ok()?.first(last_started, now)
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `t` pushed back by a random part of `jitter` (up to all of it).
pub fn jittered(t: Timestamp, jitter: Option<Duration>) -> Timestamp {
    match jitter {
        Some(j) if !j.is_zero() => {
            let millis = u64::try_from(j.as_millis()).unwrap_or(u64::MAX);
            add(t, Duration::from_millis(fastrand::u64(0..=millis)))
        }
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn every_catches_up_once_and_never_bursts() {
        let w = When::Every(Duration::from_secs(600));
        let now = ts("2026-01-01T12:00:00Z");
        // Never ticked: now.
        assert_eq!(w.first(None, now), Some(now));
        // Ticked a day ago: one tick now, then ten minutes after it.
        assert_eq!(w.first(Some(ts("2025-12-31T12:00:00Z")), now), Some(now));
        assert_eq!(w.after(now, now), Some(ts("2026-01-01T12:10:00Z")));
        // Ticked five minutes ago: the rest of the cadence.
        assert_eq!(
            w.first(Some(ts("2026-01-01T11:55:00Z")), now),
            Some(ts("2026-01-01T12:05:00Z"))
        );
        // A tick longer than the cadence: again at once, once.
        assert_eq!(
            w.after(now, ts("2026-01-01T12:30:00Z")),
            Some(ts("2026-01-01T12:30:00Z"))
        );
    }

    #[test]
    fn cron_catches_up_once() {
        let w = When::of(&Schedule {
            cadence: Cadence::Cron("*/15 * * * *".into()),
            jitter: None,
        })
        .unwrap();
        let now = ts("2026-01-01T12:07:00Z");
        let due = w.first(None, now).unwrap();
        assert!(due > now && due.duration_since(now) <= SignedDuration::from_mins(15));
        // Missed many runs while down: one now.
        assert_eq!(w.first(Some(ts("2025-12-01T00:00:00Z")), now), Some(now));
        let next = w.after(now, now).unwrap();
        assert!(next > now && next.duration_since(now) <= SignedDuration::from_mins(15));
    }

    #[test]
    fn a_clock_stepped_back_does_not_postpone_an_every_loop() {
        let w = When::Every(Duration::from_secs(60));
        let now = ts("2026-01-01T12:00:00Z");
        let far = ts("2026-01-01T13:00:30Z");
        assert_eq!(w.clamp(far, now, None), ts("2026-01-01T12:01:00Z"));
        let near = ts("2026-01-01T12:01:20Z");
        assert_eq!(w.clamp(near, now, Some(Duration::from_secs(30))), near);
    }

    #[test]
    fn jitter_delays_within_its_bound() {
        let t = ts("2026-01-01T00:00:00Z");
        for _ in 0..100 {
            let j = jittered(t, Some(Duration::from_secs(30)));
            assert!(j >= t && j.duration_since(t) <= SignedDuration::from_secs(30));
        }
        assert_eq!(jittered(t, None), t);
    }

    #[test]
    fn cron_extensions_the_daemon_reads() {
        let s = |c: &str| Schedule {
            cadence: Cadence::Cron(c.into()),
            jitter: None,
        };
        assert!(When::of(&s("0 0 L * *")).is_ok());
        assert!(When::of(&s("0 0 32 * *")).is_err());
    }
}
