//! The launchd backend: a user agent `~/Library/LaunchAgents/<label>.plist`,
//! label `dev.automaton.<loop>-<hash>`, loaded with `launchctl bootstrap
//! gui/<uid>`. `every` becomes StartInterval; `cron` becomes
//! StartCalendarInterval (one dict per combination of the restricted
//! fields, so cron's either-day rule is kept exactly), refused when that
//! would take more than `MAX_ENTRIES` dicts. launchd has no jitter. The
//! plist is written by the plist crate.

use super::cadence::{CronSpec, Field, Unsupported};
use super::exec::Action;
use super::{Job, Record};
use crate::config::Cadence;

/// The most StartCalendarInterval dicts written for one cron expression.
const MAX_ENTRIES: usize = 200;

fn domain() -> String {
    #[cfg(unix)]
    let uid = nix::unistd::getuid();
    #[cfg(windows)]
    let uid = 0;
    format!("gui/{uid}")
}

pub(super) fn install(job: &Job) -> Result<(String, Vec<Action>), Unsupported> {
    let label = format!("dev.automaton.{}", job.name);
    let path = job
        .home
        .join("Library/LaunchAgents")
        .join(format!("{label}.plist"));
    let plist = plist(job, &label)?;
    let path_text = path.display().to_string();
    let actions = vec![
        Action::Write { path, text: plist },
        Action::lenient(&["launchctl", "bootout", &format!("{}/{label}", domain())]),
        Action::run(&["launchctl", "bootstrap", &domain(), &path_text]),
    ];
    Ok((label, actions))
}

fn plist(job: &Job, label: &str) -> Result<String, Unsupported> {
    use plist::{Dictionary, Value};
    let mut d = Dictionary::new();
    d.insert("Label".into(), label.into());
    let args = job.command.iter().map(|a| Value::from(a.as_str())).collect();
    d.insert("ProgramArguments".into(), Value::Array(args));
    match &job.schedule.cadence {
        Cadence::Every(every) => {
            if every.0.subsec_nanos() != 0 {
                return Err(Unsupported::new(
                    "launchd",
                    format!("every = \"{every}\""),
                    "StartInterval counts whole seconds",
                ));
            }
            d.insert("StartInterval".into(), every.0.as_secs().into());
        }
        Cadence::Cron(expr) => {
            let entries = calendar(expr)?
                .into_iter()
                .map(|entry| {
                    let dict: Dictionary = entry
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), Value::from(u64::from(v))))
                        .collect();
                    Value::Dictionary(dict)
                })
                .collect();
            d.insert("StartCalendarInterval".into(), Value::Array(entries));
        }
    }
    d.insert("RunAtLoad".into(), false.into());
    d.insert("ProcessType".into(), "Background".into());
    let mut out = Vec::new();
    Value::Dictionary(d)
        .to_writer_xml(&mut out)
        .expect("a plist of strings and numbers writes to memory");
    out.push(b'\n');
    Ok(String::from_utf8(out).expect("plist writes UTF-8"))
}

/// The StartCalendarInterval dicts (key, value) for a cron expression: a
/// missing key matches every value, several dicts mean "any of them".
pub(super) fn calendar(expr: &str) -> Result<Vec<Vec<(&'static str, u8)>>, Unsupported> {
    let refuse = |why: String| Unsupported::new("launchd", format!("cron = {expr:?}"), why);
    let c = CronSpec::parse(expr).map_err(refuse)?;
    if c.ambiguous_days() {
        return Err(refuse(
            "with both day fields restricted and one written `*/N`, crons disagree on its meaning; \
             list the days instead"
                .into(),
        ));
    }
    let base = [("Month", &c.month), ("Hour", &c.hour), ("Minute", &c.minute)];
    let mut groups: Vec<Vec<(&'static str, &Field)>> = Vec::new();
    if c.both_days_restricted() {
        groups.push(vec![("Day", &c.day)]);
        groups.push(vec![("Weekday", &c.weekday)]);
    } else {
        groups.push(vec![("Day", &c.day), ("Weekday", &c.weekday)]);
    }
    let mut out = Vec::new();
    for g in groups {
        let fields: Vec<(&str, &Field)> = base.iter().copied().chain(g).filter(|(_, f)| !f.star).collect();
        let mut entries: Vec<Vec<(&'static str, u8)>> = vec![Vec::new()];
        for (key, f) in fields {
            entries = entries
                .into_iter()
                .flat_map(|e| {
                    f.values.iter().map(move |v| {
                        let mut e = e.clone();
                        e.push((key, *v));
                        e
                    })
                })
                .collect();
            if entries.len() > MAX_ENTRIES {
                return Err(refuse(format!(
                    "it needs more than {MAX_ENTRIES} StartCalendarInterval entries; \
                     use `every =` (StartInterval) or the daemon"
                )));
            }
        }
        out.extend(entries);
    }
    Ok(out)
}

fn target(r: &Record) -> String {
    format!("{}/{}", domain(), r.name)
}

pub(super) fn remove(r: &Record) -> Vec<Action> {
    let mut a = vec![
        Action::lenient(&["launchctl", "bootout", &target(r)]),
        Action::lenient(&["launchctl", "enable", &target(r)]),
    ];
    a.extend(r.files.iter().cloned().map(Action::Delete));
    a
}

/// Unloaded now, and kept from loading again at the next login.
pub(super) fn disable(r: &Record) -> Vec<Action> {
    vec![
        Action::run(&["launchctl", "disable", &target(r)]),
        Action::lenient(&["launchctl", "bootout", &target(r)]),
    ]
}

pub(super) fn enable(r: &Record) -> Vec<Action> {
    let mut a = vec![Action::run(&["launchctl", "enable", &target(r)])];
    for f in &r.files {
        a.push(Action::run(&[
            "launchctl",
            "bootstrap",
            &domain(),
            &f.display().to_string(),
        ]));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_maps_to_calendar_dicts() {
        assert_eq!(
            calendar("30 2 * * *").unwrap(),
            [vec![("Hour", 2), ("Minute", 30)]]
        );
        assert_eq!(calendar("*/20 * * * *").unwrap().len(), 3);
        assert_eq!(calendar("0 9 * * mon-fri").unwrap().len(), 5);
        // Either day: the 1st of the month, or any Monday.
        let either = calendar("0 0 1 * 1").unwrap();
        assert_eq!(
            either,
            [
                vec![("Hour", 0), ("Minute", 0), ("Day", 1)],
                vec![("Hour", 0), ("Minute", 0), ("Weekday", 1)]
            ]
        );
    }

    #[test]
    fn refuses_what_it_cannot_say_exactly() {
        assert!(calendar("*/2 */2 * * *").unwrap_err().why.contains("more than"));
        // Missing keys are wildcards: every minute of Mondays is one dict.
        assert_eq!(calendar("* * * * 1").unwrap(), [vec![("Weekday", 1)]]);
        assert!(calendar("0 0 */2 * 1").unwrap_err().why.contains("disagree"));
        assert!(calendar("0 0 L * *").is_err());
    }
}
