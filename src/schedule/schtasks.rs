//! The Windows Task Scheduler backend: a task XML written to
//! `<root>/schedules/<loop>.xml` and registered with `schtasks /Create /XML
//! … /TN \automaton\<loop>-<hash> /F`. `every` becomes a time trigger
//! repeated at that interval (whole minutes, at least one); `cron` becomes
//! daily or weekly calendar triggers, one per time of day, when its day of
//! month and month are `*`. Jitter becomes the triggers' RandomDelay.
//! Overlapping runs are ignored (MultipleInstancesPolicy IgnoreNew). The
//! XML is written by quick-xml, its durations by jiff.

use std::io;
use std::time::Duration;

use jiff::ZonedDateTime as Zoned;
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event};

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

pub(super) fn install(job: &Job) -> Result<(String, Vec<Action>), Unsupported> {
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

/// One trigger of the task.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Trigger {
    /// From `start`, again every `interval` (at most 31 days).
    Repeat { start: String, interval: Duration },
    /// At `start`'s time of day, every `days` days.
    Daily { start: String, days: u64 },
    /// At `start`'s time of day, on these weekdays (0 is Sunday).
    Weekly { start: String, weekdays: Vec<u8> },
}

/// The task definition; `now` is the first trigger's start boundary.
pub(super) fn task_xml(job: &Job, now: &Zoned) -> Result<String, Unsupported> {
    let start = now.strftime("%Y-%m-%dT%H:%M:%S").to_string();
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
            if secs <= 31 * DAY {
                vec![Trigger::Repeat { start, interval: d.0 }]
            } else if secs % DAY == 0 && secs / DAY <= 365 {
                // A repetition interval is at most P31D; whole days go as a
                // daily calendar trigger with an interval (at most 365).
                vec![Trigger::Daily {
                    start,
                    days: secs / DAY,
                }]
            } else {
                return Err(Unsupported::new(
                    "schtasks",
                    format!("every = \"{d}\""),
                    "Task Scheduler repeats at most every 31 days (P31D), or every 32 to 365 \
                     whole days; write a `cron =` expression, or use the daemon",
                ));
            }
        }
        Cadence::Cron(expr) => calendar_triggers(expr, now)?,
    };
    let delay = job.schedule.jitter.map(|j| j.0);
    Ok(document(job, &triggers, delay).expect("XML writes to memory"))
}

/// The whole task around its triggers.
fn document(job: &Job, triggers: &[Trigger], delay: Option<Duration>) -> io::Result<String> {
    let args: Vec<String> = job.command[1..].iter().map(|a| arg(a)).collect();
    let description = format!(
        "automaton tick of loop {} in {}",
        job.loop_name,
        job.root.display()
    );
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    w.create_element("Task")
        .with_attributes([
            ("version", "1.2"),
            ("xmlns", "http://schemas.microsoft.com/windows/2004/02/mit/task"),
        ])
        .write_inner_content(|w| {
            w.create_element("RegistrationInfo")
                .write_inner_content(|w| leaf(w, "Description", &description))?;
            w.create_element("Triggers")
                .write_inner_content(|w| triggers.iter().try_for_each(|t| trigger(w, t, delay)))?;
            w.create_element("Settings").write_inner_content(|w| {
                leaf(w, "MultipleInstancesPolicy", "IgnoreNew")?;
                leaf(w, "DisallowStartIfOnBatteries", "false")?;
                leaf(w, "StopIfGoingOnBatteries", "false")?;
                leaf(w, "StartWhenAvailable", "true")?;
                leaf(w, "Enabled", "true")?;
                leaf(w, "ExecutionTimeLimit", "PT0S")
            })?;
            w.create_element("Actions")
                .with_attribute(("Context", "Author"))
                .write_inner_content(|w| {
                    w.create_element("Exec").write_inner_content(|w| {
                        leaf(w, "Command", &job.command[0])?;
                        leaf(w, "Arguments", &args.join(" "))
                    })?;
                    Ok(())
                })?;
            Ok(())
        })?;
    let mut xml = String::from_utf8(w.into_inner()).expect("the writer writes UTF-8");
    xml.push('\n');
    Ok(xml)
}

/// An element holding text (escaped by the writer).
fn leaf(w: &mut Writer<Vec<u8>>, name: &str, text: &str) -> io::Result<()> {
    w.create_element(name).write_text_content(BytesText::new(text))?;
    Ok(())
}

/// One trigger element, in the order the task schema requires.
fn trigger(w: &mut Writer<Vec<u8>>, t: &Trigger, delay: Option<Duration>) -> io::Result<()> {
    let delay = |w: &mut Writer<Vec<u8>>| match delay {
        Some(d) => leaf(w, "RandomDelay", &crate::duration::iso8601(d)),
        None => Ok(()),
    };
    match t {
        Trigger::Repeat { start, interval } => {
            w.create_element("TimeTrigger").write_inner_content(|w| {
                w.create_element("Repetition").write_inner_content(|w| {
                    leaf(w, "Interval", &crate::duration::iso8601(*interval))?;
                    leaf(w, "StopAtDurationEnd", "false")
                })?;
                leaf(w, "StartBoundary", start)?;
                leaf(w, "Enabled", "true")?;
                delay(w)
            })?;
        }
        Trigger::Daily { start, days } => {
            w.create_element("CalendarTrigger").write_inner_content(|w| {
                leaf(w, "StartBoundary", start)?;
                leaf(w, "Enabled", "true")?;
                delay(w)?;
                w.create_element("ScheduleByDay")
                    .write_inner_content(|w| leaf(w, "DaysInterval", &days.to_string()))?;
                Ok(())
            })?;
        }
        Trigger::Weekly { start, weekdays } => {
            w.create_element("CalendarTrigger").write_inner_content(|w| {
                leaf(w, "StartBoundary", start)?;
                leaf(w, "Enabled", "true")?;
                delay(w)?;
                w.create_element("ScheduleByWeek").write_inner_content(|w| {
                    leaf(w, "WeeksInterval", "1")?;
                    w.create_element("DaysOfWeek").write_inner_content(|w| {
                        for d in weekdays {
                            w.create_element(DAYS[usize::from(*d)]).write_empty()?;
                        }
                        Ok(())
                    })?;
                    Ok(())
                })?;
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// Daily (or weekly, on the listed weekdays) triggers, one per time of day.
fn calendar_triggers(expr: &str, now: &Zoned) -> Result<Vec<Trigger>, Unsupported> {
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
    let date = now.strftime("%Y-%m-%d");
    let mut out = Vec::new();
    for h in &c.hour.values {
        for m in &c.minute.values {
            let start = format!("{date}T{h:02}:{m:02}:00");
            out.push(match c.weekday.star {
                true => Trigger::Daily { start, days: 1 },
                false => Trigger::Weekly {
                    start,
                    weekdays: c.weekday.values.iter().copied().collect(),
                },
            });
        }
    }
    Ok(out)
}

/// A command-line argument as Windows programs split them
/// (CommandLineToArgvW): quoted when it is empty or holds a space, tab or
/// quote; inside quotes, a quote is preceded by a backslash, and the
/// backslashes before a quote (or before the closing one) are doubled.
/// Elsewhere backslashes are literal.
fn arg(s: &str) -> String {
    if !s.is_empty() && !s.contains([' ', '\t', '\n', '\x0b', '"']) {
        return s.to_owned();
    }
    let mut out = String::from("\"");
    let mut backslashes = 0;
    for c in s.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                out.extend(std::iter::repeat_n('\\', backslashes * 2 + 1));
                out.push('"');
                backslashes = 0;
            }
            c => {
                out.extend(std::iter::repeat_n('\\', backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.extend(std::iter::repeat_n('\\', backslashes * 2));
    out.push('"');
    out
}

pub(super) fn remove(r: &Record) -> Vec<Action> {
    let mut a = vec![Action::run(&["schtasks", "/Delete", "/TN", &r.name, "/F"])];
    a.extend(r.files.iter().cloned().map(Action::Delete));
    a
}

pub(super) fn disable(r: &Record) -> Vec<Action> {
    vec![Action::run(&["schtasks", "/Change", "/TN", &r.name, "/DISABLE"])]
}

pub(super) fn enable(r: &Record) -> Vec<Action> {
    vec![Action::run(&["schtasks", "/Change", "/TN", &r.name, "/ENABLE"])]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_as_command_line_to_argv_w_splits_them() {
        assert_eq!(arg("tick"), "tick");
        assert_eq!(
            arg(r"C:\bin\a.exe"),
            r"C:\bin\a.exe",
            "backslashes alone are literal"
        );
        assert_eq!(arg(""), r#""""#);
        assert_eq!(arg("a b"), r#""a b""#);
        assert_eq!(arg(r#"say "hi""#), r#""say \"hi\"""#);
        // A backslash before a quote: doubled, then the quote escaped.
        assert_eq!(arg(r#"a\"b"#), r#""a\\\"b""#);
        // Trailing backslashes before the closing quote are doubled.
        assert_eq!(arg(r"C:\my dir\"), r#""C:\my dir\\""#);
    }

    #[test]
    fn cron_maps_to_daily_or_weekly_triggers() {
        let now: Zoned = "2026-01-02T03:04:05[UTC]".parse().unwrap();
        let daily = calendar_triggers("0,30 9 * * *", &now).unwrap();
        assert_eq!(
            daily,
            [
                Trigger::Daily {
                    start: "2026-01-02T09:00:00".into(),
                    days: 1
                },
                Trigger::Daily {
                    start: "2026-01-02T09:30:00".into(),
                    days: 1
                }
            ]
        );
        let weekly = calendar_triggers("0 9 * * mon,fri", &now).unwrap();
        assert_eq!(
            weekly,
            [Trigger::Weekly {
                start: "2026-01-02T09:00:00".into(),
                weekdays: vec![1, 5]
            }]
        );
        assert!(
            calendar_triggers("0 9 1 * *", &now)
                .unwrap_err()
                .why
                .contains("daily")
        );
        assert!(
            calendar_triggers("*/5 * * * *", &now)
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
