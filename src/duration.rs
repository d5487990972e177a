//! Durations as people and schedulers write them, through jiff: the
//! friendly form loop.toml uses (`"30s"`, `"1h 30m"`, `"2d"`), the form
//! messages print, and ISO 8601 (`PT1H30M`) for the schedulers that want it.

use std::time::Duration;

use jiff::{SignedDuration, Span, SpanRelativeTo};

/// Parses `"15m"`, `"1h 30m"`, `"2 days"` or ISO 8601's `"PT15M"`. A day
/// is 24 hours; months and years (of no fixed length) and negative
/// durations are refused.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let span: Span = s.trim().parse().map_err(|_| "not a duration".to_owned())?;
    let signed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|_| "months and years have no fixed length".to_owned())?;
    Duration::try_from(signed).map_err(|_| "a duration cannot be negative".to_owned())
}

/// How every message and table says a duration: `"200ms"` below a
/// second, then seconds to a tenth (`"12.4s"`, `"12s"`), and past a minute
/// hours, minutes and seconds with the tenth when there is one (`"1m"`,
/// `"1m 0.4s"`, `"1h 30m"`). `"0s"` for nothing. It reads back as loop.toml
/// reads a duration.
pub(crate) fn format(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    if d < Duration::from_millis(1) {
        return format!("{}µs", d.as_micros());
    }
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    // In tenths of a second, rounded to the nearest.
    let tenths = d.as_millis().div_ceil(50) / 2;
    let (h, m, s, t) = (tenths / 36_000, tenths / 600 % 60, tenths / 10 % 60, tenths % 10);
    let mut parts = Vec::new();
    if h > 0 {
        parts.push(format!("{h}h"));
    }
    if m > 0 {
        parts.push(format!("{m}m"));
    }
    match (s, t) {
        (0, 0) => {}
        (_, 0) => parts.push(format!("{s}s")),
        _ => parts.push(format!("{s}.{t}s")),
    }
    parts.join(" ")
}

/// ISO 8601, in hours, minutes and seconds: `PT1H30M`, `PT0S`.
pub(crate) fn iso8601(d: Duration) -> String {
    let signed = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    signed.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_friendly_and_iso_forms() {
        let secs = |s| parse(s).map(|d| d.as_secs_f64());
        assert_eq!(secs("30s"), Ok(30.0));
        assert_eq!(secs("1h 30m"), Ok(5400.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("2 days"), Ok(172_800.0));
        assert_eq!(secs("1d"), Ok(86_400.0));
        assert_eq!(secs("200ms"), Ok(0.2));
        assert_eq!(secs("PT15M"), Ok(900.0));
        assert!(parse("3 months").is_err());
        assert!(parse("-5s").is_err());
        assert!(parse("soon").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn formats_as_messages_and_schedulers_say_it() {
        assert_eq!(format(Duration::from_mins(90)), "1h 30m");
        assert_eq!(format(Duration::from_millis(200)), "200ms");
        assert_eq!(format(Duration::from_hours(1)), "1h");
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_millis(60_394)), "1m 0.4s");
        assert_eq!(format(Duration::from_millis(12_394)), "12.4s");
        assert_eq!(format(Duration::from_millis(59_960)), "1m");
        assert_eq!(format(Duration::from_secs(192)), "3m 12s");
        assert_eq!(format(Duration::from_hours(168)), "168h");
        assert_eq!(format(Duration::from_micros(20)), "20µs");
        for d in [60_394, 12_394, 1_500, 3_723_000, 200] {
            let d = Duration::from_millis(d);
            let back = parse(&format(d)).unwrap();
            assert!(back.abs_diff(d) <= Duration::from_millis(50), "{d:?}");
        }
        assert_eq!(iso8601(Duration::from_mins(5)), "PT5M");
        assert_eq!(iso8601(Duration::from_secs(5430)), "PT1H30M30S");
        assert_eq!(iso8601(Duration::ZERO), "PT0S");
    }
}
