//! What the daemon writes in the ledger of firings ([`crate::fires`]):
//! after each firing it filled (a tick, or a loop passed over as inactive
//! or as one its user may not tick), the record of that firing, preceded by the firings the
//! schedule called for since the loop's last record that nobody filled,
//! counted and folded (skipped while the loop's previous tick still ran,
//! missed while no daemon ran, missed because the daemon came too late).

use jiff::Timestamp;

use super::due::When;
use crate::config::Schedule;
use crate::error::Result;
use crate::fires::{Fire, FiredBy, Kind, why};
use crate::tick::TickReport;

/// The firings of a gap counted one by one, at most; a longer gap of a
/// cron schedule is recorded as this many, the detail saying so.
const COUNT_MAX: u64 = 100_000;

/// Why a firing whose tick crashed is recorded as it is.
const CRASHED: &str =
    "its tick died before it ended (killed, or the host went down); the next tick recorded it as crashed";

/// The schedule as a ledger record names it: its cadence and time zone
/// (jitter moves no firing's time).
pub(super) fn schedule_key(s: &Schedule) -> String {
    Schedule {
        jitter: None,
        ..s.clone()
    }
    .describe()
}

/// The firing that a tick started at `started` filled, given the one it
/// was started for (due at `at`): the last that fell due by its start. A
/// firing taken late, after later ones fell due (the daemon was down and
/// another host's claim of it ran out, the host slept, every worker was
/// busy), stands for the last of them, and the others count as missed.
pub(super) fn stands_for(when: &When, at: Timestamp, started: Timestamp) -> Timestamp {
    let mut t = at;
    for _ in 0..COUNT_MAX {
        match when.after(t, t).filter(|n| *n > t && *n <= started) {
            Some(n) => t = n,
            None => break,
        }
    }
    t
}

/// Who writes the records, and since when it runs.
pub(super) struct Writer {
    pub(super) by: String,
    pub(super) since: Timestamp,
}

impl Writer {
    pub(super) fn new(since: Timestamp) -> Writer {
        Writer {
            by: format!("{} pid {}", crate::who::host(), std::process::id()),
            since,
        }
    }

    /// The record of a firing at `at` that a tick filled, as it ended.
    pub(super) fn of_tick(&self, at: Timestamp, schedule: &str, result: &Result<TickReport>) -> Fire {
        Fire::of_tick(at, schedule, &self.by, FiredBy::Daemon, result)
    }

    /// The record of a firing at `at` passed over without a tick: the loop
    /// was found inactive by an earlier one and has not changed since (its
    /// run keeps that tick's word for why).
    pub(super) fn of_inactive(&self, at: Timestamp, schedule: &str) -> Fire {
        let now = crate::clock::now();
        self.fire(
            at,
            schedule,
            Kind::Skipped,
            why::INACTIVE.to_owned(),
            None,
            None,
            now,
        )
    }

    /// The record of a firing at `at` that ran nothing because the
    /// daemon's user may not tick the loop (`detail` says who may).
    pub(super) fn of_refused(&self, at: Timestamp, schedule: &str, detail: String) -> Fire {
        let now = crate::clock::now();
        self.fire(
            at,
            schedule,
            Kind::Skipped,
            why::REFUSED.to_owned(),
            Some(detail),
            None,
            now,
        )
    }

    /// The record of a firing at `at` that tick `tick`, started at
    /// `started`, filled and died running: a firing taken again after its
    /// claim ran out (the tick that takes it is recorded after it).
    pub(super) fn of_crashed(
        &self,
        at: Timestamp,
        schedule: &str,
        (tick, started): (u64, Timestamp),
    ) -> Fire {
        let mut fire = self.fire(
            at,
            schedule,
            Kind::Ran,
            why::CRASHED.to_owned(),
            Some(CRASHED.to_owned()),
            Some(tick),
            crate::clock::now(),
        );
        fire.started = Some(started);
        fire
    }

    #[allow(clippy::too_many_arguments)]
    fn fire(
        &self,
        at: Timestamp,
        schedule: &str,
        kind: Kind,
        why: String,
        detail: Option<String>,
        tick: Option<u64>,
        seen: Timestamp,
    ) -> Fire {
        Fire {
            at,
            until: None,
            count: 1,
            kind,
            why,
            detail,
            tick,
            seen,
            schedule: schedule.to_owned(),
            by: self.by.clone(),
            // A missed firing was fired by nothing.
            fired_by: (kind != Kind::Missed).then_some(FiredBy::Daemon),
            started: None,
        }
    }

    /// The firings `when` called for after `last` and before `next` that
    /// no record accounts for, folded: a firing counts when the one after
    /// it also fell due by `next` (so `next`, late, stands for the last of
    /// them). Those due while `last`'s tick still ran were skipped
    /// (overlap); the one a tick that `crashed` (its number, its start)
    /// filled ran, and crashed; the others missed, before this daemon
    /// started (down) or after (late). None when `last` was of another
    /// schedule.
    pub(super) fn gap(
        &self,
        when: &When,
        schedule: &str,
        last: &Fire,
        next: Timestamp,
        crashed: Option<(u64, Timestamp)>,
    ) -> Vec<Fire> {
        if last.schedule != schedule {
            return Vec::new();
        }
        let mut runs: Vec<Fire> = Vec::new();
        let mut t = last.last_at();
        let mut counted = 0u64;
        let now = crate::clock::now();
        while let Some(due) = when.after(t, t).filter(|d| *d > t) {
            let Some(following) = when.after(due, due).filter(|f| *f > due) else {
                break;
            };
            if following > next {
                break;
            }
            let filled = crashed.filter(|(_, started)| due <= *started && following > *started);
            let (kind, why, detail) = if filled.is_some() {
                (Kind::Ran, why::CRASHED, CRASHED)
            } else if due <= last.seen {
                (
                    Kind::Skipped,
                    why::OVERLAP,
                    "the loop's previous tick was still running",
                )
            } else if due < self.since {
                (Kind::Missed, why::DOWN, "no daemon was running")
            } else {
                (
                    Kind::Missed,
                    why::LATE,
                    "the daemon came to it only after a later firing was due (the host asleep, or every worker busy)",
                )
            };
            let record = self.fire(
                due,
                schedule,
                kind,
                why.to_owned(),
                Some(detail.to_owned()),
                filled.map(|(tick, _)| tick),
                now,
            );
            match runs.last_mut() {
                Some(run) if run.folds(&record) => run.absorb(record),
                _ => runs.push(record),
            }
            counted += 1;
            if counted >= COUNT_MAX {
                if let Some(run) = runs.last_mut() {
                    run.detail = Some(format!("{detail}; counted up to {COUNT_MAX}"));
                }
                break;
            }
            t = due;
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn writer(since: &str) -> Writer {
        Writer {
            by: "h pid 1".into(),
            since: ts(since),
        }
    }

    fn last(at: &str, seen: &str, schedule: &str) -> Fire {
        Fire {
            tick: Some(1),
            seen: ts(seen),
            schedule: schedule.into(),
            ..Fire::sample(ts(at), Kind::Ran, "ran")
        }
    }

    fn shape(runs: &[Fire]) -> Vec<(&str, u64, String, String)> {
        runs.iter()
            .map(|r| (r.why.as_str(), r.count, r.at.to_string(), r.last_at().to_string()))
            .collect()
    }

    const MINUTE: &str = "every = \"1m\"";

    #[test]
    fn the_next_firing_on_time_leaves_no_gap() {
        let w = writer("2026-01-01T00:00:00Z");
        let every = When::Every(Duration::from_mins(1));
        let l = last("2026-01-01T12:00:00Z", "2026-01-01T12:00:05Z", MINUTE);
        assert!(
            w.gap(&every, MINUTE, &l, ts("2026-01-01T12:01:00Z"), None)
                .is_empty()
        );
        // A little late (the tick started after its firing): still none.
        assert!(
            w.gap(&every, MINUTE, &l, ts("2026-01-01T12:01:30Z"), None)
                .is_empty()
        );
    }

    #[test]
    fn the_firing_a_crashed_tick_filled_ran_and_crashed_the_rest_were_missed() {
        // Ran at 12:00; tick 8 started at 12:01:02 and died with the
        // daemon, which came back at 12:05:20.
        let w = writer("2026-01-01T12:05:20Z");
        let every = When::Every(Duration::from_mins(1));
        let l = last("2026-01-01T12:00:00Z", "2026-01-01T12:00:05Z", MINUTE);
        let crashed = Some((8, ts("2026-01-01T12:01:02Z")));
        let runs = w.gap(&every, MINUTE, &l, ts("2026-01-01T12:05:20Z"), crashed);
        assert_eq!(
            shape(&runs),
            [
                (
                    "crashed",
                    1,
                    "2026-01-01T12:01:00Z".into(),
                    "2026-01-01T12:01:00Z".into()
                ),
                (
                    "down",
                    3,
                    "2026-01-01T12:02:00Z".into(),
                    "2026-01-01T12:04:00Z".into()
                )
            ]
        );
        assert_eq!((runs[0].kind, runs[0].tick), (Kind::Ran, Some(8)));
    }

    #[test]
    fn a_daemon_down_for_ten_minutes_missed_nine_firings_and_caught_up_once() {
        // Ran at 12:00; the daemon stopped and came back at 12:10:20.
        let w = writer("2026-01-01T12:10:20Z");
        let every = When::Every(Duration::from_mins(1));
        let l = last("2026-01-01T12:00:00Z", "2026-01-01T12:00:05Z", MINUTE);
        let runs = w.gap(&every, MINUTE, &l, ts("2026-01-01T12:10:20Z"), None);
        assert_eq!(
            shape(&runs),
            [(
                "down",
                9,
                "2026-01-01T12:01:00Z".into(),
                "2026-01-01T12:09:00Z".into()
            )],
            "12:10 is the one the catch-up stands for"
        );
        assert_eq!(runs[0].kind, Kind::Missed);
    }

    #[test]
    fn a_long_tick_skips_what_it_overlapped_and_a_late_daemon_misses_the_rest() {
        // The 12:00 tick ran to 12:03:30; the daemon then came to the loop
        // only at 12:06:10 (every worker busy).
        let w = writer("2026-01-01T00:00:00Z");
        let every = When::Every(Duration::from_mins(1));
        let l = last("2026-01-01T12:00:00Z", "2026-01-01T12:03:30Z", MINUTE);
        let runs = w.gap(&every, MINUTE, &l, ts("2026-01-01T12:06:10Z"), None);
        assert_eq!(
            shape(&runs),
            [
                (
                    "overlap",
                    3,
                    "2026-01-01T12:01:00Z".into(),
                    "2026-01-01T12:03:00Z".into()
                ),
                (
                    "late",
                    2,
                    "2026-01-01T12:04:00Z".into(),
                    "2026-01-01T12:05:00Z".into()
                ),
            ]
        );
        assert_eq!((runs[0].kind, runs[1].kind), (Kind::Skipped, Kind::Missed));
    }

    #[test]
    fn cron_counts_its_own_occurrences() {
        let hourly = "cron = \"0 * * * *\"";
        let when = When::of(&Schedule {
            cadence: crate::config::Cadence::Cron("0 * * * *".into()),
            jitter: None,
            timezone: Some("UTC".into()),
        })
        .unwrap();
        let w = writer("2026-01-01T13:20:00Z");
        let l = last("2026-01-01T10:00:00Z", "2026-01-01T10:01:00Z", hourly);
        let runs = w.gap(&when, hourly, &l, ts("2026-01-01T13:20:00Z"), None);
        assert_eq!(
            shape(&runs),
            [(
                "down",
                2,
                "2026-01-01T11:00:00Z".into(),
                "2026-01-01T12:00:00Z".into()
            )]
        );
        assert!(
            w.gap(&when, hourly, &l, ts("2026-01-01T11:00:00Z"), None)
                .is_empty()
        );
    }

    #[test]
    fn a_firing_taken_late_stands_for_the_last_one_due_by_its_start() {
        let every = When::Every(Duration::from_mins(1));
        let at = ts("2026-01-01T12:01:00Z");
        assert_eq!(stands_for(&every, at, ts("2026-01-01T12:01:02Z")), at);
        let late = stands_for(&every, at, ts("2026-01-01T12:30:05Z"));
        assert_eq!(late, ts("2026-01-01T12:30:00Z"));
        // The host slept from 12:00:30 to 12:30: the firings before the one
        // the tick stood for were missed, late.
        let w = writer("2026-01-01T00:00:00Z");
        let l = last("2026-01-01T12:00:00Z", "2026-01-01T12:00:05Z", MINUTE);
        assert_eq!(
            shape(&w.gap(&every, MINUTE, &l, late, None)),
            [(
                "late",
                29,
                "2026-01-01T12:01:00Z".into(),
                "2026-01-01T12:29:00Z".into()
            )]
        );
    }

    #[test]
    fn a_changed_schedule_counts_nothing() {
        let w = writer("2026-01-01T12:10:00Z");
        let every = When::Every(Duration::from_mins(1));
        let l = last("2026-01-01T12:00:00Z", "2026-01-01T12:00:05Z", "every = \"1h\"");
        assert!(
            w.gap(&every, MINUTE, &l, ts("2026-01-01T13:00:00Z"), None)
                .is_empty()
        );
    }

    #[test]
    fn a_gap_of_years_is_counted_to_a_bound() {
        let w = writer("2030-01-01T00:00:00Z");
        let every = When::Every(Duration::from_secs(1));
        let l = last("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "every = \"1s\"");
        let runs = w.gap(&every, "every = \"1s\"", &l, ts("2030-01-01T00:00:00Z"), None);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].count, COUNT_MAX);
        assert!(runs[0].detail.as_deref().unwrap().contains("counted up to"));
    }
}
