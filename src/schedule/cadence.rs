//! A loop's cadence as the OS schedulers can express it: `cron =` expressions
//! read (by croner, the one grammar) into their five fields of explicit
//! values, and `every =` intervals turned into crontab lines when that is
//! exact. Each backend renders from these, and only says whether it can:
//! anything a backend cannot say exactly is refused, never rounded.

use std::collections::BTreeSet;
use std::time::Duration;

use thiserror::Error;

/// A cadence a backend cannot express, with what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{backend} cannot run {cadence}: {why}")]
pub struct Unsupported {
    pub backend: &'static str,
    /// The cadence as loop.toml writes it (`every = "7m"`, `cron = "…"`).
    pub cadence: String,
    pub why: String,
}

impl Unsupported {
    pub fn new(backend: &'static str, cadence: impl Into<String>, why: impl Into<String>) -> Unsupported {
        Unsupported {
            backend,
            cadence: cadence.into(),
            why: why.into(),
        }
    }
}

/// One field of a cron expression: the values it allows, and whether it was
/// written as a bare `*` (which matters for day-of-month against day-of-week).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub values: BTreeSet<u8>,
    pub star: bool,
    /// Written starting with `*` (`*`, `*/5`): cron's rule for combining the
    /// two day fields then differs between implementations.
    pub starts_with_star: bool,
}

/// A five-field cron expression in the syntax of crontab(5): numbers, names
/// of months and weekdays, `*`, ranges, steps and lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CronSpec {
    pub minute: Field,
    pub hour: Field,
    pub day: Field,
    pub month: Field,
    /// 0 is Sunday (a written 7 becomes 0).
    pub weekday: Field,
}

impl CronSpec {
    /// Reads `expr` with the one cron grammar ([`crate::cron`]) into the
    /// fields a backend renders. Croner's extensions (`L`, `W`, `#`) are
    /// refused here: no OS scheduler says them, so they are the daemon's.
    pub(crate) fn parse(expr: &str) -> Result<CronSpec, String> {
        let cron = crate::cron::parse(expr)?;
        let p = &cron.pattern;
        let text: Vec<&str> = expr.split_whitespace().collect();
        for (what, c, t) in [("day", &p.days, text[2]), ("weekday", &p.days_of_week, text[4])] {
            if c.has_modifiers() {
                return Err(format!(
                    "{what} field {t:?}: `L`, `W` and `#` are for the daemon only; no OS scheduler says them"
                ));
            }
        }
        let field = |c: &croner::CronComponent, t: &str| Field {
            values: c
                .values()
                .into_iter()
                .filter_map(|v| u8::try_from(v).ok())
                .collect(),
            star: t == "*",
            starts_with_star: t.starts_with('*'),
        };
        let mut weekday = field(&p.days_of_week, text[4]);
        if weekday.values.remove(&7) {
            weekday.values.insert(0);
        }
        weekday.star = weekday.star || weekday.values.len() == 7 && weekday.starts_with_star;
        Ok(CronSpec {
            minute: field(&p.minutes, text[0]),
            hour: field(&p.hours, text[1]),
            day: field(&p.days, text[2]),
            month: field(&p.months, text[3]),
            weekday,
        })
    }

    /// Both day fields restricted: cron runs on either (an OR), which
    /// calendar-style schedulers do not say the same way.
    pub(crate) fn both_days_restricted(&self) -> bool {
        !self.day.star && !self.weekday.star
    }

    /// Both restricted and one written as `*/N`: crontab implementations
    /// disagree on what that means, so no backend guesses.
    pub(crate) fn ambiguous_days(&self) -> bool {
        self.both_days_restricted() && (self.day.starts_with_star || self.weekday.starts_with_star)
    }
}

/// `every = D` as a crontab schedule: only when D is whole minutes that
/// divide an hour, or whole hours that divide a day; anything else would
/// drift at the hour or day boundary.
pub(crate) fn every_as_cron(backend: &'static str, every: Duration) -> Result<String, Unsupported> {
    let cadence = format!("every = {:?}", crate::duration::format(every));
    let refuse = |why: String| Unsupported::new(backend, cadence.clone(), why);
    let secs = every.as_secs();
    if every.subsec_nanos() != 0 || !secs.is_multiple_of(60) || secs == 0 {
        return Err(refuse(
            "its finest unit is a minute; use a whole number of minutes, or the daemon or systemd".into(),
        ));
    }
    let minutes = secs / 60;
    match minutes {
        1 => Ok("* * * * *".into()),
        m if m < 60 && 60 % m == 0 => Ok(format!("*/{m} * * * *")),
        m if m % 60 == 0 && 24 % (m / 60) == 0 => match m / 60 {
            24 => Ok("0 0 * * *".into()),
            1 => Ok("0 * * * *".into()),
            h => Ok(format!("0 */{h} * * *")),
        },
        m => Err(refuse(format!(
            "{m} minutes neither divides an hour nor is a whole number of hours that divides a day; \
             write a `cron =` expression, or use the daemon, systemd or launchd"
        ))),
    }
}

/// Renders a set of values compactly for systemd: `*` for all of
/// `min..=max`, `start/step` for a progression that runs to the end, else a
/// list with `a..b` ranges.
pub(crate) fn systemd_values(values: &BTreeSet<u8>, min: u8, max: u8, name: impl Fn(u8) -> String) -> String {
    let v: Vec<u8> = values.iter().copied().collect();
    if v.len() == usize::from(max - min) + 1 {
        return "*".into();
    }
    if v.len() >= 3 {
        let step = v[1] - v[0];
        let progression = v.windows(2).all(|w| w[1] - w[0] == step);
        if progression && step > 1 && v[v.len() - 1] + step > max {
            return format!("{}/{step}", name(v[0]));
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            out.push(format!("{}..{}", name(v[i]), name(v[j])));
        } else {
            out.extend((i..=j).map(|k| name(v[k])));
        }
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[u8]) -> BTreeSet<u8> {
        v.iter().copied().collect()
    }

    #[test]
    fn parses_crontab_syntax() {
        let c = CronSpec::parse("*/15 9-17 * jan,Jul mon-fri").unwrap();
        assert_eq!(c.minute.values, set(&[0, 15, 30, 45]));
        assert_eq!(c.hour.values.len(), 9);
        assert!(c.day.star && !c.month.star);
        assert_eq!(c.month.values, set(&[1, 7]));
        assert_eq!(c.weekday.values, set(&[1, 2, 3, 4, 5]));
        assert_eq!(CronSpec::parse("0 0 * * 7").unwrap().weekday.values, set(&[0]));
        assert_eq!(
            CronSpec::parse("5-59/20 * * * *").unwrap().minute.values,
            set(&[5, 25, 45])
        );
        assert!(CronSpec::parse("5/20 * * * *").is_err());
        assert!(CronSpec::parse("0 0 1 * 1").unwrap().both_days_restricted());
        assert!(CronSpec::parse("0 0 */2 * 1").unwrap().ambiguous_days());
    }

    #[test]
    fn refuses_what_crontab_does_not_say() {
        for bad in [
            "0 0 L * *",
            "0 0 * * 5#2",
            "60 * * * *",
            "* * 0 * *",
            "*/0 * * * *",
            "5-1 * * * *",
        ] {
            assert!(CronSpec::parse(bad).is_err(), "{bad}");
        }
        assert!(CronSpec::parse("* * * *").unwrap_err().contains("five fields"));
    }

    #[test]
    fn every_maps_to_cron_only_when_exact() {
        let m = |s| every_as_cron("cron", Duration::from_secs(s));
        assert_eq!(m(60).unwrap(), "* * * * *");
        assert_eq!(m(900).unwrap(), "*/15 * * * *");
        assert_eq!(m(3600).unwrap(), "0 * * * *");
        assert_eq!(m(6 * 3600).unwrap(), "0 */6 * * *");
        assert_eq!(m(86400).unwrap(), "0 0 * * *");
        for refused in [5, 90, 7 * 60, 5 * 3600, 2 * 86400] {
            let e = m(refused).unwrap_err();
            assert_eq!(e.backend, "cron");
            assert!(e.to_string().contains("cron"), "{e}");
        }
        assert!(m(7 * 60).unwrap_err().why.contains("`cron =`"));
    }

    #[test]
    fn systemd_values_are_compact_and_exact() {
        let n = |v: u8| format!("{v:02}");
        assert_eq!(systemd_values(&set(&[0, 15, 30, 45]), 0, 59, n), "00/15");
        assert_eq!(systemd_values(&(0..60).collect(), 0, 59, n), "*");
        assert_eq!(systemd_values(&set(&[5]), 0, 59, n), "05");
        assert_eq!(systemd_values(&set(&[1, 2, 3, 4, 9]), 0, 23, n), "01..04,09");
        // A progression that stops before the end is not `start/step`.
        assert_eq!(systemd_values(&set(&[0, 10, 20]), 0, 59, n), "00,10,20");
    }
}
