//! `time-window`: lets ticks run only inside a daily window of wall-clock
//! time, optionally on some days of the week; skips them outside it.

use crate::{Context, Decision, Gate, Log, Phase};
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};
use std::fmt;

pub struct TimeWindow;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// When the window opens, "HH:MM" (inclusive).
    pub start: TimeOfDay,
    /// When it closes, "HH:MM" (exclusive). Earlier than `start`: the window
    /// wraps midnight. Equal to `start`: the window is the whole day.
    pub end: TimeOfDay,
    /// The days on which the window opens; every day when not given. A
    /// window that wraps midnight belongs to the day it opens on.
    #[serde(default)]
    pub days: Option<Vec<Weekday>>,
    /// The offset from UTC the times are written in, "+HH:MM" or "-HH:MM".
    #[serde(default)]
    pub utc_offset: Option<UtcOffset>,
    /// The IANA time zone the times are written in (`Europe/Paris`), its
    /// offset at each instant from the host's zone database; instead of
    /// `utc_offset`.
    #[serde(default)]
    pub timezone: Option<String>,
}

/// Minutes since midnight, parsed from "HH:MM".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeOfDay(pub u32);

impl<'de> Deserialize<'de> for TimeOfDay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_hh_mm(&text)
            .filter(|&(h, _)| h < 24)
            .map(|(h, m)| TimeOfDay(h * 60 + m))
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "expected a time \"HH:MM\" (00:00 to 23:59), got \"{text}\""
                ))
            })
    }
}

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.0 / 60, self.0 % 60)
    }
}

/// An offset from UTC in minutes, parsed from "+HH:MM", "-HH:MM" or "Z".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UtcOffset(pub i32);

impl<'de> Deserialize<'de> for UtcOffset {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let parsed = match text.as_bytes().first() {
            _ if text == "Z" => Some(0),
            Some(b'+') => parse_hh_mm(&text[1..]).map(|(h, m)| (h * 60 + m) as i32),
            Some(b'-') => parse_hh_mm(&text[1..]).map(|(h, m)| -((h * 60 + m) as i32)),
            _ => None,
        };
        parsed
            .filter(|minutes| minutes.abs() < 24 * 60)
            .map(UtcOffset)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "expected an offset \"+HH:MM\" or \"-HH:MM\", got \"{text}\""
                ))
            })
    }
}

impl fmt::Display for UtcOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { '-' } else { '+' };
        let m = self.0.unsigned_abs();
        write!(f, "{sign}{:02}:{:02}", m / 60, m % 60)
    }
}

/// "HH:MM" with two digits each and minutes below 60.
fn parse_hh_mm(text: &str) -> Option<(u32, u32)> {
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m) = (h.parse().ok()?, m.parse().ok()?);
    (m < 60).then_some((h, m))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

const WEEK: [Weekday; 7] = [
    Weekday::Mon,
    Weekday::Tue,
    Weekday::Wed,
    Weekday::Thu,
    Weekday::Fri,
    Weekday::Sat,
    Weekday::Sun,
];

impl Weekday {
    /// The weekday of a day counted from 1970-01-01, a Thursday.
    fn of_day(day: i64) -> Weekday {
        WEEK[(day + 3).rem_euclid(7) as usize]
    }

    fn name(self) -> &'static str {
        ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][self as usize]
    }
}

const DAY_MS: i64 = 86_400_000;

/// Where a moment falls: the window that contains it, if any.
#[derive(Debug, PartialEq, Eq)]
enum Position {
    /// Inside a window that opened on the given day.
    Inside(Weekday),
    Outside,
}

/// The offset from UTC, in ms, that `p`'s times are written in at `now_ms`.
fn offset_ms(p: &Params, ctx: &Context) -> Result<i64, String> {
    match (&p.timezone, p.utc_offset) {
        (Some(zone), _) => {
            let in_zone = ctx.in_zone.ok_or_else(|| {
                String::from("timezone: this build of the gate cannot read the host's zones")
            })?;
            let t = in_zone(ctx.now_ms as i64, zone).map_err(|e| format!("timezone: {e}"))?;
            Ok(i64::from(t.offset_seconds) * 1000)
        }
        (None, offset) => Ok(i64::from(offset.unwrap_or_default().0) * 60_000),
    }
}

fn position(p: &Params, now_ms: u64, offset_ms: i64) -> (Position, Weekday, TimeOfDay) {
    let local = now_ms as i64 + offset_ms;
    let day = local.div_euclid(DAY_MS);
    let minute = (local.rem_euclid(DAY_MS) / 60_000) as u32;
    let (start, end) = (p.start.0, p.end.0);
    let opened_on = if start < end {
        (start <= minute && minute < end).then_some(day)
    } else if minute >= start {
        // Wraps midnight (or is the whole day, start == end): it opened today
        // after `start`, or yesterday and is still open before `end`.
        Some(day)
    } else if minute < end || start == end {
        Some(day - 1)
    } else {
        None
    };
    let pos = match opened_on.map(Weekday::of_day) {
        Some(weekday) if p.days.as_ref().is_none_or(|days| days.contains(&weekday)) => {
            Position::Inside(weekday)
        }
        _ => Position::Outside,
    };
    (pos, Weekday::of_day(day), TimeOfDay(minute))
}

impl Gate for TimeWindow {
    const NAME: &'static str = "time-window";
    const DESCRIPTION: &'static str = "Skips ticks outside a daily window of wall-clock time \
        (`start` to `end`, in `timezone` or `utc_offset`), optionally only on some `days`. A window may wrap \
        midnight (22:00 to 06:00); it then belongs to the day it opens on.";
    const PARAMS_SCHEMA: &'static str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "time-window params",
  "type": "object",
  "$defs": {
    "time": { "type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$" }
  },
  "properties": {
    "start": {
      "description": "When the window opens, HH:MM (inclusive).",
      "$ref": "#/$defs/time"
    },
    "end": {
      "description": "When the window closes, HH:MM (exclusive). Earlier than start: the window wraps midnight. Equal to start: the whole day.",
      "$ref": "#/$defs/time"
    },
    "days": {
      "description": "Days on which the window opens; every day when absent. A window that wraps midnight belongs to the day it opens on.",
      "type": "array",
      "items": { "enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"] },
      "minItems": 1
    },
    "utc_offset": {
      "description": "The UTC offset the times are written in.",
      "type": "string",
      "pattern": "^(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$",
      "default": "+00:00"
    },
    "timezone": {
      "description": "The IANA time zone the times are written in (Europe/Paris), its offset at each instant from the host's zone database; instead of utc_offset.",
      "type": "string",
      "minLength": 1
    }
  },
  "required": ["start", "end"],
  "not": { "required": ["timezone", "utc_offset"] },
  "additionalProperties": false
}"##;

    type Params = Params;

    fn validate(p: &Params) -> Result<(), String> {
        if p.days.as_ref().is_some_and(Vec::is_empty) {
            return Err(String::from(
                "days: must name at least one day (leave it out for every day)",
            ));
        }
        if p.timezone.is_some() && p.utc_offset.is_some() {
            return Err(String::from(
                "timezone: give either timezone or utc_offset, not both",
            ));
        }
        if p.timezone.as_ref().is_some_and(String::is_empty) {
            return Err(String::from(
                "timezone: must name a zone, e.g. Europe/Paris",
            ));
        }
        Ok(())
    }

    /// Meant for before-step. After the step there is nothing left to skip,
    /// so it proceeds.
    fn decide(p: &Params, ctx: &Context, log: &mut Log) -> Result<Decision, String> {
        if ctx.phase == Phase::AfterStep {
            log.debug("time-window only acts before the step");
            return Ok(Decision::Proceed);
        }
        let offset = offset_ms(p, ctx)?;
        match position(p, ctx.now_ms, offset) {
            (Position::Inside(_), _, _) => Ok(Decision::Proceed),
            (Position::Outside, weekday, time) => {
                let days = match &p.days {
                    Some(days) => {
                        let names: Vec<&str> = days.iter().map(|d| d.name()).collect();
                        format!(" on {}", names.join(","))
                    }
                    None => String::new(),
                };
                let zone = match &p.timezone {
                    Some(zone) => zone.clone(),
                    None => format!("UTC{}", p.utc_offset.unwrap_or_default()),
                };
                Ok(Decision::Skip(format!(
                    "outside the time window {}–{}{days} ({zone}): it is {} {time}",
                    p.start,
                    p.end,
                    weekday.name(),
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_params, evaluate};

    /// 2026-11-30 is a Monday; `at(0, "10:15")` is then, in UTC.
    fn at(days_after_monday: u64, hh_mm: &str) -> u64 {
        let (h, m) = parse_hh_mm(hh_mm).unwrap();
        let monday = 20_787; // days from 1970-01-01 to 2026-11-30
        ((monday + days_after_monday) * 86_400 + u64::from(h * 3600 + m * 60)) * 1000
    }

    fn decide(params: &str, now_ms: u64) -> Decision {
        let ctx = Context {
            now_ms,
            params: params.into(),
            ..Context::default()
        };
        evaluate::<TimeWindow>(&ctx, &mut Log::default()).unwrap()
    }

    fn open(params: &str, now_ms: u64) -> bool {
        decide(params, now_ms) == Decision::Proceed
    }

    #[test]
    fn the_test_calendar_is_right() {
        assert_eq!(Weekday::of_day(0), Weekday::Thu);
        assert_eq!(Weekday::of_day(20_787), Weekday::Mon);
        assert_eq!(Weekday::of_day(-1), Weekday::Wed);
    }

    #[test]
    fn a_day_window_is_half_open() {
        let p = r#"{"start": "09:00", "end": "17:00"}"#;
        assert!(!open(p, at(0, "08:59")));
        assert!(open(p, at(0, "09:00")));
        assert!(open(p, at(0, "16:59")));
        assert!(!open(p, at(0, "17:00")));
        assert_eq!(
            decide(p, at(0, "17:30")),
            Decision::Skip(String::from(
                "outside the time window 09:00–17:00 (UTC+00:00): it is mon 17:30"
            ))
        );
    }

    #[test]
    fn a_night_window_wraps_midnight_and_belongs_to_its_first_day() {
        let p = r#"{"start": "22:00", "end": "06:00", "days": ["fri"]}"#;
        // Friday is day 4 after Monday.
        assert!(!open(p, at(4, "21:59")));
        assert!(open(p, at(4, "22:00")));
        assert!(
            open(p, at(5, "03:00")),
            "saturday night belongs to friday's window"
        );
        assert!(!open(p, at(5, "06:00")));
        assert!(
            !open(p, at(5, "23:00")),
            "saturday's own window is not listed"
        );
        assert!(
            !open(p, at(4, "03:00")),
            "friday early morning is thursday's window"
        );
        assert_eq!(
            decide(p, at(5, "23:00")),
            Decision::Skip(String::from(
                "outside the time window 22:00–06:00 on fri (UTC+00:00): it is sat 23:00"
            ))
        );
    }

    #[test]
    fn the_offset_shifts_the_window() {
        let p = r#"{"start": "09:00", "end": "17:00", "utc_offset": "+02:00"}"#;
        assert!(!open(p, at(0, "06:59")));
        assert!(open(p, at(0, "07:00")));
        assert!(!open(p, at(0, "15:00")));
        let p = r#"{"start": "09:00", "end": "17:00", "days": ["mon"], "utc_offset": "-05:30"}"#;
        // 02:00 UTC Tuesday is 20:30 Monday in -05:30: outside; 15:00 UTC
        // Monday is 09:30 Monday: inside.
        assert!(!open(p, at(1, "02:00")));
        assert!(open(p, at(0, "15:00")));
        // 00:00 UTC Monday is Sunday 18:30 local.
        let p = r#"{"start": "18:00", "end": "19:00", "days": ["sun"], "utc_offset": "-05:30"}"#;
        assert!(open(p, at(0, "00:00")));
    }

    /// A stand-in for the host's `in-zone`: Europe/Paris as the 2026 rules
    /// have it (CEST from 2026-03-29 01:00 UTC to 2026-10-25 01:00 UTC).
    fn paris(at_ms: i64, zone: &str) -> Result<crate::LocalTime, String> {
        if zone != "Europe/Paris" {
            return Err(format!("unknown time zone {zone:?}"));
        }
        let summer = (1_774_746_000_000..1_792_890_000_000).contains(&at_ms);
        Ok(crate::LocalTime {
            offset_seconds: if summer { 7200 } else { 3600 },
        })
    }

    fn decide_in(params: &str, now_ms: u64) -> Result<Decision, String> {
        let ctx = Context {
            now_ms,
            params: params.into(),
            in_zone: Some(paris),
            ..Context::default()
        };
        evaluate::<TimeWindow>(&ctx, &mut Log::default())
    }

    #[test]
    fn a_timezone_follows_the_zones_offset_at_each_instant() {
        let p = r#"{"start": "09:00", "end": "17:00", "timezone": "Europe/Paris"}"#;
        // Monday 2026-11-30 (CET, +1): 08:00 UTC is 09:00 local.
        assert_eq!(decide_in(p, at(0, "08:00")), Ok(Decision::Proceed));
        assert_eq!(
            decide_in(p, at(0, "07:59")),
            Ok(Decision::Skip(String::from(
                "outside the time window 09:00–17:00 (Europe/Paris): it is mon 08:59"
            )))
        );
        // Monday 2026-06-29 (CEST, +2): 07:00 UTC is 09:00 local.
        let june = at(0, "07:00") - 154 * 86_400_000;
        assert_eq!(decide_in(p, june), Ok(Decision::Proceed));
        assert!(decide_in(p, june - 60_000).unwrap() != Decision::Proceed);
        let unknown = r#"{"start": "09:00", "end": "17:00", "timezone": "Mars/Olympus"}"#;
        assert_eq!(
            decide_in(unknown, at(0, "08:00")),
            Err(String::from("timezone: unknown time zone \"Mars/Olympus\""))
        );
        // A build without the host's zones says so.
        let ctx = Context {
            params: p.into(),
            ..Context::default()
        };
        assert!(
            evaluate::<TimeWindow>(&ctx, &mut Log::default())
                .unwrap_err()
                .starts_with("timezone: this build")
        );
        let both = r#"{"start": "09:00", "end": "17:00", "timezone": "UTC", "utc_offset": "Z"}"#;
        assert_eq!(
            check_params::<TimeWindow>(both).unwrap_err(),
            "invalid params: timezone: give either timezone or utc_offset, not both"
        );
    }

    #[test]
    fn equal_start_and_end_is_the_whole_day() {
        let p = r#"{"start": "00:00", "end": "00:00", "days": ["sat", "sun"]}"#;
        assert!(!open(p, at(4, "23:59")));
        assert!(open(p, at(5, "00:00")));
        assert!(open(p, at(6, "23:59")));
        assert!(!open(p, at(7, "00:00")));
    }

    #[test]
    fn after_the_step_it_proceeds() {
        let ctx = Context {
            phase: Phase::AfterStep,
            now_ms: at(0, "03:00"),
            params: String::from(r#"{"start": "09:00", "end": "17:00"}"#),
            ..Context::default()
        };
        assert_eq!(
            evaluate::<TimeWindow>(&ctx, &mut Log::default()),
            Ok(Decision::Proceed)
        );
    }

    #[test]
    fn params_are_checked() {
        let err = |p: &str| check_params::<TimeWindow>(p).unwrap_err();
        assert_eq!(
            err(r#"{"start": "9:00", "end": "17:00"}"#),
            r#"invalid params: start: expected a time "HH:MM" (00:00 to 23:59), got "9:00""#
        );
        assert!(
            err(r#"{"start": "09:00", "end": "24:00"}"#)
                .starts_with("invalid params: end: expected a time")
        );
        assert!(err(r#"{"start": "09:00", "end": "10:60"}"#).starts_with("invalid params: end:"));
        assert!(
            err(r#"{"start": "09:00", "end": "17:00", "days": ["monday"]}"#)
                .starts_with("invalid params: days[0]: unknown variant `monday`")
        );
        assert_eq!(
            err(r#"{"start": "09:00", "end": "17:00", "days": []}"#),
            "invalid params: days: must name at least one day (leave it out for every day)"
        );
        assert!(
            err(r#"{"start": "09:00", "end": "17:00", "utc_offset": "2"}"#)
                .starts_with("invalid params: utc_offset: expected an offset")
        );
        assert!(
            err(r#"{"start": "09:00", "end": "17:00", "tz": "UTC"}"#)
                .contains("unknown field `tz`")
        );
        assert!(
            check_params::<TimeWindow>(r#"{"start": "09:00", "end": "17:00", "utc_offset": "Z"}"#)
                .is_ok()
        );
        assert!(
            check_params::<TimeWindow>(
                r#"{"start": "09:00", "end": "17:00", "utc_offset": "-09:30"}"#
            )
            .is_ok()
        );
    }
}
