//! The actions a backend asks for (write a file, delete one, run a
//! scheduler command, edit the crontab), done for real or shown for
//! `--dry-run`. Scheduler commands are found on `PATH`.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::ScheduleError;
use super::crontab::{self, Edit};
use crate::error::{Error, Result};

/// One thing installing, removing, disabling or enabling a schedule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Write a file (mode 0600: the user's own scheduler reads it), making
    /// its directory (0700) if need be.
    Write { path: PathBuf, text: String },
    /// Delete a file; one already gone is fine.
    Delete(PathBuf),
    /// Run a command; it must succeed.
    Run(Vec<String>),
    /// Like `Run`, but a failure is only logged (the thing to undo may
    /// already be undone).
    RunLenient(Vec<String>),
    /// Read the crontab (`crontab -l`), change it, install it (`crontab -`).
    Crontab(Edit),
}

impl Action {
    pub(crate) fn run(argv: &[&str]) -> Action {
        Action::Run(argv.iter().map(std::string::ToString::to_string).collect())
    }

    pub(crate) fn lenient(argv: &[&str]) -> Action {
        Action::RunLenient(argv.iter().map(std::string::ToString::to_string).collect())
    }

    /// The file this action writes, if it writes one.
    pub(crate) fn written(&self) -> Option<PathBuf> {
        match self {
            Action::Write { path, .. } => Some(path.clone()),
            _ => None,
        }
    }
}

impl fmt::Display for Action {
    /// What `--dry-run` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Write { path, text } => {
                writeln!(f, "write {}:", path.display())?;
                for line in text.lines() {
                    writeln!(f, "    {line}")?;
                }
                Ok(())
            }
            Action::Delete(path) => writeln!(f, "delete {}", path.display()),
            Action::Run(argv) => writeln!(f, "run: {}", argv.join(" ")),
            Action::RunLenient(argv) => writeln!(f, "run (a failure is ignored): {}", argv.join(" ")),
            Action::Crontab(edit) => {
                writeln!(f, "run: crontab -l, then `crontab -` with the crontab changed:")?;
                match edit {
                    Edit::Add { marker, line } => writeln!(f, "    add:\n    {marker}\n    {line}"),
                    Edit::Remove { marker } => writeln!(f, "    remove the line after {marker}"),
                    Edit::Disable { marker } => writeln!(f, "    comment out the line after {marker}"),
                    Edit::Enable { marker } => writeln!(f, "    uncomment the line after {marker}"),
                }
            }
        }
    }
}

/// Does `actions` in order, stopping at the first failure.
pub(super) fn perform(actions: &[Action]) -> Result<()> {
    for a in actions {
        match a {
            Action::Write { path, text } => write(path, text)?,
            Action::Delete(path) => match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(Error::io("removing", path)(e));
                }
                _ => {}
            },
            Action::Run(argv) => {
                output(argv, None)?;
            }
            Action::RunLenient(argv) => {
                if let Err(e) = output(argv, None) {
                    tracing::info!("{e}");
                }
            }
            Action::Crontab(edit) => {
                let current = current_crontab()?.unwrap_or_default();
                let changed = crontab::apply(&current, edit);
                if changed.is_empty() && !current.is_empty() {
                    // Our last line gone: no crontab, as before the install,
                    // rather than an empty one.
                    output(&["crontab".into(), "-r".into()], None)?;
                } else if changed != current {
                    output(&["crontab".into(), "-".into()], Some(&changed))?;
                }
            }
        }
    }
    Ok(())
}

fn write(path: &std::path::Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        crate::fsx::create_dirs(dir)?;
    }
    let mut f = crate::fsx::create_mode(
        fs::OpenOptions::new().write(true).create(true).truncate(true),
        0o600,
    )
    .open(path)
    .map_err(Error::io("creating", path))?;
    crate::fsx::Modes::PRIVATE
        .set_file(&f)
        .map_err(Error::io("setting the mode of", path))?;
    f.write_all(text.as_bytes()).map_err(Error::io("writing", path))
}

/// The user's crontab (`crontab -l`), or `None` when they have none.
fn current_crontab() -> Result<Option<String>, ScheduleError> {
    match output(&["crontab".into(), "-l".into()], None) {
        Ok(text) => Ok(Some(text)),
        Err(ScheduleError::Command { code, stderr, .. }) if crontab::says_none(code, &stderr) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs `argv` (with `stdin`), returning its stdout; a failure carries its
/// exit code and stderr.
fn output(argv: &[String], stdin: Option<&str>) -> Result<String, ScheduleError> {
    let command = argv.join(" ");
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    tracing::debug!("running {command}");
    let spawn = |source| ScheduleError::Spawn {
        command: command.clone(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn)?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).map_err(spawn)?;
    }
    let out = child.wait_with_output().map_err(spawn)?;
    if !out.status.success() {
        return Err(ScheduleError::Command {
            command,
            status: out.status.to_string(),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `argv` runs and exits 0 (its output is dropped).
/// What `argv` prints when it succeeds; `None` when it cannot run or fails.
pub(super) fn stdout_of(argv: &[&str]) -> Option<String> {
    let argv: Vec<String> = argv.iter().map(|a| (*a).to_owned()).collect();
    output(&argv, None).ok()
}

pub(super) fn succeeds(argv: &[&str]) -> bool {
    Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
