//! The cron backend: one line in the user's crontab, under a marker comment
//! naming the loop and root (`# automaton <loop>-<hash>: loop … in …`), so
//! remove, disable and enable touch exactly that line and nothing else.
//! Disabling comments the line out. cron has no jitter.

use super::cadence::{CronSpec, every_as_cron};
use super::exec::Action;
use super::{Job, Record, Unsupported};
use crate::config::Cadence;

/// A change to the crontab's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Edit {
    /// Put `marker` and `line` at the end (replacing an earlier pair).
    Add { marker: String, line: String },
    /// Remove the marker that starts with `marker`, and its line.
    Remove { marker: String },
    /// Comment out the line after the marker.
    Disable { marker: String },
    /// Uncomment the line after the marker.
    Enable { marker: String },
}

/// Whether a failed `crontab -l` (its exit code and stderr) means the user
/// has no crontab yet, which installing treats as an empty one. crontab(1)
/// has no exit status of its own for this (it exits 1, as it does when the
/// user is denied cron), so its message is the only sign; Vixie cron,
/// cronie, busybox and macOS all say `no crontab for USER`. This is the one
/// place that reads it.
pub(super) fn says_none(code: Option<i32>, stderr: &str) -> bool {
    code == Some(1) && stderr.to_ascii_lowercase().contains("no crontab")
}

/// The start of the marker line of the schedule named `name`.
fn marker(name: &str) -> String {
    format!("# automaton {name}:")
}

pub(super) fn install(job: &Job) -> Result<(String, Vec<Action>), Unsupported> {
    let when = schedule(&job.schedule.cadence)?;
    let command: Vec<String> = job.command.iter().map(|a| quote(a)).collect();
    let line = format!("{when} {}", command.join(" "));
    let marker = format!(
        "{} loop {} in {}",
        marker(&job.name),
        job.loop_name,
        job.root.display()
    );
    Ok((
        job.name.clone(),
        vec![Action::Crontab(Edit::Add { marker, line })],
    ))
}

/// The five time fields for `cadence`; crontab(5) syntax only.
pub(super) fn schedule(cadence: &Cadence) -> Result<String, Unsupported> {
    match cadence {
        Cadence::Every(d) => every_as_cron("cron", d.0),
        Cadence::Cron(expr) => {
            CronSpec::parse(expr).map_err(|why| Unsupported::new("cron", format!("cron = {expr:?}"), why))?;
            Ok(expr.split_whitespace().collect::<Vec<_>>().join(" "))
        }
    }
}

pub(super) fn remove(r: &Record) -> Vec<Action> {
    vec![Action::Crontab(Edit::Remove {
        marker: marker(&r.name),
    })]
}

pub(super) fn disable(r: &Record) -> Vec<Action> {
    vec![Action::Crontab(Edit::Disable {
        marker: marker(&r.name),
    })]
}

pub(super) fn enable(r: &Record) -> Vec<Action> {
    vec![Action::Crontab(Edit::Enable {
        marker: marker(&r.name),
    })]
}

/// A shell word for sh, as cron runs it: single-quoted, and `%` (which cron
/// turns into a newline) escaped.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''")).replace('%', "\\%")
}

/// `current` with `edit` applied; other lines are kept as they are.
pub(super) fn apply(current: &str, edit: &Edit) -> String {
    let prefix = match edit {
        Edit::Add { marker, .. } => marker.split(':').next().unwrap_or_default().to_owned() + ":",
        Edit::Remove { marker } | Edit::Disable { marker } | Edit::Enable { marker } => marker.clone(),
    };
    let mut out: Vec<String> = Vec::new();
    let mut lines = current.lines();
    while let Some(l) = lines.next() {
        if !l.starts_with(&prefix) {
            out.push(l.to_owned());
            continue;
        }
        let job = lines.next();
        match (edit, job) {
            (Edit::Add { .. } | Edit::Remove { .. }, _) => {}
            (Edit::Disable { .. }, Some(j)) => {
                out.push(l.to_owned());
                out.push(if j.starts_with('#') {
                    j.to_owned()
                } else {
                    format!("#{j}")
                });
            }
            (Edit::Enable { .. }, Some(j)) => {
                out.push(l.to_owned());
                out.push(j.strip_prefix('#').unwrap_or(j).to_owned());
            }
            (_, None) => out.push(l.to_owned()),
        }
    }
    if let Edit::Add { marker, line } = edit {
        out.push(marker.clone());
        out.push(line.clone());
    }
    let mut text = out.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_crontab_is_told_from_other_failures() {
        assert!(says_none(Some(1), "no crontab for alice"));
        assert!(says_none(Some(1), "crontab: no crontab for alice"));
        assert!(!says_none(
            Some(1),
            "You (alice) are not allowed to use this program"
        ));
        assert!(!says_none(None, "no crontab for alice"), "killed by a signal");
    }

    fn add(name: &str) -> Edit {
        Edit::Add {
            marker: format!("# automaton {name}: loop x in /r"),
            line: format!("* * * * * run {name}"),
        }
    }

    #[test]
    fn edits_touch_only_their_lines() {
        let mine = "MAILTO=me\n0 * * * * backup\n";
        let t = apply(mine, &add("x-1"));
        let t = apply(&t, &add("x-10"));
        assert_eq!(t.lines().count(), 6);
        let off = apply(
            &t,
            &Edit::Disable {
                marker: marker("x-1"),
            },
        );
        assert!(off.contains("#* * * * * run x-1\n"));
        assert!(off.contains("\n* * * * * run x-10\n"), "{off}");
        assert_eq!(
            apply(
                &off,
                &Edit::Enable {
                    marker: marker("x-1")
                }
            ),
            t
        );
        // Installing again replaces, not duplicates.
        assert_eq!(apply(&t, &add("x-1")).matches("run x-1\n").count(), 1);
        let gone = apply(
            &t,
            &Edit::Remove {
                marker: marker("x-1"),
            },
        );
        assert_eq!(
            apply(
                &gone,
                &Edit::Remove {
                    marker: marker("x-10")
                }
            ),
            mine
        );
    }

    #[test]
    fn words_are_quoted_for_sh_and_cron() {
        assert_eq!(quote("/a b/it's 100%"), "'/a b/it'\\''s 100\\%'");
    }
}
