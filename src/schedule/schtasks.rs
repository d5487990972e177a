//! The Windows Task Scheduler backend: a task XML written to
//! `<root>/schedules/<loop>.xml` and registered with `schtasks /Create /XML
//! … /TN \automaton\<loop>-<hash> /F`. `every` becomes a time trigger
//! repeated at that interval (whole minutes, at least one); `cron` becomes
//! daily or weekly calendar triggers, one per time of day, when its day of
//! month and month are `*`. Jitter becomes the triggers' RandomDelay.
//! Overlapping runs are ignored (MultipleInstancesPolicy IgnoreNew).

use std::time::Duration;

use jiff::ZonedDateTime as Zoned;

use super::cadence::{CronSpec, Unsupported};
use super::exec::Action;
use super::{Job, Record};
use crate::config::Cadence;

/// The most calendar triggers written for one cron expression.
const MAX_TRIGGERS: usize = 48;
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

pub fn install(job: &Job) -> Result<(String, Vec<Action>), Unsupported> {
    let task = format!("\\automaton\\{}", job.name);
    let path = super::record::dir_of(job.root).join(format!("{}.xml", job.loop_name));
    let xml = task_xml(job, &Zoned::now())?;
    let file = path.display().to_string();
    Ok((
        task.clone(),
        vec![
            Action::Write { path, text: xml },
            Action::run(&["schtasks", "/Create", "/XML", &file, "/TN", &task, "/F"]),
        ],
    ))
}

/// ISO 8601 duration, as the task schema writes one.
fn iso(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    let mut out = String::from("PT");
    if h > 0 {
        out += &format!("{h}H");
    }
    if m > 0 {
        out += &format!("{m}M");
    }
    if s > 0 || out == "PT" {
        out += &format!("{s}S");
    }
    out
}

/// The task definition; `now` is the first trigger's start boundary.
pub fn task_xml(job: &Job, now: &Zoned) -> Result<String, Unsupported> {
    let delay = job
        .schedule
        .jitter
        .map(|j| format!("      <RandomDelay>{}</RandomDelay>\n", iso(j.0)))
        .unwrap_or_default();
    let triggers = match &job.schedule.cadence {
        Cadence::Every(d) => {
            let secs = d.0.as_secs();
            if secs < 60 || secs % 60 != 0 || d.0.subsec_nanos() != 0 {
                return Err(Unsupported::new(
                    "schtasks",
                    format!("every = \"{d}\""),
                    "Task Scheduler repeats in whole minutes, at least one; use the daemon for less",
                ));
            }
            const DAY: u64 = 86_400;
            if secs > 31 * DAY {
                // A repetition interval is at most P31D; whole days go as a
                // daily calendar trigger with an interval (at most 365).
                if secs % DAY != 0 || secs / DAY > 365 {
                    return Err(Unsupported::new(
                        "schtasks",
                        format!("every = \"{d}\""),
                        "Task Scheduler repeats at most every 31 days (P31D), or every 32 to 365 \
                         whole days; write a `cron =` expression, or use the daemon",
                    ));
                }
                return Ok(task_document(
                    job,
                    &format!(
                        "    <CalendarTrigger>\n      <StartBoundary>{}</StartBoundary>\n      \
                         <Enabled>true</Enabled>\n{delay}      <ScheduleByDay>\n        \
                         <DaysInterval>{}</DaysInterval>\n      </ScheduleByDay>\n    </CalendarTrigger>\n",
                        now.strftime("%Y-%m-%dT%H:%M:%S"),
                        secs / DAY
                    ),
                ));
            }
            format!(
                "    <TimeTrigger>\n      <Repetition>\n        <Interval>{}</Interval>\n        \
                 <StopAtDurationEnd>false</StopAtDurationEnd>\n      </Repetition>\n      \
                 <StartBoundary>{}</StartBoundary>\n      <Enabled>true</Enabled>\n{delay}    </TimeTrigger>\n",
                iso(d.0),
                now.strftime("%Y-%m-%dT%H:%M:%S")
            )
        }
        Cadence::Cron(expr) => calendar_triggers(expr, now, &delay)?,
    };
    Ok(task_document(job, &triggers))
}

/// The whole task around its triggers.
fn task_document(job: &Job, triggers: &str) -> String {
    let args: Vec<String> = job.command[1..].iter().map(|a| arg(a)).collect();
    format!(
        concat!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
            "<Task version=\"1.2\" xmlns=\"http://schemas.microsoft.com/windows/2004/02/mit/task\">\n",
            "  <RegistrationInfo>\n    <Description>{desc}</Description>\n  </RegistrationInfo>\n",
            "  <Triggers>\n{triggers}  </Triggers>\n",
            "  <Settings>\n",
            "    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>\n",
            "    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>\n",
            "    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>\n",
            "    <StartWhenAvailable>true</StartWhenAvailable>\n",
            "    <Enabled>true</Enabled>\n",
            "    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>\n",
            "  </Settings>\n",
            "  <Actions Context=\"Author\">\n    <Exec>\n",
            "      <Command>{command}</Command>\n      <Arguments>{args}</Arguments>\n",
            "    </Exec>\n  </Actions>\n</Task>\n"
        ),
        desc = escape(&format!(
            "automaton tick of loop {} in {}",
            job.loop_name,
            job.root.display()
        )),
        triggers = triggers,
        command = escape(&job.command[0]),
        args = escape(&args.join(" ")),
    )
}

/// Daily (or weekly, on the listed weekdays) triggers, one per time of day.
fn calendar_triggers(expr: &str, now: &Zoned, delay: &str) -> Result<String, Unsupported> {
    let refuse = |why: String| Unsupported::new("schtasks", format!("cron = {expr:?}"), why);
    let c = CronSpec::parse(expr).map_err(refuse)?;
    if !c.day.star || !c.month.star {
        return Err(refuse(
            "only a day-of-month and month of `*` are mapped (daily or weekly triggers); \
             use the daemon for the rest"
                .into(),
        ));
    }
    let times = c.hour.values.len() * c.minute.values.len();
    if times > MAX_TRIGGERS {
        return Err(refuse(format!(
            "it needs {times} triggers (more than {MAX_TRIGGERS}); use `every =` or the daemon"
        )));
    }
    let schedule = if c.weekday.star {
        "      <ScheduleByDay>\n        <DaysInterval>1</DaysInterval>\n      </ScheduleByDay>\n".to_owned()
    } else {
        let days: String = c
            .weekday
            .values
            .iter()
            .map(|d| format!("          <{} />\n", DAYS[usize::from(*d)]))
            .collect();
        format!(
            "      <ScheduleByWeek>\n        <WeeksInterval>1</WeeksInterval>\n        \
             <DaysOfWeek>\n{days}        </DaysOfWeek>\n      </ScheduleByWeek>\n"
        )
    };
    let date = now.strftime("%Y-%m-%d");
    let mut out = String::new();
    for h in &c.hour.values {
        for m in &c.minute.values {
            out += &format!(
                "    <CalendarTrigger>\n      <StartBoundary>{date}T{h:02}:{m:02}:00</StartBoundary>\n      \
                 <Enabled>true</Enabled>\n{delay}{schedule}    </CalendarTrigger>\n"
            );
        }
    }
    Ok(out)
}

/// A command-line argument as Windows programs split them.
fn arg(s: &str) -> String {
    if !s.is_empty() && !s.contains([' ', '\t', '"']) {
        return s.to_owned();
    }
    format!("\"{}\"", s.replace('"', "\\\""))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn remove(r: &Record) -> Vec<Action> {
    let mut a = vec![Action::run(&["schtasks", "/Delete", "/TN", &r.name, "/F"])];
    a.extend(r.files.iter().cloned().map(Action::Delete));
    a
}

pub fn disable(r: &Record) -> Vec<Action> {
    vec![Action::run(&["schtasks", "/Change", "/TN", &r.name, "/DISABLE"])]
}

pub fn enable(r: &Record) -> Vec<Action> {
    vec![Action::run(&["schtasks", "/Change", "/TN", &r.name, "/ENABLE"])]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_iso_8601() {
        assert_eq!(iso(Duration::from_secs(300)), "PT5M");
        assert_eq!(iso(Duration::from_secs(5430)), "PT1H30M30S");
        assert_eq!(iso(Duration::ZERO), "PT0S");
    }

    #[test]
    fn cron_maps_to_daily_or_weekly_triggers() {
        let now: Zoned = "2026-01-02T03:04:05[UTC]".parse().unwrap();
        let daily = calendar_triggers("0,30 9 * * *", &now, "").unwrap();
        assert_eq!(daily.matches("<CalendarTrigger>").count(), 2);
        assert!(daily.contains("2026-01-02T09:30:00") && daily.contains("<DaysInterval>1"));
        let weekly = calendar_triggers("0 9 * * mon,fri", &now, "").unwrap();
        assert!(weekly.contains("<Monday />") && weekly.contains("<Friday />"));
        assert!(
            calendar_triggers("0 9 1 * *", &now, "")
                .unwrap_err()
                .why
                .contains("daily")
        );
        assert!(
            calendar_triggers("*/5 * * * *", &now, "")
                .unwrap_err()
                .why
                .contains("triggers")
        );
    }

    #[test]
    fn every_beyond_31_days_is_a_day_interval_or_refused() {
        use crate::config::{Cadence, Dur, Schedule};
        let now: Zoned = "2026-01-02T03:04:05[UTC]".parse().unwrap();
        let xml = |secs: u64| {
            let schedule = Schedule {
                cadence: Cadence::Every(Dur(Duration::from_secs(secs))),
                jitter: None,
                timezone: None,
            };
            let job = Job {
                loop_name: "l",
                root: std::path::Path::new("/r"),
                name: "l-1".into(),
                command: vec!["/bin/automaton".into(), "tick".into(), "l".into()],
                schedule: &schedule,
                home: "/home/u".into(),
            };
            task_xml(&job, &now)
        };
        let day = 86_400;
        assert!(
            xml(31 * day).unwrap().contains("<Interval>PT744H</Interval>"),
            "31 days repeat"
        );
        let long = xml(45 * day).unwrap();
        assert!(!long.contains("<Interval>"), "{long}");
        assert!(long.contains("<DaysInterval>45</DaysInterval>"), "{long}");
        assert!(long.contains("<StartBoundary>2026-01-02T03:04:05</StartBoundary>"));
        let e = xml(45 * day + 3600).unwrap_err();
        assert!(e.why.contains("P31D"), "{e}");
    }
}
