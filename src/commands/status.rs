//! `status` and `list`: read without the lock (every write is an atomic
//! replace, so a reader never sees a torn state). Each loop is shown with
//! its config as a tick would load it: a config that no longer loads makes
//! the loop `invalid`, with the error, wherever it is listed.

use std::io::Write;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::Serialize;

use super::render::{ago, left, local, safe, table};
use crate::cli::StatusFilter;
use crate::config::{Cadence, ConfigError, Schedule};
use crate::daemon::When;
use crate::error::{Error, Exit, Result};
use crate::lock::Holder;
use crate::root::Root;
use crate::state::{Outcome, State};
use crate::store::{self, LoopStore};

/// A loop as `status --json` and `list --json` show it: its name, what its
/// config says, its state, when it is next due and who holds its lock.
#[derive(Serialize)]
pub struct LoopView<'a> {
    pub name: &'a str,
    pub description: Option<String>,
    /// `null` when loop.toml loads; else why it does not.
    pub config_error: Option<String>,
    #[serde(flatten)]
    pub state: &'a State,
    /// `every 15m`, `cron */15 * * * *`, with its jitter; `null` without one.
    pub schedule: Option<String>,
    /// When the daemon would fire it next, from its last tick; `null` when
    /// it has no schedule, is not active or its config is invalid.
    pub next_due: Option<Timestamp>,
    /// Where the last tick's step and verifier output is.
    pub last_run_dir: Option<PathBuf>,
    pub lock: Option<Holder>,
}

impl LoopView<'_> {
    /// The status an operator sees: the stored one, or `invalid`.
    pub fn shown_status(&self) -> String {
        match &self.config_error {
            Some(_) => "invalid".into(),
            None => self.state.status.to_string(),
        }
    }

    fn matches(&self, filter: StatusFilter) -> bool {
        use crate::state::Status;
        if self.config_error.is_some() {
            return filter == StatusFilter::Invalid;
        }
        match filter {
            StatusFilter::Active => self.state.status == Status::Active,
            StatusFilter::Paused => self.state.status == Status::Paused,
            StatusFilter::AwaitingApproval => self.state.status == Status::AwaitingApproval,
            StatusFilter::Halted => self.state.status == Status::Halted,
            StatusFilter::Completed => self.state.status == Status::Completed,
            StatusFilter::Invalid => false,
            StatusFilter::Failing => self.state.consecutive_failures > 0,
        }
    }
}

pub fn view<'a>(dir: &'a dyn LoopStore, state: &'a State) -> LoopView<'a> {
    let (config, config_error) = match dir.config() {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let mut v = LoopView {
        name: dir.name().as_str(),
        description: config.as_ref().and_then(|c| c.description.clone()),
        config_error,
        state,
        schedule: config
            .as_ref()
            .and_then(|c| c.schedule.as_ref())
            .map(describe_schedule),
        next_due: None,
        last_run_dir: state
            .last_tick
            .as_ref()
            .map(|t| crate::runs::run_path(dir.base_dir(), t.number))
            .filter(|p| p.is_dir()),
        lock: LoopStore::holder(dir),
    };
    if let Some(schedule) = config.as_ref().and_then(|c| c.schedule.as_ref()) {
        match next_due(schedule, state, crate::clock::now()) {
            Ok(due) => v.next_due = due,
            Err(message) => {
                let path = dir.config_path();
                v.config_error = Some(ConfigError::Schedule { path, message }.to_string());
            }
        }
    }
    v
}

fn describe_schedule(s: &Schedule) -> String {
    let mut text = match &s.cadence {
        Cadence::Every(d) => format!("every {d}"),
        Cadence::Cron(expr) => format!("cron {expr}"),
    };
    if let Some(j) = s.jitter {
        text += &format!(" (jitter {j})");
    }
    text
}

/// When the daemon, starting now, would fire a loop: from the start of its
/// last tick, or now if that is overdue (the same `When` the daemon uses).
fn next_due(schedule: &Schedule, state: &State, now: Timestamp) -> Result<Option<Timestamp>, String> {
    let when = When::of(schedule)?;
    if !state.status.is_runnable() {
        return Ok(None);
    }
    Ok(when.first(state.last_tick.as_ref().map(|t| t.started_at), now))
}

pub fn one(root: &Root, name: &str, json: bool, out: &mut dyn Write) -> Result<Exit> {
    let dir = crate::store::open(root, name)?;
    let dir = &*dir;
    let state = dir.load()?;
    let mut v = view(dir, &state);
    if v.config_error.is_none() {
        v.config_error = check_gates(root, dir).err().map(|e| e.to_string());
    }
    if json {
        super::emit_json(out, &v)?;
    } else {
        super::emit(out, &detail(&v))?;
    }
    Ok(Exit::Ok)
}

/// What `validate` finds wrong with the loop's gates (one missing, its
/// params refused), so one loop's status calls a config valid only when
/// `validate` would. A listing does not look: it would load every gate.
fn check_gates(root: &Root, dir: &dyn LoopStore) -> Result<()> {
    let config = dir.config()?;
    let shown = dir.config_path();
    super::new::check_gates(
        root,
        dir.base_dir(),
        &config,
        &shown,
        super::new::MissingGate::Error,
    )
}

/// A loop in a listing: its view, or why its state could not be read.
#[derive(Serialize)]
#[serde(untagged)]
enum Listed<'a> {
    Loop(LoopView<'a>),
    Unreadable { name: &'a str, error: String },
}

pub fn all(root: &Root, filter: &[StatusFilter], json: bool, out: &mut dyn Write) -> Result<Exit> {
    let dirs = store::Stores::open(root)?.list()?;
    let mut states = Vec::with_capacity(dirs.len());
    let mut first_error: Option<Error> = None;
    for dir in &dirs {
        match dir.load() {
            Ok(state) => states.push(Ok(state)),
            Err(e) => {
                states.push(Err(e.to_string()));
                first_error.get_or_insert(e);
            }
        }
    }
    let listed: Vec<Listed<'_>> = dirs
        .iter()
        .zip(&states)
        .map(|(dir, s)| match s {
            Ok(state) => Listed::Loop(view(dir.as_ref(), state)),
            Err(e) => Listed::Unreadable {
                name: dir.name().as_str(),
                error: e.clone(),
            },
        })
        .filter(|l| {
            filter.is_empty()
                || match l {
                    Listed::Loop(v) => filter.iter().any(|f| v.matches(*f)),
                    Listed::Unreadable { .. } => filter.contains(&StatusFilter::Invalid),
                }
        })
        .collect();
    if json {
        super::emit_json(out, &listed)?;
    } else if dirs.is_empty() {
        super::emit(out, &format!("no loops in {}\n", root.path().display()))?;
    } else if listed.is_empty() {
        super::emit(out, "no loops in that status\n")?;
    } else {
        super::emit(out, &summary(&listed))?;
        if let Some(line) = crate::daemon::daemon_line(root) {
            super::emit(out, &format!("{}\n", safe(&line)))?;
        }
    }
    // Every readable loop was shown; an unreadable one is the exit status.
    match first_error {
        Some(e) => Err(e),
        None => Ok(Exit::Ok),
    }
}

/// The table, then one line a loop that cannot be used, saying why.
fn summary(listed: &[Listed<'_>]) -> String {
    let mut rows = vec![
        [
            "LOOP",
            "STATUS",
            "TICK",
            "SCHEDULE",
            "NEXT",
            "LAST",
            "APPROVALS",
            "LOCK",
            "DESCRIPTION",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut problems = String::new();
    for l in listed {
        match l {
            Listed::Loop(v) => {
                rows.push(summary_row(v));
                if let Some(e) = &v.config_error {
                    problems += &format!("{}: {}\n", v.name, safe(e));
                }
            }
            Listed::Unreadable { name, error } => {
                rows.push(vec![(*name).to_owned(), "unreadable".into()]);
                problems += &format!("{name}: {}\n", safe(error));
            }
        }
    }
    let mut text = table(&rows);
    if !problems.is_empty() {
        text.push('\n');
        text += &problems;
    }
    text
}

fn summary_row(v: &LoopView<'_>) -> Vec<String> {
    let s = v.state;
    let dash = || "-".to_owned();
    let last = match &s.last_tick {
        Some(t) => format!("{} {}", t.outcome, ago(t.ended_at)),
        None => "never".into(),
    };
    vec![
        v.name.to_owned(),
        v.shown_status(),
        s.tick.to_string(),
        v.schedule.clone().unwrap_or_else(dash),
        v.next_due.map_or_else(dash, left),
        last,
        s.pending_approvals.len().to_string(),
        v.lock.as_ref().map_or_else(dash, Holder::describe),
        v.description.clone().unwrap_or_default(),
    ]
}

/// One loop in detail: a row each of what it is, how its ticks went,
/// what it holds and who holds it.
fn detail(v: &LoopView<'_>) -> String {
    let mut rows = Rows::default();
    rows.identity(v);
    rows.ticks(v);
    rows.approvals(v.state);
    rows.holdings(v);
    table(&rows.0)
}

/// The rows of [`detail`]'s table: a key, then its value.
#[derive(Default)]
struct Rows(Vec<Vec<String>>);

impl Rows {
    fn row(&mut self, key: &str, value: String) {
        self.0.push(vec![key.to_owned(), value]);
    }

    /// Its name, description, status, config and schedule.
    fn identity(&mut self, v: &LoopView<'_>) {
        let s = v.state;
        self.row("loop", v.name.to_owned());
        if let Some(d) = &v.description {
            self.row("description", d.clone());
        }
        let status = match (&v.config_error, &s.status_reason) {
            (Some(_), _) => format!("invalid (stored status {})", s.status),
            (None, Some(r)) => format!("{} ({r})", s.status),
            (None, None) => s.status.to_string(),
        };
        self.row("status", status);
        self.row(
            "config",
            match &v.config_error {
                Some(e) => e.clone(),
                None => "valid".into(),
            },
        );
        if let Some(f) = &s.gate_error {
            self.row("gate error", format!("{} (since {})", f.error, local(f.since)));
        }
        self.row("schedule", v.schedule.clone().unwrap_or_else(|| "none".into()));
        if let Some(due) = v.next_due {
            self.row("next due", format!("{} ({})", local(due), left(due)));
        }
    }

    /// Its ticks: how many, the last and where its output is, failures.
    fn ticks(&mut self, v: &LoopView<'_>) {
        let s = v.state;
        self.row("ticks", format!("{} (state version {})", s.tick, s.version));
        match &s.last_tick {
            Some(t) => {
                self.row("last tick", describe_last(t));
                match t.host.as_deref().filter(|h| *h != crate::who::host()) {
                    Some(h) => self.row(
                        "output",
                        format!("on host {h}: automaton logs {} {} there", v.name, t.number),
                    ),
                    None if v.last_run_dir.is_some() => {
                        self.row("output", format!("automaton logs {} {}", v.name, t.number));
                    }
                    None => {}
                }
            }
            None => self.row("last tick", "never".into()),
        }
        self.row("failures", format!("{} in a row", s.consecutive_failures));
    }

    /// The approvals pending, one row each.
    fn approvals(&mut self, s: &State) {
        if s.pending_approvals.is_empty() {
            self.row("approvals", "none pending".into());
            return;
        }
        for (i, a) in s.pending_approvals.iter().enumerate() {
            let mut text = format!("{} by {} {}", a.id, a.by, ago(a.at));
            if let Some(n) = &a.note {
                text += &format!(": {n}");
            }
            self.row(if i == 0 { "approvals" } else { "" }, text);
        }
    }

    /// What it holds and who holds it: totals, worktree, the tick in
    /// flight, the lock, and when it was made and last changed.
    fn holdings(&mut self, v: &LoopView<'_>) {
        let s = v.state;
        if !s.totals.is_empty() {
            let totals: Vec<String> = s.totals.iter().map(|(k, v)| format!("{k}={v}")).collect();
            self.row("totals", totals.join(" "));
        }
        if let Some(w) = &s.worktree {
            self.row("worktree", format!("{} ({})", w.path.display(), w.branch));
        }
        if let Some(f) = &s.in_flight {
            self.row(
                "in flight",
                format!(
                    "tick {} by pid {} on {} since {}",
                    f.tick,
                    f.pid,
                    f.host,
                    local(f.started_at)
                ),
            );
        }
        self.row(
            "lock",
            v.lock
                .as_ref()
                .map_or_else(|| "free".to_owned(), |h| format!("held by {}", h.describe())),
        );
        self.row("created", local(s.created_at));
        self.row(
            "updated",
            format!("{} ({})", local(s.updated_at), ago(s.updated_at)),
        );
    }
}

/// `#3 failed 2m ago, step exited 3 in 18ms`.
fn describe_last(t: &crate::state::LastTick) -> String {
    let mut text = format!("#{} {} {}", t.number, t.outcome, ago(t.ended_at));
    if let Some(step) = &t.step {
        text += &format!(", step {step}");
    }
    if let Some(v) = &t.verifier {
        text += if v.success() {
            ", verifier passed"
        } else {
            ", verifier failed"
        };
    }
    if t.outcome == Outcome::Failed && t.step.is_none() {
        text += ", step did not start";
    }
    text
}
