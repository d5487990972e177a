//! The wall clock. jiff represents times from -9999 to
//! 9999-12-30T22:00:00Z and its `Timestamp::now()` panics on a clock
//! outside them; here such a clock is an error that says so ([`check`],
//! run before every command and every tick), and [`now`] never panics. What
//! is computed from the time (a next due time, an approval's expiry, how
//! long a holder has run) is computed with checked arithmetic where it
//! could pass the end of that range.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime};

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::error::Error;

/// A timestamp in the local time zone, to the second, with its offset:
/// `2026-11-30 19:07:19 +01:00`, as every table and line for people shows
/// a time (JSON keeps RFC 3339 in UTC).
pub fn local(t: Timestamp) -> String {
    t.to_zoned_datetime(jiff::tz::TimeZone::system())
        .strftime("%Y-%m-%d %H:%M:%S %:z")
        .to_string()
}

/// The time now, or the end of the range jiff represents nearest to it
/// when the clock is outside it (a command checked it first: see
/// [`check`]; a clock that jumped since is taken at the edge).
pub fn now() -> Timestamp {
    read().unwrap_or_else(|past| if past { Timestamp::MAX } else { Timestamp::MIN })
}

/// The time now, or an error naming the clock when it is outside the times
/// automaton can record: nothing can be stamped or scheduled by it.
pub fn check() -> Result<Timestamp, Error> {
    read().map_err(|_| Error::Clock {
        seconds: seconds_since_epoch(SystemTime::now()),
        latest: Timestamp::MAX,
    })
}

/// The system clock as a timestamp; `Err(true)` when it is past the last
/// one, `Err(false)` when it is before the first.
fn read() -> Result<Timestamp, bool> {
    let now = SystemTime::now();
    Timestamp::try_from(now).map_err(|_| now > SystemTime::UNIX_EPOCH)
}

/// How long a zone looked up is kept: a long-running daemon takes in an
/// update of the system's zone data within this long, as jiff's own
/// database does.
const ZONE_KEPT: Duration = Duration::from_mins(5);

/// The IANA time zone `name` (`Europe/Berlin`), as jiff's database has it.
///
/// jiff's database walks the whole system zoneinfo tree the first time a
/// process asks it for a zone (some 30 directories and 600 entries), to
/// answer names in any case; for a command that fires every minute that
/// walk was most of what a budget's calendar window or a schedule's
/// `timezone` cost. A name spelled as its file is (nearly always) is read
/// from that one file; any other name, or a system without the file, asks
/// jiff's database as before, so the answer is the same either way.
pub fn zone(name: &str) -> Result<TimeZone, jiff::Error> {
    static ZONES: LazyLock<Mutex<HashMap<String, (Instant, TimeZone)>>> = LazyLock::new(Default::default);
    let mut zones = ZONES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, tz)) = zones.get(name)
        && at.elapsed() < ZONE_KEPT
    {
        return Ok(tz.clone());
    }
    let tz = match zone_file(name) {
        Some(tz) => tz,
        None => TimeZone::get(name)?,
    };
    zones.insert(name.to_owned(), (Instant::now(), tz.clone()));
    Ok(tz)
}

/// `name`'s TZif file in the system's zoneinfo directory (`TZDIR`, else
/// where jiff looks), when `name` is a plain relative name and the file is
/// there and parses.
#[cfg(unix)]
fn zone_file(name: &str) -> Option<TimeZone> {
    use std::io::Read;
    /// The largest zone file read: TZif files are a few KiB.
    const ZONE_FILE_MAX: u64 = 256 * 1024;
    let plain = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_+-".contains(&b))
        && name.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
    if !plain {
        return None;
    }
    let dirs: Vec<std::path::PathBuf> = match std::env::var_os("TZDIR") {
        Some(d) if !d.is_empty() => vec![d.into()],
        _ => vec!["/usr/share/zoneinfo".into(), "/etc/zoneinfo".into()],
    };
    // Links are followed: many of zoneinfo's names (the backward ones)
    // are links to another zone's file, which the store's reader
    // (`fsx::read_regular`, no links) would refuse.
    dirs.into_iter().find_map(|dir| {
        let file = std::fs::File::open(dir.join(name)).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() > ZONE_FILE_MAX {
            return None;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
        file.take(ZONE_FILE_MAX).read_to_end(&mut bytes).ok()?;
        TimeZone::tzif(name, &bytes).ok()
    })
}

/// Windows has no zoneinfo directory: jiff's bundled database answers.
#[cfg(not(unix))]
fn zone_file(_: &str) -> Option<TimeZone> {
    None
}

fn seconds_since_epoch(t: SystemTime) -> i128 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i128::from(d.as_secs()),
        Err(e) => -i128::from(e.duration().as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_zone_reads_as_jiffs_database_has_it() {
        let names: Vec<_> = jiff::tz::db().available().collect();
        assert!(names.len() > 300, "{} zones", names.len());
        let instants: Vec<Timestamp> = [-2_000_000_000_i64, 0, 1_700_000_000, 1_790_000_000, 4_000_000_000]
            .into_iter()
            .map(|s| Timestamp::from_second(s).unwrap())
            .collect();
        for name in &names {
            let name = name.as_str();
            let ours = zone(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            let jiffs = TimeZone::get(name).unwrap();
            assert_eq!(ours.iana_name(), jiffs.iana_name(), "{name}");
            for t in &instants {
                assert_eq!(ours.to_offset_info(*t), jiffs.to_offset_info(*t), "{name} at {t}");
            }
        }
    }

    // (Linux: a file system that ignores case would find "europe/berlin".)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_zone_named_as_its_file_is_read_from_that_file() {
        if !std::path::Path::new("/usr/share/zoneinfo/Europe/Berlin").is_file()
            || std::env::var_os("TZDIR").is_some()
        {
            return;
        }
        let tz = zone_file("Europe/Berlin").expect("read from its file");
        assert_eq!(tz.iana_name(), Some("Europe/Berlin"));
        assert!(
            zone_file("europe/berlin").is_none(),
            "another case is the database's to answer"
        );
        assert!(zone_file("../zoneinfo/Europe/Berlin").is_none());
    }

    #[test]
    fn a_zone_in_another_case_or_out_of_the_directory_is_jiffs_answer() {
        assert_eq!(
            zone("europe/berlin").unwrap().iana_name(),
            TimeZone::get("europe/berlin").unwrap().iana_name()
        );
        for bad in [
            "../../etc/passwd",
            "/etc/passwd",
            "Europe//Berlin",
            "",
            "Nowhere/Atlantis",
            "zone.tab",
        ] {
            assert!(zone(bad).is_err(), "{bad:?} is no zone");
        }
    }

    #[test]
    fn the_clock_error_names_the_clock_and_the_last_time() {
        let e = Error::Clock {
            seconds: 253_402_214_400,
            latest: Timestamp::MAX,
        };
        let text = e.to_string();
        assert!(text.contains("253402214400 seconds"), "{text}");
        assert!(text.contains("9999-12-30T22:00:00"), "{text}");
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn a_clock_in_range_reads() {
        assert!(check().is_ok());
        assert!(now() > Timestamp::UNIX_EPOCH);
    }
}
