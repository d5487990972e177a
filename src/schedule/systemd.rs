//! The systemd backend: a user service that runs one tick and a timer that
//! starts it, in `$XDG_CONFIG_HOME/systemd/user/` (`~/.config/systemd/user/`),
//! named `automaton-<loop>-<hash>`. `every` becomes OnActiveSec +
//! OnUnitActiveSec; `cron` becomes OnCalendar with Persistent=true (one
//! catch-up run after downtime); jitter becomes RandomizedDelaySec.

use std::path::PathBuf;
use std::time::Duration;

use super::cadence::{CronSpec, Unsupported, systemd_values};
use super::exec::Action;
use super::{Job, Record};
use crate::config::Cadence;

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

fn unit_dir(home: &std::path::Path) -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map_or_else(|| home.join(".config"), PathBuf::from)
        .join("systemd/user")
}

pub(super) fn install(job: &Job) -> Result<(String, Vec<Action>), Unsupported> {
    let unit = format!("automaton-{}", job.name);
    let dir = unit_dir(&job.home);
    let timer = timer(job, &unit)?;
    let exec: Vec<String> = job.command.iter().map(|a| quote(a)).collect();
    let service = format!(
        "[Unit]\nDescription=automaton tick of loop {} in {}\n\n[Service]\nType=oneshot\nExecStart={}\n",
        job.loop_name,
        job.root.display(),
        exec.join(" ")
    );
    let actions = vec![
        Action::Write {
            path: dir.join(format!("{unit}.service")),
            text: service,
        },
        Action::Write {
            path: dir.join(format!("{unit}.timer")),
            text: timer,
        },
        Action::run(&["systemctl", "--user", "daemon-reload"]),
        Action::run(&["systemctl", "--user", "enable", "--now", &format!("{unit}.timer")]),
    ];
    Ok((unit, actions))
}

fn timer(job: &Job, unit: &str) -> Result<String, Unsupported> {
    let mut t = format!(
        "[Unit]\nDescription=fires automaton loop {} in {}\n\n[Timer]\n",
        job.loop_name,
        job.root.display()
    );
    match &job.schedule.cadence {
        Cadence::Every(d) => {
            let every = seconds(d.0);
            t += &format!("OnActiveSec={every}\nOnUnitActiveSec={every}\n");
        }
        Cadence::Cron(expr) => {
            let zone = job
                .schedule
                .timezone
                .as_ref()
                .map(|z| format!(" {z}"))
                .unwrap_or_default();
            t += &format!("OnCalendar={}{zone}\nPersistent=true\n", on_calendar(expr)?);
        }
    }
    // The default accuracy (a minute) would blur short cadences.
    t += "AccuracySec=1s\n";
    if let Some(j) = job.schedule.jitter {
        t += &format!("RandomizedDelaySec={}\n", seconds(j.0));
    }
    t += &format!("Unit={unit}.service\n\n[Install]\nWantedBy=timers.target\n");
    Ok(t)
}

/// A systemd time span: whole seconds, or milliseconds when finer.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A cron expression as an OnCalendar value. Refused when both day fields
/// are restricted: cron runs on either, OnCalendar only on both.
pub(super) fn on_calendar(expr: &str) -> Result<String, Unsupported> {
    let refuse = |why: String| Unsupported::new("systemd", format!("cron = {expr:?}"), why);
    let c = CronSpec::parse(expr).map_err(refuse)?;
    if c.both_days_restricted() {
        return Err(refuse(
            "cron runs it when either the day of month or the weekday matches, and OnCalendar \
             cannot say \"either\"; restrict only one of them, or use the daemon or launchd"
                .into(),
        ));
    }
    let two = |v: u8| format!("{v:02}");
    let mut out = String::new();
    if !c.weekday.star {
        out += &systemd_values(&c.weekday.values, 0, 6, |d| WEEKDAYS[usize::from(d)].to_owned());
        out.push(' ');
    }
    out += &format!(
        "*-{}-{} {}:{}:00",
        systemd_values(&c.month.values, 1, 12, two),
        systemd_values(&c.day.values, 1, 31, two),
        systemd_values(&c.hour.values, 0, 23, two),
        systemd_values(&c.minute.values, 0, 59, two),
    );
    Ok(out)
}

/// A word of ExecStart: double-quoted, with `\`, `"`, `%` and `$` escaped.
fn quote(s: &str) -> String {
    let inner = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%")
        .replace('$', "$$");
    format!("\"{inner}\"")
}

fn timer_name(r: &Record) -> String {
    format!("{}.timer", r.name)
}

pub(super) fn remove(r: &Record) -> Vec<Action> {
    let mut a = vec![Action::lenient(&[
        "systemctl",
        "--user",
        "disable",
        "--now",
        &timer_name(r),
    ])];
    a.extend(r.files.iter().cloned().map(Action::Delete));
    a.push(Action::run(&["systemctl", "--user", "daemon-reload"]));
    a
}

pub(super) fn disable(r: &Record) -> Vec<Action> {
    vec![Action::run(&[
        "systemctl",
        "--user",
        "disable",
        "--now",
        &timer_name(r),
    ])]
}

pub(super) fn enable(r: &Record) -> Vec<Action> {
    vec![Action::run(&[
        "systemctl",
        "--user",
        "enable",
        "--now",
        &timer_name(r),
    ])]
}

/// Whether the user's systemd instance outlives their sessions
/// (`loginctl show-user`'s `Linger`); `None` when loginctl cannot say.
pub(super) fn lingering() -> Option<bool> {
    let user = crate::who::os_user();
    let text = super::exec::stdout_of(&["loginctl", "show-user", &user, "--property=Linger"])?;
    match text.trim() {
        "Linger=yes" => Some(true),
        "Linger=no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_maps_to_on_calendar() {
        let m = |e| on_calendar(e).unwrap();
        assert_eq!(m("*/15 * * * *"), "*-*-* *:00/15:00");
        assert_eq!(m("30 2 * * *"), "*-*-* 02:30:00");
        assert_eq!(m("0 9-17 * * mon-fri"), "Mon..Fri *-*-* 09..17:00:00");
        assert_eq!(m("0 0 1 */3 *"), "*-01/3-01 00:00:00");
        assert_eq!(m("5 4 * * 0,6"), "Sun,Sat *-*-* 04:05:00");
    }

    #[test]
    fn refuses_either_day_and_extensions() {
        let e = on_calendar("0 0 1 * mon").unwrap_err();
        assert_eq!(e.backend, "systemd");
        assert!(e.why.contains("either"), "{e}");
        assert!(on_calendar("0 0 L * *").is_err());
    }

    #[test]
    fn exec_words_are_escaped() {
        assert_eq!(quote("/a b/100%$x\"y"), "\"/a b/100%%$$x\\\"y\"");
    }
}
