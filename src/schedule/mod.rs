//! Scheduling (docs/scheduling.md): what fires a loop's ticks. `schedule install`
//! hands the loop's cadence to an OS scheduler (one file a backend), records
//! what it installed (`record`), and the halt and resume hooks switch that
//! schedule off and on. The embedded scheduler is `crate::daemon`.

pub(crate) mod cadence;
mod crontab;
mod exec;
mod launchd;
pub(crate) mod record;
mod schtasks;
mod systemd;

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{LoopConfig, Schedule};
use crate::error::Result;
use crate::root::{LoopName, Root};

pub(crate) use cadence::Unsupported;
pub(crate) use exec::Action;
pub(crate) use record::Record;

/// The OS schedulers a loop's schedule can be installed into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A systemd user timer and service (`~/.config/systemd/user/`).
    Systemd,
    /// A launchd agent (`~/Library/LaunchAgents/`).
    Launchd,
    /// A line in the user's crontab.
    Cron,
    /// A Windows Task Scheduler task.
    Schtasks,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Systemd => "systemd",
            Backend::Launchd => "launchd",
            Backend::Cron => "cron",
            Backend::Schtasks => "schtasks",
        }
    }

    /// This platform's scheduler: launchd on macOS, Task Scheduler on
    /// Windows; elsewhere systemd when `systemctl --user` answers, else cron.
    pub fn default_here() -> Backend {
        if cfg!(target_os = "macos") {
            Backend::Launchd
        } else if cfg!(windows) {
            Backend::Schtasks
        } else if exec::succeeds(&["systemctl", "--user", "show-environment"]) {
            Backend::Systemd
        } else {
            Backend::Cron
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why scheduling could not be done.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("loop {name:?} has no [schedule] in its loop.toml: add `every = \"15m\"` or `cron = \"…\"`")]
    NoSchedule { name: String },
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    #[error(
        "loop {name:?} has no installed schedule on record; if an install failed half-way, `automaton schedule remove {name} --backend B` removes what it left"
    )]
    NotInstalled { name: String },
    #[error("`{command}` failed ({status}){}", if stderr.is_empty() { String::new() } else { format!(": {stderr}") })]
    Command {
        command: String,
        status: String,
        /// The exit code, when it exited rather than died by a signal.
        code: Option<i32>,
        stderr: String,
    },
    #[error("cannot run `{command}`")]
    Spawn {
        command: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "schedule record {} is unreadable; it was left untouched (`automaton schedule remove {name} --backend B` removes the schedule and its record)",
        path.display()
    )]
    BadRecord {
        name: String,
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot find the home directory: HOME is not set")]
    NoHome,
    #[error("cannot find the path of this executable")]
    NoExecutable(#[source] io::Error),
}

/// What a backend needs to know to install a loop's schedule.
#[derive(Debug, Clone)]
pub(crate) struct Job<'a> {
    pub loop_name: &'a str,
    pub root: &'a Path,
    /// `<loop>-<hash of the root>`: unique per root and loop.
    pub name: String,
    /// `<abs exe> --root <abs root> tick <loop> --fired-by <backend>`.
    pub command: Vec<String>,
    pub schedule: &'a Schedule,
    pub home: PathBuf,
}

/// `cadence` as loop.toml writes it: `every = "5m"` or `cron = "…"`.
pub(crate) fn describe(s: &Schedule) -> String {
    s.describe()
}

fn home() -> Result<PathBuf, ScheduleError> {
    let home = std::env::var_os("HOME");
    // Windows: the profile directory, where HOME is seldom set.
    #[cfg(windows)]
    let home = home
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var_os("USERPROFILE"));
    home.filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or(ScheduleError::NoHome)
}

/// What `install` would do: the record it would leave, and its actions (an
/// installed schedule of the loop is removed first). Warns when the backend
/// cannot apply the loop's `jitter`: once, for the install or its dry run.
pub(crate) fn plan_install(
    root: &Root,
    name: &LoopName,
    config: &LoopConfig,
    backend: Option<Backend>,
) -> Result<(Record, Vec<Action>)> {
    let (record, actions, schedule) = plan(root, name, config, backend, true)?;
    let name = name.as_str();
    if ignores_jitter(&schedule, record.backend) {
        let backend = record.backend;
        tracing::warn!("loop {name:?}: {backend} has no jitter; `jitter` is not applied");
    }
    Ok((record, actions))
}

/// Whether `schedule` has a jitter that `backend` cannot apply (cron and
/// launchd have none).
pub(crate) fn ignores_jitter(schedule: &Schedule, backend: Backend) -> bool {
    schedule.jitter.is_some() && matches!(backend, Backend::Cron | Backend::Launchd)
}

/// What an install of loop `name` with `backend` would make, whatever the
/// record says (it may be unreadable): what `schedule remove --backend`
/// removes.
pub(crate) fn plan_fresh(
    root: &Root,
    name: &LoopName,
    config: &LoopConfig,
    backend: Backend,
) -> Result<(Record, Vec<Action>)> {
    plan(root, name, config, Some(backend), false).map(|(record, actions, _)| (record, actions))
}

/// The record and actions of an install, and the schedule they are of.
fn plan(
    root: &Root,
    name: &LoopName,
    config: &LoopConfig,
    backend: Option<Backend>,
    replace: bool,
) -> Result<(Record, Vec<Action>, Schedule)> {
    let schedule = config.schedule.clone().ok_or_else(|| ScheduleError::NoSchedule {
        name: name.as_str().into(),
    })?;
    let exe = std::env::current_exe().map_err(ScheduleError::NoExecutable)?;
    let backend = backend.unwrap_or_else(Backend::default_here);
    let job = Job {
        loop_name: name.as_str(),
        root: root.path(),
        name: format!("{}-{}", name, record::root_hash(root.path())),
        command: vec![
            exe.display().to_string(),
            "--root".into(),
            root.path().display().to_string(),
            "tick".into(),
            name.to_string(),
            // So the tick's history and the ledger say what fired it.
            "--fired-by".into(),
            backend.as_str().into(),
        ],
        schedule: &schedule,
        home: home()?,
    };
    let mut actions = match replace {
        true => record::read(root, name.as_str())?
            .map(|old| removal(&old))
            .unwrap_or_default(),
        false => Vec::new(),
    };
    if let Some(tz) = &schedule.timezone
        && backend != Backend::Systemd
    {
        return Err(Unsupported::new(
            backend.as_str(),
            describe(&schedule),
            format!("it reads times in the machine's time zone, not {tz}; use systemd or the daemon"),
        )
        .into());
    }
    let (unit, install) = match backend {
        Backend::Systemd => systemd::install(&job)?,
        Backend::Launchd => launchd::install(&job)?,
        Backend::Cron => crontab::install(&job)?,
        Backend::Schtasks => schtasks::install(&job)?,
    };
    let record = Record {
        loop_name: name.to_string(),
        backend,
        name: unit,
        cadence: describe(&schedule),
        command: job.command.clone(),
        files: install.iter().filter_map(Action::written).collect(),
        enabled: true,
        installed_at: crate::clock::now(),
    };
    actions.extend(install);
    Ok((record, actions, schedule))
}

/// Installs loop `name`'s schedule, as `config` has it, and records it.
pub(crate) fn install(
    root: &Root,
    name: &LoopName,
    config: &LoopConfig,
    backend: Option<Backend>,
) -> Result<Record> {
    let (record, actions) = plan_install(root, name, config, backend)?;
    exec::perform(&actions)?;
    record::write(root, &record)?;
    if record.backend == Backend::Systemd && systemd::lingering() == Some(false) {
        tracing::warn!(
            "lingering is off for {user}: systemd stops user timers when {user} logs out; \
             `loginctl enable-linger {user}` keeps them running (see docs/scheduling.md)",
            user = crate::who::os_user()
        );
    }
    Ok(record)
}

/// The actions that remove the schedule `r` describes.
pub(crate) fn removal(r: &Record) -> Vec<Action> {
    match r.backend {
        Backend::Systemd => systemd::remove(r),
        Backend::Launchd => launchd::remove(r),
        Backend::Cron => crontab::remove(r),
        Backend::Schtasks => schtasks::remove(r),
    }
}

/// What `remove` would do.
pub(crate) fn plan_remove(root: &Root, name: &str) -> Result<(Record, Vec<Action>)> {
    LoopName::new(name)?;
    let r = record::read(root, name)?.ok_or_else(|| ScheduleError::NotInstalled { name: name.into() })?;
    let actions = removal(&r);
    Ok((r, actions))
}

/// Does a removal planned for `r`, then forgets its record.
pub(crate) fn perform_removal(root: &Root, r: &Record, actions: &[Action]) -> Result<()> {
    exec::perform(actions)?;
    record::delete(root, &r.loop_name)
}

/// Turns an installed schedule off or on, and records that. Best effort:
/// a failure is logged, never returned.
fn switch(root: &Root, name: &str, on: bool) {
    let r = match record::read(root, name) {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("loop {:?}: cannot read its schedule record: {e}", name);
            return;
        }
    };
    if r.enabled == on {
        return;
    }
    let actions = match (r.backend, on) {
        (Backend::Systemd, false) => systemd::disable(&r),
        (Backend::Systemd, true) => systemd::enable(&r),
        (Backend::Launchd, false) => launchd::disable(&r),
        (Backend::Launchd, true) => launchd::enable(&r),
        (Backend::Cron, false) => crontab::disable(&r),
        (Backend::Cron, true) => crontab::enable(&r),
        (Backend::Schtasks, false) => schtasks::disable(&r),
        (Backend::Schtasks, true) => schtasks::enable(&r),
    };
    let verb = if on { "enable" } else { "disable" };
    if let Err(e) = exec::perform(&actions) {
        tracing::warn!(
            "loop {:?}: could not {verb} its {} schedule: {e}",
            name,
            r.backend
        );
        return;
    }
    let updated = Record { enabled: on, ..r };
    match record::write(root, &updated) {
        Ok(()) => tracing::info!("loop {:?}: {verb}d its {} schedule", name, updated.backend),
        Err(e) => tracing::warn!(
            "loop {:?}: {verb}d its schedule but could not record it: {e}",
            name
        ),
    }
}

/// Called once, outside the loop's lock, after a tick (or `check-gate
/// --apply`) halted or completed the loop: an OS schedule that kept firing
/// a stopped loop would only make `inactive` ticks, so it is disabled.
/// Best effort; never fails the tick.
pub(crate) fn loop_stopped(root: &Root, name: &str) {
    switch(root, name, false);
}

/// Called by `resume`, outside the lock: enables a schedule that a halt or
/// completion disabled. Best effort.
pub(crate) fn loop_resumed(root: &Root, name: &LoopName) {
    switch(root, name.as_str(), true);
}

/// Called after `rm`: a schedule left behind would fire ticks of a loop
/// that no longer exists, so it is removed too. Best effort.
pub(crate) fn loop_removed(root: &Root, name: &LoopName) {
    let (r, actions) = match plan_remove(root, name.as_str()) {
        Ok(plan) => plan,
        Err(crate::Error::Schedule(ScheduleError::NotInstalled { .. })) => return,
        Err(e) => {
            tracing::warn!("loop {:?}: cannot read its schedule record: {e}", name.as_str());
            return;
        }
    };
    match perform_removal(root, &r, &actions) {
        Ok(()) => tracing::info!("loop {:?}: removed its {} schedule", name.as_str(), r.backend),
        Err(e) => tracing::warn!(
            "loop {:?}: could not remove its {} schedule {}: {e}; `automaton schedule remove` retries",
            name.as_str(),
            r.backend,
            r.name
        ),
    }
}

impl From<Unsupported> for crate::Error {
    fn from(e: Unsupported) -> crate::Error {
        crate::Error::Schedule(e.into())
    }
}
