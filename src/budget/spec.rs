//! A `[[budget]]` table as automaton.toml and loop.toml write it: typed and
//! checked as it is read, so a bad window, scope, time zone or cap is an
//! error naming the file and line.

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, ZonedDateTime};
use serde::{Deserialize, Serialize};

/// One `[[budget]]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    pub name: String,
    /// The metric the step reports its spend in (`cost_usd`, `tokens`...).
    #[serde(default = "default_metric")]
    pub metric: String,
    pub window: Window,
    /// Calendar windows start at local midnight (hour, month) in this IANA
    /// time zone; UTC when unset.
    #[serde(default)]
    pub tz: Option<Tz>,
    pub cap: Cap,
    #[serde(default)]
    pub scope: Scope,
    /// A fraction of the cap: past it, a notice.
    #[serde(default)]
    pub warn_at: Option<Fraction>,
    #[serde(default)]
    pub on_cap: OnCap,
}

fn default_metric() -> String {
    "cost_usd".to_owned()
}

/// A cap: finite, not negative.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Cap(pub f64);

impl TryFrom<f64> for Cap {
    type Error = String;
    fn try_from(v: f64) -> Result<Cap, String> {
        if v.is_finite() && v >= 0.0 {
            Ok(Cap(v))
        } else {
            Err(format!("a cap must be a finite number, 0 or more, not {v}"))
        }
    }
}

impl From<Cap> for f64 {
    fn from(c: Cap) -> f64 {
        c.0
    }
}

/// A fraction of the cap, above 0 and at most 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Fraction(pub f64);

impl TryFrom<f64> for Fraction {
    type Error = String;
    fn try_from(v: f64) -> Result<Fraction, String> {
        if v > 0.0 && v <= 1.0 {
            Ok(Fraction(v))
        } else {
            Err(format!(
                "warn_at is a fraction of the cap, above 0 and at most 1, not {v}"
            ))
        }
    }
}

impl From<Fraction> for f64 {
    fn from(f: Fraction) -> f64 {
        f.0
    }
}

/// An IANA time zone, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Tz {
    pub name: String,
    #[serde(skip)]
    pub zone: TimeZone,
}

impl TryFrom<String> for Tz {
    type Error = String;
    fn try_from(name: String) -> Result<Tz, String> {
        let zone = crate::clock::zone(&name)
            .map_err(|_| format!("no time zone {name:?} (an IANA name such as \"Europe/Berlin\")"))?;
        Ok(Tz { name, zone })
    }
}

impl From<Tz> for String {
    fn from(t: Tz) -> String {
        t.name
    }
}

/// What a budget's spend is counted over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Window {
    /// Each tick by itself: its reservation and cost against the cap.
    Tick,
    /// A clock hour.
    Hour,
    /// A calendar day, from local midnight.
    Day,
    /// A calendar week, from Monday's midnight.
    Week,
    /// A calendar month, from the first's midnight.
    Month,
    /// Consecutive spans of this length counted from the Unix epoch.
    Every(Duration),
}

impl TryFrom<String> for Window {
    type Error = String;
    fn try_from(s: String) -> Result<Window, String> {
        Ok(match s.trim() {
            "tick" => Window::Tick,
            "1h" | "hour" => Window::Hour,
            "1d" | "day" => Window::Day,
            "7d" | "1w" | "week" => Window::Week,
            "month" | "1mo" => Window::Month,
            other => {
                let d = crate::duration::parse(other).map_err(|e| {
                    format!(
                        "window {other:?}: {e} (\"tick\", \"1h\", \"1d\", \"7d\", \"month\" or a duration)"
                    )
                })?;
                if d < Duration::from_secs(1) {
                    return Err(format!("window {other:?} is shorter than a second"));
                }
                Window::Every(d)
            }
        })
    }
}

impl From<Window> for String {
    fn from(w: Window) -> String {
        w.to_string()
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Window::Tick => f.write_str("tick"),
            Window::Hour => f.write_str("1h"),
            Window::Day => f.write_str("1d"),
            Window::Week => f.write_str("7d"),
            Window::Month => f.write_str("month"),
            Window::Every(d) => f.write_str(&crate::duration::format(*d)),
        }
    }
}

/// The window that holds `now`, as `[start, end)` in milliseconds since the
/// epoch; `None` for a tick window.
pub fn bounds(window: &Window, tz: Option<&Tz>, now: Timestamp) -> Option<(i64, i64)> {
    let zone = tz.map_or(TimeZone::UTC, |t| t.zone.clone());
    let z = now.to_zoned_datetime(zone);
    let calendar = |start: Result<ZonedDateTime, jiff::Error>, step: jiff::Span| {
        let start = start.ok()?;
        let end = start.checked_add(step).ok()?;
        Some((
            start.timestamp().as_millisecond(),
            end.timestamp().as_millisecond(),
        ))
    };
    match window {
        Window::Tick => None,
        Window::Hour => calendar(
            z.with().minute(0).second(0).subsec_nanosecond(0).build(),
            1.hour(),
        ),
        Window::Day => calendar(z.start_of_day(), 1.day()),
        Window::Week => {
            let back = i64::from(jiff::civil::Weekday::Monday.until(z.weekday()));
            calendar(
                z.checked_sub(back.days()).and_then(|d| d.start_of_day()),
                7.days(),
            )
        }
        Window::Month => calendar(z.first_of_month().and_then(|d| d.start_of_day()), 1.month()),
        Window::Every(d) => {
            let len = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            let ms = now.as_millisecond();
            let start = ms - ms.rem_euclid(len);
            Some((start, start.saturating_add(len)))
        }
    }
}

/// Which loops a budget counts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Scope {
    /// Each loop by itself (each has its own account).
    #[default]
    Loop,
    /// Every loop whose loop.toml says `group = NAME`, together.
    Group(String),
    /// Every loop of the root, together.
    Root,
}

impl TryFrom<String> for Scope {
    type Error = String;
    fn try_from(s: String) -> Result<Scope, String> {
        match s.as_str() {
            "loop" => Ok(Scope::Loop),
            "root" => Ok(Scope::Root),
            _ => match s.strip_prefix("group:") {
                Some(g) if !g.is_empty() => Ok(Scope::Group(g.to_owned())),
                _ => Err(format!("scope {s:?}: \"loop\", \"group:NAME\" or \"root\"")),
            },
        }
    }
}

impl From<Scope> for String {
    fn from(s: Scope) -> String {
        match s {
            Scope::Loop => "loop".to_owned(),
            Scope::Root => "root".to_owned(),
            Scope::Group(g) => format!("group:{g}"),
        }
    }
}

/// What a tick whose reservation does not fit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnCap {
    /// Await a person's approval; the next window releases it by itself.
    Await,
    /// Halt the loop until `resume`.
    #[default]
    Halt,
    /// Skip this tick; the next one tries again.
    Skip,
}

impl OnCap {
    pub fn as_str(self) -> &'static str {
        match self {
            OnCap::Await => "await",
            OnCap::Halt => "halt",
            OnCap::Skip => "skip",
        }
    }
}

/// What a step that reports no cost is counted at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unreported {
    /// Its reservation (fail closed).
    #[default]
    Reservation,
    /// Nothing.
    Zero,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn tz(name: &str) -> Tz {
        Tz::try_from(name.to_owned()).unwrap()
    }

    #[test]
    fn a_day_starts_at_local_midnight() {
        // 23:30 UTC on the 4th is 00:30 on the 5th in Berlin.
        let (start, end) = bounds(
            &Window::Day,
            Some(&tz("Europe/Berlin")),
            at("2026-12-04T23:30:00Z"),
        )
        .unwrap();
        assert_eq!(start, at("2026-12-04T23:00:00Z").as_millisecond());
        assert_eq!(end, at("2026-12-05T23:00:00Z").as_millisecond());
        let (start, _) = bounds(&Window::Day, None, at("2026-12-04T23:30:00Z")).unwrap();
        assert_eq!(start, at("2026-12-04T00:00:00Z").as_millisecond());
    }

    #[test]
    fn a_day_across_a_clock_change_is_23_hours() {
        let (start, end) = bounds(
            &Window::Day,
            Some(&tz("Europe/Berlin")),
            at("2026-03-29T12:00:00Z"),
        )
        .unwrap();
        assert_eq!(end - start, 23 * 3_600_000);
    }

    #[test]
    fn weeks_start_on_monday_and_months_on_the_first() {
        // 2026-12-04 is a Friday.
        let (start, end) = bounds(&Window::Week, None, at("2026-12-04T10:00:00Z")).unwrap();
        assert_eq!(start, at("2026-11-30T00:00:00Z").as_millisecond());
        assert_eq!(end, at("2026-12-07T00:00:00Z").as_millisecond());
        let (start, end) = bounds(&Window::Month, None, at("2026-02-14T10:00:00Z")).unwrap();
        assert_eq!(start, at("2026-02-01T00:00:00Z").as_millisecond());
        assert_eq!(end, at("2026-03-01T00:00:00Z").as_millisecond());
        let (start, end) = bounds(&Window::Hour, None, at("2026-02-14T10:59:59Z")).unwrap();
        assert_eq!(
            (start, end - start),
            (at("2026-02-14T10:00:00Z").as_millisecond(), 3_600_000)
        );
    }

    #[test]
    fn windows_and_scopes_read_or_say_why_not() {
        assert_eq!(
            Window::try_from("30m".to_owned()).unwrap(),
            Window::Every(Duration::from_mins(30))
        );
        assert!(
            Window::try_from("soon".to_owned())
                .unwrap_err()
                .contains("\"soon\"")
        );
        assert_eq!(
            Scope::try_from("group:agents".to_owned()).unwrap(),
            Scope::Group("agents".into())
        );
        assert!(Scope::try_from("group:".to_owned()).is_err());
        assert!(
            Tz::try_from("Mars/Olympus".to_owned())
                .unwrap_err()
                .contains("Mars/Olympus")
        );
        assert!(Cap::try_from(f64::NAN).is_err());
        assert!(Fraction::try_from(1.5).is_err());
    }
}
