//! The ledger of firings: what became of each firing a loop's schedule
//! called for, as the scheduler that fires it (the daemon, or an OS
//! scheduler's tick) saw it, and what fired each ([`FiredBy`]). A firing **ran** (its tick ran the
//! step), was **skipped** (the loop's lock was held, the loop was paused,
//! halted, completed or awaiting approval, a gate said not now, the tick
//! failed before its step, or the daemon's user is not one of the loop's
//! operators), or was **missed** (no tick was started for it: the daemon
//! was not running, or it came too late, the host asleep or every worker
//! busy). Runs of firings alike (missed, or skipped for one
//! reason) are folded into one record with their count and window, so a
//! loop paused for a month, or a daemon down for a week, is one line.
//!
//! Each store keeps the records in its own place (the file store in the
//! loop's `fires.jsonl`, PostgreSQL in the `fires` table) and folds them
//! the same way ([`fold`]); the daemon writes them, `automaton fires` and
//! `status` read them.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// What became of a firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ran,
    Skipped,
    Missed,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ran => "ran",
            Kind::Skipped => "skipped",
            Kind::Missed => "missed",
        }
    }
}

/// Why a firing was skipped or missed, or how the tick that ran ended.
pub mod why {
    /// Skipped: the loop's lock was held (a command, another host's tick).
    pub(crate) const BUSY: &str = "busy";
    /// Skipped: the loop's own previous tick was still running.
    pub(crate) const OVERLAP: &str = "overlap";
    /// Skipped: the loop was paused, halted, completed or awaiting approval.
    pub(crate) const INACTIVE: &str = "inactive";
    /// Skipped: a gate decided before the step (skip, await, halt, complete).
    pub(crate) const GATE: &str = "gate";
    /// Skipped: the tick failed before its step (a bad config, a broken store).
    pub const ERROR: &str = "error";
    /// Skipped: the daemon's user is not one of the loop's operators, so
    /// the daemon may not tick it (as `automaton tick` run by that user
    /// would be refused).
    pub(crate) const REFUSED: &str = "refused";
    /// Ran: the tick it started died before it ended (its process was
    /// killed, the host went down); a later tick recorded it as crashed.
    pub(crate) const CRASHED: &str = "crashed";
    /// Missed: no daemon was running.
    pub(crate) const DOWN: &str = "down";
    /// Missed: the daemon ran, but came to it only after a later firing was
    /// due (the host slept, or every worker was busy).
    pub(crate) const LATE: &str = "late";
}

/// What fired a tick: the daemon, an OS scheduler whose schedule
/// `automaton schedule install` wrote (each entry says which, with `tick
/// --fired-by`), or a person (a `tick` run by hand, `approve --run`, the
/// console). Kept with the tick in history and in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FiredBy {
    Daemon,
    Cron,
    Systemd,
    Launchd,
    Schtasks,
    #[default]
    Person,
}

impl FiredBy {
    pub fn as_str(self) -> &'static str {
        match self {
            FiredBy::Daemon => "daemon",
            FiredBy::Cron => "cron",
            FiredBy::Systemd => "systemd",
            FiredBy::Launchd => "launchd",
            FiredBy::Schtasks => "schtasks",
            FiredBy::Person => "person",
        }
    }
}

impl From<crate::schedule::Backend> for FiredBy {
    fn from(b: crate::schedule::Backend) -> FiredBy {
        use crate::schedule::Backend;
        match b {
            Backend::Cron => FiredBy::Cron,
            Backend::Systemd => FiredBy::Systemd,
            Backend::Launchd => FiredBy::Launchd,
            Backend::Schtasks => FiredBy::Schtasks,
        }
    }
}

/// One record of the ledger: a firing, or a run of firings alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fire {
    /// When the (first) firing fell due by the schedule, before jitter.
    pub at: Timestamp,
    /// When the last of a run fell due; only when `count` > 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
    /// How many firings the record stands for.
    #[serde(default = "one")]
    pub count: u64,
    pub kind: Kind,
    /// For `ran`, how the tick ended (`ran`, `failed`, `awaiting-approval`,
    /// `halted`, `completed`); otherwise one of [`why`].
    pub why: String,
    /// What a person reads: the gate's reason, who held the lock, the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The tick that filled it (ran, and skipped by a tick).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<u64>,
    /// When the tick that filled it ended, or when the miss was seen (the
    /// last one's, for a run).
    pub seen: Timestamp,
    /// The schedule it was a firing of (`every = "1m"`, `cron = "…"`).
    pub schedule: String,
    /// The daemon that recorded it: `HOST pid N`.
    pub by: String,
    /// What fired it (none in records written before this was kept, all
    /// of them the daemon's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_by: Option<FiredBy>,
    /// When the daemon started the tick that ran it (`ran` only): how late
    /// it started after `at` is the firing's lateness (`/metrics`). None
    /// in records written before it was kept, and for OS schedulers'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Timestamp>,
}

fn one() -> u64 {
    1
}

impl Fire {
    /// The record of a firing at `at` of `schedule` that a tick `fired_by`
    /// filled, as it ended, written by `by` (`HOST pid N`).
    pub(crate) fn of_tick(
        at: Timestamp,
        schedule: &str,
        by: &str,
        fired_by: FiredBy,
        result: &crate::error::Result<crate::tick::TickReport>,
    ) -> Fire {
        use crate::state::Outcome;
        let (kind, why, detail, tick) = match result {
            Ok(r) => match r.outcome {
                Outcome::Busy => (Kind::Skipped, why::BUSY.to_owned(), r.reason.clone(), None),
                Outcome::Inactive => (Kind::Skipped, why::INACTIVE.to_owned(), r.reason.clone(), None),
                Outcome::Ran | Outcome::Failed => (Kind::Ran, r.outcome.to_string(), None, Some(r.tick)),
                _ if r.step.is_some() => (Kind::Ran, r.outcome.to_string(), r.reason.clone(), Some(r.tick)),
                _ => (
                    Kind::Skipped,
                    why::GATE.to_owned(),
                    r.reason.clone(),
                    Some(r.tick),
                ),
            },
            Err(e) => (Kind::Skipped, why::ERROR.to_owned(), Some(e.to_string()), None),
        };
        Fire {
            at,
            until: None,
            count: 1,
            kind,
            why,
            detail,
            tick,
            seen: crate::clock::now(),
            schedule: schedule.to_owned(),
            by: by.to_owned(),
            fired_by: Some(fired_by),
            started: None,
        }
    }

    /// When the last firing it stands for fell due.
    pub(crate) fn last_at(&self) -> Timestamp {
        self.until.unwrap_or(self.at)
    }

    /// Whether `next`, recorded right after `self`, folds into it: both
    /// skipped for one reason, or both missed for one reason, under one
    /// schedule. A firing that ran is never folded.
    pub(crate) fn folds(&self, next: &Fire) -> bool {
        self.kind != Kind::Ran
            && self.kind == next.kind
            && self.why == next.why
            && self.schedule == next.schedule
    }

    /// Folds `next` into `self` ([`Fire::folds`] said it may).
    pub(crate) fn absorb(&mut self, next: Fire) {
        self.count = self.count.saturating_add(next.count);
        self.until = Some(next.last_at());
        self.seen = next.seen;
        if next.detail.is_some() {
            self.detail = next.detail;
        }
        if next.tick.is_some() {
            self.tick = next.tick;
        }
        self.by = next.by;
    }

    /// The record as one line of text: the time, what became of it and
    /// why (a run's count and end), the tick, the detail.
    pub fn line(&self) -> String {
        let mut text = format!("{}  {:<8}", crate::clock::local(self.at), self.kind.as_str());
        match (self.kind, self.tick) {
            (Kind::Ran, Some(t)) if self.why == "ran" => text += &format!(" tick {t}"),
            (Kind::Ran, Some(t)) => text += &format!(" tick {t}, {}", self.why),
            _ => text += &format!(" {}", self.why),
        }
        if self.count > 1 {
            text += &format!(
                ", {} firings to {}",
                self.count,
                crate::clock::local(self.last_at())
            );
        }
        if let (Some(t), false) = (self.tick, self.kind == Kind::Ran) {
            text += &format!(" (tick {t})");
        }
        if let Some(f @ (FiredBy::Cron | FiredBy::Systemd | FiredBy::Launchd | FiredBy::Schtasks)) =
            self.fired_by
        {
            text += &format!(" (fired by {})", f.as_str());
        }
        if let Some(d) = &self.detail {
            text += &format!(": {}", crate::term::safe(d));
        }
        text
    }
}

/// `--since`: a time (`2026-12-01T09:00:00Z`, `2026-12-01 09:00` in the
/// local zone), or how long ago (`2h`, `1d`).
pub(crate) fn parse_since(text: &str) -> Result<Timestamp, String> {
    if let Ok(d) = crate::duration::parse(text) {
        let ago = jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX);
        return Ok(crate::clock::now().checked_sub(ago).unwrap_or(Timestamp::MIN));
    }
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    text.parse::<jiff::civil::DateTime>()
        .and_then(|t| t.to_zoned_datetime(jiff::tz::TimeZone::system()))
        .map(|t| t.timestamp())
        .map_err(|_| {
            String::from("not a time (2026-12-01T09:00:00Z, 2026-12-01 09:00) nor a duration (2h, 1d)")
        })
}

/// `records` with each run of records alike folded into one, oldest first.
pub fn fold(records: impl IntoIterator<Item = Fire>) -> Vec<Fire> {
    let mut out: Vec<Fire> = Vec::new();
    for r in records {
        match out.last_mut() {
            Some(last) if last.folds(&r) => last.absorb(r),
            _ => out.push(r),
        }
    }
    out
}

/// The last run of missed firings in `records` (folded, oldest first).
pub fn last_missed(records: &[Fire]) -> Option<&Fire> {
    records.iter().rev().find(|r| r.kind == Kind::Missed)
}

/// The run of firings the daemon was refused, when `records` (folded,
/// oldest first) end with one: its user may not tick the loop now.
pub(crate) fn refused_now(records: &[Fire]) -> Option<&Fire> {
    records
        .last()
        .filter(|r| r.kind == Kind::Skipped && r.why == why::REFUSED)
}

#[cfg(test)]
impl Fire {
    /// For tests: one firing of `every = "1m"`, due and seen at `at`,
    /// recorded by `h pid 1`; a test changes the rest with `..`.
    pub(crate) fn sample(at: Timestamp, kind: Kind, why: &str) -> Fire {
        Fire {
            at,
            until: None,
            count: 1,
            kind,
            why: why.into(),
            detail: None,
            tick: None,
            seen: at,
            schedule: "every = \"1m\"".into(),
            by: "h pid 1".into(),
            fired_by: None,
            started: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn runs_alike_fold_and_ran_firings_never_do() {
        let records = [
            Fire::sample(t(0), Kind::Ran, "ran"),
            Fire::sample(t(60), Kind::Ran, "ran"),
            Fire::sample(t(120), Kind::Skipped, why::INACTIVE),
            Fire::sample(t(180), Kind::Skipped, why::INACTIVE),
            Fire::sample(t(240), Kind::Skipped, why::INACTIVE),
            Fire::sample(t(300), Kind::Skipped, why::BUSY),
            Fire {
                count: 5,
                until: Some(t(600)),
                ..Fire::sample(t(360), Kind::Missed, why::DOWN)
            },
            Fire::sample(t(660), Kind::Missed, why::DOWN),
            Fire::sample(t(720), Kind::Ran, "failed"),
        ];
        let folded = fold(records);
        let shape: Vec<(Kind, &str, u64)> =
            folded.iter().map(|r| (r.kind, r.why.as_str(), r.count)).collect();
        assert_eq!(
            shape,
            [
                (Kind::Ran, "ran", 1),
                (Kind::Ran, "ran", 1),
                (Kind::Skipped, why::INACTIVE, 3),
                (Kind::Skipped, why::BUSY, 1),
                (Kind::Missed, why::DOWN, 6),
                (Kind::Ran, "failed", 1),
            ]
        );
        assert_eq!((folded[2].at, folded[2].last_at()), (t(120), t(240)));
        assert_eq!((folded[4].at, folded[4].last_at()), (t(360), t(660)));
        assert_eq!(last_missed(&folded).map(|r| r.count), Some(6));
    }

    #[test]
    fn a_changed_schedule_starts_a_new_run() {
        let a = Fire::sample(t(0), Kind::Missed, why::DOWN);
        let b = Fire {
            schedule: "every = \"5m\"".into(),
            ..Fire::sample(t(60), Kind::Missed, why::DOWN)
        };
        assert_eq!(fold([a, b]).len(), 2);
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = Fire {
            detail: Some("paused by ann".into()),
            tick: Some(7),
            ..Fire::sample(t(0), Kind::Skipped, why::INACTIVE)
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Fire>(&line).unwrap(), r);
        assert!(!line.contains("until"), "{line}");
    }
}
