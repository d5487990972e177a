//! The wall clock. jiff represents times from -9999 to
//! 9999-12-30T22:00:00Z and its `Timestamp::now()` panics on a clock
//! outside them; here such a clock is an error that says so ([`check`],
//! run before every command and every tick), and [`now`] never panics. What
//! is computed from the time (a next due time, an approval's expiry, how
//! long a holder has run) is computed with checked arithmetic where it
//! could pass the end of that range.

use std::time::SystemTime;

use jiff::Timestamp;

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
