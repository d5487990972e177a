//! Durations as people and schedulers write them, through jiff: the
//! friendly form loop.toml uses (`"30s"`, `"1h 30m"`, `"2d"`), the form
//! messages print, and ISO 8601 (`PT1H30M`) for the schedulers that want it.

use std::time::Duration;

use jiff::fmt::friendly::SpanPrinter;
use jiff::{SignedDuration, Span, SpanRelativeTo};

/// Parses `"15m"`, `"1h 30m"`, `"2 days"` or ISO 8601's `"PT15M"`. A day
/// is 24 hours; months and years (of no fixed length) and negative
/// durations are refused.
pub fn parse(s: &str) -> Result<Duration, String> {
    let span: Span = s.trim().parse().map_err(|_| "not a duration".to_owned())?;
    let signed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|_| "months and years have no fixed length".to_owned())?;
    Duration::try_from(signed).map_err(|_| "a duration cannot be negative".to_owned())
}

/// `"1h 30m"`, `"200ms"`, `"0s"`: how messages say a duration.
pub fn format(d: Duration) -> String {
    static PRINTER: SpanPrinter = SpanPrinter::new();
    PRINTER.unsigned_duration_to_string(&d)
}

/// ISO 8601, in hours, minutes and seconds: `PT1H30M`, `PT0S`.
pub fn iso8601(d: Duration) -> String {
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
        assert_eq!(format(Duration::from_secs(5400)), "1h 30m");
        assert_eq!(format(Duration::from_millis(200)), "200ms");
        assert_eq!(format(Duration::from_secs(3600)), "1h");
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(iso8601(Duration::from_secs(300)), "PT5M");
        assert_eq!(iso8601(Duration::from_secs(5430)), "PT1H30M30S");
        assert_eq!(iso8601(Duration::ZERO), "PT0S");
    }
}
