//! When the daemon next fires a loop: from the loop's last tick when the
//! daemon first sees it (at most one catch-up tick, however long it was
//! down), and from the previous firing after that. Pure, apart from the
//! random jitter added to each firing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::config::{Cadence, Schedule};

/// A loop's cadence, ready to compute firings.
#[derive(Debug, Clone)]
pub(crate) enum When {
    Every(Duration),
    /// The expression and the zone its wall-clock times are read in,
    /// shared by every loop of the same expression and zone.
    Cron(Arc<Parsed>),
}

/// The parsed cron expressions in use, by expression and zone name: a
/// parsed expression holds several KiB (a byte for each year it may name,
/// among others), and a root's loops mostly share a few expressions, so
/// 50,000 loops hold a handful, not 50,000.
static CRONS: Mutex<Option<Crons>> = Mutex::new(None);

/// Each expression in use, by its text and its zone's name.
type Crons = HashMap<(String, String), Weak<Parsed>>;

/// A cron expression parsed, with the zone it is read in.
type Parsed = (croner::Cron, TimeZone);

impl When {
    /// The cadence of `s` (see [`crate::cron`]); extensions croner reads
    /// (`L`, `W`, `#`) are the daemon's alone.
    pub(crate) fn of(s: &Schedule) -> Result<When, String> {
        match &s.cadence {
            Cadence::Every(d) => Ok(When::Every(d.0)),
            Cadence::Cron(expr) => {
                let tz = crate::config::time_zone(s.timezone.as_deref())?;
                // A zone without a name (a POSIX rule in TZ) is not shared.
                let Some(zone) = tz.iana_name().map(str::to_owned) else {
                    return Ok(When::Cron(Arc::new((parse(expr)?, tz))));
                };
                let key = (expr.clone(), zone);
                let mut crons = CRONS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let crons = crons.get_or_insert_with(HashMap::new);
                if let Some(shared) = crons.get(&key).and_then(Weak::upgrade) {
                    return Ok(When::Cron(shared));
                }
                let cron = Arc::new((parse(expr)?, tz));
                // Expressions no loop uses any more are dropped as the map grows.
                if crons.len() >= 64 && crons.len().is_power_of_two() {
                    crons.retain(|_, w| w.strong_count() > 0);
                }
                crons.insert(key, Arc::downgrade(&cron));
                Ok(When::Cron(cron))
            }
        }
    }

    fn next_cron(cron: &(croner::Cron, TimeZone), t: Timestamp) -> Option<Timestamp> {
        crate::cron::next_after(&cron.0, &cron.1, t)
    }

    /// When a loop first seen now should fire, given when its last tick
    /// started. A missed run (or several) gives one firing now, never a
    /// burst; a loop that never ticked fires now (`every`) or at the next
    /// occurrence (`cron`).
    pub(crate) fn first(&self, last: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
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
    pub(crate) fn after(&self, fired: Timestamp, now: Timestamp) -> Option<Timestamp> {
        match self {
            When::Every(d) => Some(add(fired, *d).max(now)),
            When::Cron(c) => Self::next_cron(c, now.max(fired)),
        }
    }
}

fn parse(expr: &str) -> Result<croner::Cron, String> {
    crate::cron::parse(expr).map_err(|why| format!("cron = {expr:?}: {why}"))
}

impl When {
    /// The time between two firings around `now`: the interval, or for a
    /// cron expression the time to its next occurrence (a minute if none).
    pub(crate) fn period(&self, now: Timestamp) -> Duration {
        match self {
            When::Every(d) => *d,
            When::Cron(c) => Self::next_cron(c, now)
                .and_then(|n| Duration::try_from(n.duration_since(now)).ok())
                .unwrap_or(Duration::from_mins(1)),
        }
    }

    /// `due` brought back within reach when the wall clock stepped back: an
    /// `every` loop is never due further off than its cadence plus its
    /// jitter. (A cron occurrence is where it is.)
    pub(crate) fn clamp(&self, due: Timestamp, now: Timestamp, jitter: Option<Duration>) -> Timestamp {
        match self {
            When::Every(d) => {
                let reach = add(now, d.saturating_add(jitter.unwrap_or_default()));
                if due > reach { add(now, *d) } else { due }
            }
            When::Cron(_) => due,
        }
    }
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `t` pushed back by a random part of `jitter` (up to all of it).
pub(super) fn jittered(t: Timestamp, jitter: Option<Duration>) -> Timestamp {
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

    fn cron(expr: &str, zone: &str) -> Arc<Parsed> {
        let s = Schedule {
            cadence: Cadence::Cron(expr.to_owned()),
            jitter: None,
            timezone: Some(zone.to_owned()),
        };
        match When::of(&s).unwrap() {
            When::Cron(c) => c,
            When::Every(_) => unreachable!(),
        }
    }

    /// Loops of one expression in one zone share one parse; another
    /// expression or zone has its own, and one no loop holds is parsed
    /// again when next asked for.
    #[test]
    fn a_cron_expression_is_parsed_once_for_every_loop_that_shares_it() {
        let a = cron("7 3 * * 1", "Europe/Paris");
        let b = cron("7 3 * * 1", "Europe/Paris");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &cron("7 3 * * 1", "Asia/Tokyo")));
        assert!(!Arc::ptr_eq(&a, &cron("8 3 * * 1", "Europe/Paris")));
        let t = ts("2026-12-04T00:00:00Z");
        assert_eq!(
            When::Cron(Arc::clone(&a)).after(t, t),
            Some(ts("2026-12-07T02:07:00Z"))
        );
        drop((a, b));
        let again = cron("7 3 * * 1", "Europe/Paris");
        assert_eq!(Arc::strong_count(&again), 1);
    }

    /// A clock at the last time jiff represents: every computation gives a
    /// time or none, never a panic.
    #[test]
    fn firings_at_the_end_of_time_are_the_end_or_none() {
        let end = Timestamp::MAX;
        let near = end - SignedDuration::from_mins(1);
        let every = When::Every(Duration::from_hours(1));
        for now in [near, end] {
            assert_eq!(every.first(Some(now), now), Some(end));
            assert_eq!(every.after(now, now), Some(end));
            assert_eq!(every.clamp(end, now, Some(Duration::MAX)), end);
            assert!(every.period(now) > Duration::ZERO);
            assert!(jittered(now, Some(Duration::MAX)) >= now);
        }
        let cron = When::of(&Schedule {
            cadence: Cadence::Cron("0 0 * * *".into()),
            jitter: None,
            timezone: Some("Pacific/Kiritimati".into()),
        })
        .unwrap();
        assert_eq!(cron.first(None, near), None);
        assert_eq!(cron.after(near, end), None);
        assert_eq!(cron.period(end), Duration::from_mins(1));
    }

    #[test]
    fn every_catches_up_once_and_never_bursts() {
        let w = When::Every(Duration::from_mins(10));
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
            timezone: None,
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
        let w = When::Every(Duration::from_mins(1));
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
            timezone: None,
        };
        assert!(When::of(&s("0 0 L * *")).is_ok());
        assert!(When::of(&s("0 0 32 * *")).is_err());
    }

    fn berlin(expr: &str) -> When {
        When::of(&Schedule {
            cadence: Cadence::Cron(expr.into()),
            jitter: None,
            timezone: Some("Europe/Berlin".into()),
        })
        .unwrap()
    }

    #[test]
    fn cron_reads_wall_clock_times_in_its_time_zone() {
        // 09:30 in Berlin is 08:30 UTC in winter, 07:30 UTC in summer.
        let w = berlin("30 9 * * *");
        let winter = ts("2026-01-15T12:00:00Z");
        assert_eq!(w.after(winter, winter), Some(ts("2026-01-16T08:30:00Z")));
        let summer = ts("2026-07-15T12:00:00Z");
        assert_eq!(w.after(summer, summer), Some(ts("2026-07-16T07:30:00Z")));
    }

    #[test]
    fn a_time_in_the_skipped_hour_runs_once_after_the_change() {
        // 2026-03-29: Berlin's clocks go from 02:00 CET to 03:00 CEST.
        let w = berlin("30 2 * * *");
        let before = ts("2026-03-28T12:00:00Z");
        let first = w.after(before, before).unwrap();
        assert_eq!(
            first,
            ts("2026-03-29T01:00:00Z"),
            "03:00 CEST, just after the gap"
        );
        let second = w.after(first, first).unwrap();
        assert_eq!(second, ts("2026-03-30T00:30:00Z"), "then 02:30 CEST the next day");
    }

    #[test]
    fn a_repeated_hour_runs_once() {
        // 2026-10-25: Berlin's clocks go from 03:00 CEST back to 02:00 CET.
        let fixed = berlin("30 2 * * *");
        let before = ts("2026-10-24T12:00:00Z");
        let first = fixed.after(before, before).unwrap();
        assert_eq!(first, ts("2026-10-25T00:30:00Z"), "02:30 CEST");
        let next = fixed.after(first, first).unwrap();
        assert_eq!(next, ts("2026-10-26T01:30:00Z"), "not 02:30 CET the same night");
        // Every quarter hour: 02:00 to 02:45 run once, not twice.
        let quarter = berlin("*/15 * * * *");
        let mut t = ts("2026-10-24T23:50:00Z"); // 01:50 CEST
        let mut fired = Vec::new();
        while t < ts("2026-10-25T02:10:00Z") {
            t = quarter.after(t, t).unwrap();
            fired.push(t);
        }
        let wall: Vec<String> = fired
            .iter()
            .map(|t| t.in_tz("Europe/Berlin").unwrap().strftime("%H:%M").to_string())
            .collect();
        assert_eq!(
            wall,
            ["02:00", "02:15", "02:30", "02:45", "03:00", "03:15"],
            "{fired:?}"
        );
    }

    fn check(s: &Schedule) -> Result<(), String> {
        s.check()
    }

    #[test]
    fn schedules_that_cannot_run_as_written_are_refused() {
        let cron = |c: &str, jitter: Option<u64>, tz: Option<&str>| Schedule {
            cadence: Cadence::Cron(c.into()),
            jitter: jitter.map(|s| crate::config::Dur(Duration::from_secs(s))),
            timezone: tz.map(String::from),
        };
        let e = check(&cron("61 * * * *", None, None)).unwrap_err();
        assert!(e.contains("minute field \"61\": "), "{e}");
        let e = check(&cron("*/0 * * * *", None, None)).unwrap_err();
        assert!(e.contains("minute field \"*/0\": "), "{e}");
        let e = check(&cron("0 0 31 2 *", None, None)).unwrap_err();
        assert!(e.contains("never fires"), "{e}");
        assert!(check(&cron("0 0 29 2 *", None, None)).is_ok(), "every leap year");
        let e = check(&cron("*/5 * * * *", Some(300), None)).unwrap_err();
        assert!(e.contains("shorter than the cadence"), "{e}");
        assert!(check(&cron("*/5 * * * *", Some(299), None)).is_ok());
        let e = check(&cron("0 9 * * *", None, Some("Mars/Olympus"))).unwrap_err();
        assert!(e.contains("Mars/Olympus"), "{e}");
        let every = |e: u64, j: u64| Schedule {
            cadence: Cadence::Every(crate::config::Dur(Duration::from_secs(e))),
            jitter: Some(crate::config::Dur(Duration::from_secs(j))),
            timezone: None,
        };
        assert!(check(&every(1, 10)).unwrap_err().contains("every = \"1s\""));
        assert!(check(&every(10, 10)).is_err());
        assert!(check(&every(10, 9)).is_ok());
        let tz_on_every = Schedule {
            timezone: Some("Europe/Berlin".into()),
            ..every(10, 1)
        };
        assert!(check(&tz_on_every).unwrap_err().contains("cron"));
    }
}
