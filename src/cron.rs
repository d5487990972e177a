//! The one cron grammar: croner's, five fields (minute hour day month
//! weekday), as loop.toml's `cron =` writes it. The daemon computes firings
//! from it in a time zone (jiff's), and the OS backends read its fields to
//! say whether, and how, their scheduler can express it.

use std::cmp::Ordering;
use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};
use croner::{CivilDate, CivilDateTime, CivilTime, CronDateTime, Resolution, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp, ZonedDateTime};

/// Parses a five-field expression: crontab(5) syntax (numbers, names,
/// `*`, ranges, steps, lists) and croner's extensions (`L`, `W`, `#`),
/// which only the daemon runs.
pub(crate) fn parse(expr: &str) -> Result<croner::Cron, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{expr:?} needs five fields: minute hour day month weekday"
        ));
    }
    parser().parse(expr).map_err(|e| {
        // Croner's message does not say which field; the first that fails
        // on its own among stars does.
        let culprit = (0..5).find(|&i| {
            let alone: Vec<&str> = (0..5).map(|j| if j == i { fields[i] } else { "*" }).collect();
            parser().parse(&alone.join(" ")).is_err()
        });
        let text = e.to_string();
        let text = [
            "Component error: ",
            "Invalid pattern: ",
            "Pattern contains illegal characters: ",
        ]
        .iter()
        .fold(text.as_str(), |t, p| t.strip_prefix(p).unwrap_or(t));
        let why = lower_first(text.trim_end_matches('.'));
        match culprit {
            Some(i) => format!("{} field {:?}: {why} ({})", FIELDS[i], fields[i], RANGES[i]),
            None => why,
        }
    })
}

const FIELDS: [&str; 5] = ["minute", "hour", "day", "month", "weekday"];
const RANGES: [&str; 5] = ["0-59", "0-23", "1-31", "1-12 or jan-dec", "0-7 or sun-sat"];

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_lowercase().chain(c).collect())
        .unwrap_or_default()
}

/// The first occurrence of `cron` strictly after `t`, read in `tz`; `None`
/// when there is none. Across a change of the clocks it does as cron does:
/// a time in a skipped hour runs once, just after the change, and a
/// repeated hour does not run again.
pub(crate) fn next_after(cron: &croner::Cron, tz: &TimeZone, t: Timestamp) -> Option<Timestamp> {
    let zoned = Civil(t.to_zoned_datetime(tz.clone()));
    let mut next = cron.find_next_occurrence(&zoned, false).ok()?;
    // Clocks set back: wall times already passed at `t` come round again;
    // they were run.
    for _ in 0..1024 {
        if next.0.datetime() > zoned.0.datetime() {
            break;
        }
        next = cron.find_next_occurrence(&next, false).ok()?;
    }
    Some(next.0.timestamp())
}

/// Where [`shortest_gap`] and [`fires`] start looking: 2026-01-01.
const FROM: i64 = 1_767_225_600;

/// Whether `cron` fires at all (in `tz`), from 2026 on.
pub(crate) fn fires(cron: &croner::Cron, tz: &TimeZone) -> bool {
    Timestamp::from_second(FROM)
        .ok()
        .and_then(|start| next_after(cron, tz, start))
        .is_some()
}

/// The shortest time between two firings of `cron` in `tz`, over its next
/// firings from a fixed instant (enough for every field's period); `None`
/// when it never fires.
pub(crate) fn shortest_gap(cron: &croner::Cron, tz: &TimeZone) -> Option<Duration> {
    let start = Timestamp::from_second(FROM).ok()?;
    let mut prev = next_after(cron, tz, start)?;
    let mut gap: Option<Duration> = None;
    for _ in 0..64 {
        let Some(next) = next_after(cron, tz, prev) else {
            break;
        };
        let d = Duration::try_from(next.duration_since(prev)).ok()?;
        gap = Some(gap.map_or(d, |g| g.min(d)));
        prev = next;
    }
    // One firing and never again is a gap as long as forever.
    Some(gap.unwrap_or(Duration::MAX))
}

/// A zoned time as croner walks it: jiff's own, through croner's civil
/// date-time interface (croner's built-in support speaks an older jiff).
#[derive(Clone)]
struct Civil(ZonedDateTime);

fn weekday(w: jiff::civil::Weekday) -> Weekday {
    Weekday::from_days_from_sunday(u32::from(w.to_sunday_zero_offset().unsigned_abs()))
}

impl CronDateTime for Civil {
    fn to_civil(&self) -> CivilDateTime {
        let d = self.0.datetime();
        // jiff keeps every part in range.
        CivilDateTime::new(
            CivilDate::from_parts_unchecked(
                i32::from(d.year()),
                d.month().unsigned_abs().into(),
                d.day().unsigned_abs().into(),
            ),
            CivilTime::from_parts_unchecked(
                d.hour().unsigned_abs().into(),
                d.minute().unsigned_abs().into(),
                d.second().unsigned_abs().into(),
            ),
        )
    }

    fn civil_weekday(&self) -> Weekday {
        weekday(self.0.weekday())
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, croner::errors::CronError> {
        use croner::errors::CronError;
        let part = |v: u32| i8::try_from(v).map_err(|_| CronError::InvalidDate);
        let year = i16::try_from(civil.year()).map_err(|_| CronError::InvalidDate)?;
        let datetime = jiff::civil::DateTime::new(
            year,
            part(civil.month())?,
            part(civil.day())?,
            part(civil.hour())?,
            part(civil.minute())?,
            part(civil.second())?,
            0,
        )
        .map_err(|_| CronError::InvalidDate)?;
        let ambiguous = self.0.time_zone().to_ambiguous_zoned_datetime(datetime);
        let bad = |_| CronError::InvalidTime;
        Ok(match ambiguous.offset() {
            AmbiguousOffset::Unambiguous { .. } => {
                Resolution::Single(Civil(ambiguous.unambiguous().map_err(bad)?))
            }
            AmbiguousOffset::Fold { .. } => Resolution::Ambiguous(
                Civil(ambiguous.clone().earlier().map_err(bad)?),
                Civil(ambiguous.later().map_err(bad)?),
            ),
            AmbiguousOffset::Gap { .. } => Resolution::Gap,
        })
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0
            .checked_add(SignedDuration::from_secs(seconds))
            .ok()
            .map(Civil)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.0.timestamp().cmp(&other.0.timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn five_fields_only() {
        assert!(parse("*/15 9-17 * jan,Jul mon-fri").is_ok());
        assert!(parse("0 0 L * *").is_ok(), "croner's extensions parse");
        assert!(parse("* * * *").unwrap_err().contains("five fields"));
        assert!(parse("0 * * * * *").unwrap_err().contains("five fields"));
        let e = parse("60 * * * *").unwrap_err();
        assert!(e.starts_with("minute field \"60\": "), "{e}");
        let e = parse("0 0 * * 5-1").unwrap_err();
        assert!(e.starts_with("weekday field \"5-1\": "), "{e}");
    }

    #[test]
    fn next_firing_in_a_zone() {
        let c = parse("30 2 * * *").unwrap();
        let utc = TimeZone::UTC;
        assert_eq!(
            next_after(&c, &utc, at("2026-03-01T00:00:00Z")),
            Some(at("2026-03-01T02:30:00Z"))
        );
        // Changes of the clocks: schedule::due's tests.
    }

    #[test]
    fn gaps() {
        let utc = TimeZone::UTC;
        assert_eq!(
            shortest_gap(&parse("*/15 * * * *").unwrap(), &utc),
            Some(Duration::from_mins(15))
        );
        assert_eq!(shortest_gap(&parse("0 0 30 2 *").unwrap(), &utc), None);
        assert!(fires(&parse("0 0 1 1 *").unwrap(), &utc));
        assert!(!fires(&parse("0 0 30 2 *").unwrap(), &utc));
    }
}
