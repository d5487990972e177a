//! The host's `in-zone` (0.3.0): an instant's local date and time in an
//! IANA time zone, from the host's zone database (jiff's: the system's
//! zoneinfo, with the bundled copy where the system has none), so no gate
//! carries zone data of its own.

use jiff::Timestamp;
use jiff::tz::Dst;

/// An instant's local date and time in a zone; mirrors `local-time`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalTime {
    pub year: i16,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub millisecond: u16,
    /// 1 (Monday) to 7 (Sunday).
    pub weekday: u8,
    pub offset_seconds: i32,
    pub dst: bool,
    pub abbreviation: String,
}

/// `at_ms` (milliseconds since the Unix epoch) in the zone named `zone`;
/// an error names a zone the database does not know, or an instant out of
/// range.
pub(crate) fn in_zone(at_ms: i64, zone: &str) -> Result<LocalTime, String> {
    let tz = crate::clock::zone(zone)
        .map_err(|_| format!("unknown time zone {zone:?}: not in the host's zone database"))?;
    let at = Timestamp::from_millisecond(at_ms)
        .map_err(|_| format!("{at_ms} ms since the Unix epoch is out of range"))?;
    let info = tz.to_offset_info(at);
    let dt = info.offset().to_datetime(at);
    let narrow = |v: i8| u8::try_from(v).expect("a civil field is not negative");
    Ok(LocalTime {
        year: dt.year(),
        month: narrow(dt.month()),
        day: narrow(dt.day()),
        hour: narrow(dt.hour()),
        minute: narrow(dt.minute()),
        second: narrow(dt.second()),
        millisecond: u16::try_from(dt.millisecond()).expect("0 to 999"),
        weekday: narrow(dt.weekday().to_monday_one_offset()),
        offset_seconds: info.offset().seconds(),
        dst: info.dst() == Dst::Yes,
        abbreviation: info.abbreviation().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_in_paris_and_new_york() {
        // 2026-07-01T12:00:00Z: CEST (+2) in Paris, EDT (-4) in New York.
        let at = 1_782_907_200_000;
        let paris = in_zone(at, "Europe/Paris").unwrap();
        assert_eq!((paris.hour, paris.offset_seconds, paris.dst), (14, 7200, true));
        assert_eq!(
            (paris.year, paris.month, paris.day, paris.weekday),
            (2026, 7, 1, 3)
        );
        assert_eq!(paris.abbreviation, "CEST");
        let ny = in_zone(at + 999, "America/New_York").unwrap();
        assert_eq!((ny.hour, ny.millisecond, ny.offset_seconds), (8, 999, -14_400));
    }

    #[test]
    fn an_unknown_zone_is_named() {
        let err = in_zone(0, "Mars/Olympus").unwrap_err();
        assert!(err.contains("\"Mars/Olympus\""), "{err}");
    }

    /// Every zone Python's `zoneinfo` knows, at every offset change of
    /// 2026–27 (a second before, at, and a second after it) and at each
    /// year's start, against the host's answer. Skipped where python3 is
    /// not installed, unless `AUTOMATON_REQUIRE_PYTHON` is set (CI).
    #[test]
    fn agrees_with_python_zoneinfo_at_every_2026_27_offset_change() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let start = Timestamp::from_second(1_767_225_600 - 14 * 3600).unwrap(); // 2026-01-01, -14h
        let end = Timestamp::from_second(1_830_297_600 + 14 * 3600).unwrap(); // 2028-01-01, +14h
        let script = r#"
import sys, zoneinfo, datetime
out = []
zones = sorted(zoneinfo.available_timezones())
print("\n".join("Z " + z for z in zones))
for line in sys.stdin:
    z, t = line.split()
    d = datetime.datetime.fromtimestamp(int(t) / 1000, zoneinfo.ZoneInfo(z))
    off = int(d.utcoffset().total_seconds())
    print(z, t, d.year, d.month, d.day, d.hour, d.minute, d.second, d.isoweekday(), off, d.tzname())
"#;
        // First the zones Python knows.
        let list = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::null())
            .output();
        let list = match list {
            Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap(),
            _ if std::env::var_os("AUTOMATON_REQUIRE_PYTHON").is_none() => {
                eprintln!("skipped: no python3 with zoneinfo");
                return;
            }
            other => panic!("python3 with zoneinfo is required here: {other:?}"),
        };
        let zones: Vec<&str> = list.lines().filter_map(|l| l.strip_prefix("Z ")).collect();
        assert!(zones.len() > 300, "python knows only {} zones", zones.len());
        let mut queries = String::new();
        let mut changes = 0;
        for zone in &zones {
            let tz = jiff::tz::TimeZone::get(zone)
                .unwrap_or_else(|e| panic!("the host does not know {zone}: {e}"));
            let mut instants = vec![start.as_millisecond(), end.as_millisecond()];
            for t in tz.following(start).take_while(|t| t.timestamp() < end) {
                changes += 1;
                let ms = t.timestamp().as_millisecond();
                instants.extend([ms - 1000, ms, ms + 1000]);
            }
            for ms in instants {
                queries.push_str(&format!("{zone} {ms}\n"));
            }
        }
        assert!(changes > 100, "only {changes} offset changes in 2026–27");
        let mut py = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = py.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(queries.as_bytes()));
        let out = py.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(out.status.success());
        let mut checked = 0;
        for line in String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("Z "))
        {
            let f: Vec<&str> = line.split(' ').collect();
            let (zone, ms) = (f[0], f[1].parse::<i64>().unwrap());
            let t = in_zone(ms, zone).unwrap();
            let ours = format!(
                "{} {} {} {} {} {} {} {} {}",
                t.year,
                t.month,
                t.day,
                t.hour,
                t.minute,
                t.second,
                t.weekday,
                t.offset_seconds,
                t.abbreviation
            );
            assert_eq!(ours, f[2..].join(" "), "{zone} at {ms} ms");
            checked += 1;
        }
        assert!(checked > zones.len() * 2, "checked {checked}");
    }
}
