//! `status` and `list`: read without the lock (every write is an atomic
//! replace, so a reader never sees a torn state). Each loop is shown with
//! its config as a tick would load it: a config that no longer loads makes
//! the loop `invalid`, with the error, wherever it is listed.

use std::io::Write;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::Serialize;

use super::render::{ago, coarse, fitted_table, left, local, number, safe, table};
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
    /// How long ago its next firing came due, when it has and no tick of
    /// it runs (a table says `overdue 3h`; JSON has `next_due`).
    #[serde(skip)]
    pub overdue: Option<std::time::Duration>,
    /// Whether it is overdue with nothing to fire it: no daemon serves
    /// the root and no OS schedule of it is on (`status NAME` says so).
    #[serde(skip)]
    pub unfired: bool,
    /// The gate that halted or completed it, with its phase and tick
    /// (`status NAME` reads it from the history).
    #[serde(skip)]
    pub stopped_by: Option<(String, crate::gate::Phase, u64)>,
    /// The last run of firings its schedule called for that no tick filled
    /// (`status NAME` reads it from the ledger of firings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_missed: Option<crate::fires::Fire>,
    /// The run of firings the daemon's user was refused, when the ledger
    /// ends with one: the daemon may not tick it (`status NAME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_firings: Option<crate::fires::Fire>,
    /// The OS scheduler its schedule is installed in (`status NAME`): it
    /// fires the loop, and a daemon does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os_schedule: Option<crate::schedule::Backend>,
    /// Its `[access]` lists, when its config loads (a server shows it
    /// only to its viewers).
    #[serde(skip)]
    pub access: Option<crate::access::Access>,
    /// The sha256 of the config's files as they are now, when they differ
    /// from those last recorded (`status NAME`; not yet recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrecorded_config: Option<crate::rules::Hashes>,
    /// The config changes recorded since the last approval (`status NAME`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_changes: Vec<super::review::ConfigChangeReview>,
    /// Whether its step runs unconfined (`[step] confine = "off"`): only
    /// present, as `true`, when it does.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unconfined: bool,
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

    /// The tick running now, when a tick holds the loop's lock: its
    /// number and when it took the lock.
    pub fn running(&self) -> Option<(u64, Timestamp)> {
        self.lock
            .as_ref()
            .filter(|h| h.command == "tick")
            .and_then(|h| h.tick.map(|t| (t, h.since)))
    }
}

pub fn view<'a>(dir: &'a dyn LoopStore, state: &'a State) -> LoopView<'a> {
    view_read(dir, state, dir.config(), LoopStore::holder(dir))
}

/// The view of a loop whose config and lock holder were read already.
fn view_read<'a>(
    dir: &'a dyn LoopStore,
    state: &'a State,
    config: Result<crate::config::LoopConfig>,
    lock: Option<Holder>,
) -> LoopView<'a> {
    let (config, config_error) = match config {
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
        lock,
        overdue: None,
        unfired: false,
        stopped_by: None,
        last_missed: None,
        refused_firings: None,
        os_schedule: None,
        access: config.as_ref().map(|c| c.access()),
        unrecorded_config: None,
        config_changes: Vec::new(),
        unconfined: config
            .as_ref()
            .is_some_and(|c| c.step.confine == crate::config::Confine::Off),
    };
    if let Some(schedule) = config.as_ref().and_then(|c| c.schedule.as_ref()) {
        let running = v.running().map(|(_, since)| since);
        match next_due(schedule, state, running, crate::clock::now()) {
            Ok(Due { next, overdue }) => {
                v.next_due = next;
                v.overdue = overdue;
            }
            Err(message) => {
                let path = dir.config_path();
                v.config_error = Some(ConfigError::Schedule { path, message }.to_string());
            }
        }
    }
    v
}

impl LoopView<'_> {
    /// The schedule without its jitter, as the table shows it.
    fn schedule_cadence(&self) -> Option<String> {
        self.schedule
            .as_deref()
            .map(|s| s.split(" (jitter").next().unwrap_or(s).to_owned())
    }
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

/// When a loop is next due, and how long it has been due.
struct Due {
    next: Option<Timestamp>,
    overdue: Option<std::time::Duration>,
}

/// When the daemon, starting now, would fire a loop: from the start of its
/// running tick, else of its last, or now if that is overdue (the same
/// `When` the daemon uses); and, when it is overdue and no tick of it
/// runs, since when (a loop that never ticked was due when it was made).
fn next_due(
    schedule: &Schedule,
    state: &State,
    running: Option<Timestamp>,
    now: Timestamp,
) -> Result<Due, String> {
    let when = When::of(schedule)?;
    if !state.status.is_runnable() {
        return Ok(Due {
            next: None,
            overdue: None,
        });
    }
    let last = running.or(state.last_tick.as_ref().map(|t| t.started_at));
    let came_due = match (last, &when) {
        (Some(l), _) => when.first(Some(l), Timestamp::MIN),
        (None, When::Every(_)) => Some(state.created_at),
        (None, When::Cron(_)) => when.first(None, state.created_at),
    };
    let overdue = came_due
        .filter(|_| running.is_none())
        .and_then(|d| std::time::Duration::try_from(now.duration_since(d)).ok())
        .filter(|d| !d.is_zero());
    Ok(Due {
        next: when.first(last, now),
        overdue,
    })
}

pub fn one(root: &Root, stores: &store::Stores, name: &str, json: bool, out: &mut dyn Write) -> Result<Exit> {
    let dir = stores.get(name)?;
    let dir = &*dir;
    let state = dir.load()?;
    let mut v = view(dir, &state);
    if v.config_error.is_none() {
        v.config_error = check_gates(root, dir).err().map(|e| e.to_string());
    }
    v.stopped_by = stopped_by(dir, &state);
    v.unfired = !serving(&crate::daemon::daemon_status(root)) && !unfired(root, [&v]).is_empty();
    let fires = dir.fires(None).unwrap_or_else(|e| {
        tracing::warn!("{e}");
        Vec::new()
    });
    v.last_missed = crate::fires::last_missed(&fires).cloned();
    v.refused_firings = crate::fires::refused_now(&fires).cloned();
    v.os_schedule = crate::schedule::record::read(root, name)
        .ok()
        .flatten()
        .map(|r| r.backend);
    v.unrecorded_config = super::review::unrecorded(root, dir, &state);
    v.config_changes = match dir.history() {
        Ok(h) => super::review::config_changes(&h.events),
        Err(e) => {
            tracing::warn!("{e}");
            Vec::new()
        }
    };
    if json {
        super::emit_json(out, &v)?;
    } else {
        super::emit(out, &detail(&v))?;
    }
    Ok(Exit::Ok)
}

/// What `validate` finds wrong with the loop's schedule and gates (one
/// missing, its params refused), so one loop's status calls a config valid only when
/// `validate` would. A listing does not look: it would load every gate.
fn check_gates(root: &Root, dir: &dyn LoopStore) -> Result<()> {
    let config = dir.config()?;
    let shown = dir.config_path();
    super::validate::check_config(root, dir.base_dir(), &config, &shown)
}

/// A loop in a listing: its view, or why its state could not be read.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Listed<'a> {
    Loop(Box<LoopView<'a>>),
    Unreadable { name: &'a str, error: String },
}

/// Every loop as a listing reads it: each one's state (or why it could
/// not be read), config and lock holder, and the first error.
pub struct Reading {
    dirs: Vec<Box<dyn LoopStore>>,
    states: Vec<Result<State, String>>,
    rest: Vec<(Result<crate::config::LoopConfig>, Option<Holder>)>,
    pub first_error: Option<Error>,
}

/// Reads every loop of `stores` for a listing.
pub fn read(stores: &dyn store::Store) -> Result<Reading> {
    let mut reading = Reading {
        dirs: Vec::new(),
        states: Vec::new(),
        rest: Vec::new(),
        first_error: None,
    };
    for r in stores.read_all()? {
        let first_error = &mut reading.first_error;
        reading.states.push(r.state.map_err(|e| {
            let shown = e.to_string();
            first_error.get_or_insert(e);
            shown
        }));
        reading.dirs.push(r.dir);
        reading.rest.push((r.config, r.holder));
    }
    Ok(reading)
}

impl Reading {
    /// The listing: what `list --json` shows.
    pub fn listing(&mut self) -> Vec<Listed<'_>> {
        let rest = std::mem::take(&mut self.rest);
        self.dirs
            .iter()
            .zip(&self.states)
            .zip(rest)
            .map(|((dir, s), (config, holder))| match s {
                Ok(state) => Listed::Loop(Box::new(view_read(dir.as_ref(), state, config, holder))),
                Err(e) => Listed::Unreadable {
                    name: dir.name().as_str(),
                    error: e.clone(),
                },
            })
            .collect()
    }
}

pub fn all(
    root: &Root,
    stores: &store::Stores,
    filter: &[StatusFilter],
    json: bool,
    out: &mut dyn Write,
) -> Result<Exit> {
    let mut reading = read(&**stores)?;
    let first_error = reading.first_error.take();
    let none = reading.dirs.is_empty();
    let listed: Vec<Listed<'_>> = reading
        .listing()
        .into_iter()
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
    } else if none {
        super::emit(out, &format!("no loops in {}\n", root.path().display()))?;
    } else if listed.is_empty() {
        super::emit(out, "no loops in that status\n")?;
    } else {
        super::emit(out, &summary(&listed, super::render::output_width()))?;
        super::emit(out, &daemon_lines(root, &listed))?;
    }
    // Every readable loop was shown; an unreadable one is the exit status.
    match first_error {
        Some(e) => Err(e),
        None => Ok(Exit::Ok),
    }
}

/// The table, fitted to `width` (the description is cut first, then the
/// schedule), then one line a loop that cannot be used, saying why. The
/// APPROVALS and LOCK columns are there when a loop has approvals pending
/// or its lock held by an operator's command (a running tick shows in
/// STATUS instead).
fn summary(listed: &[Listed<'_>], width: Option<usize>) -> String {
    let loops = || {
        listed.iter().filter_map(|l| match l {
            Listed::Loop(v) => Some(v),
            Listed::Unreadable { .. } => None,
        })
    };
    let approvals = loops().any(|v| !v.state.pending_approvals.is_empty());
    let locks = loops().any(|v| v.lock.is_some() && v.running().is_none());
    let mut columns = vec!["LOOP", "STATUS", "TICK", "SCHEDULE", "NEXT", "LAST"];
    if approvals {
        columns.push("APPROVALS");
    }
    if locks {
        columns.push("LOCK");
    }
    columns.push("DESCRIPTION");
    let mut rows = vec![columns.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>()];
    let mut problems = String::new();
    for l in listed {
        match l {
            Listed::Loop(v) => {
                rows.push(summary_row(v, approvals, locks));
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
    let description = columns.len() - 1;
    let mut text = fitted_table(&rows, width, &[(description, 0), (3, 9), (5, 9)]);
    if !problems.is_empty() {
        text.push('\n');
        text += &problems;
    }
    text
}

fn summary_row(v: &LoopView<'_>, approvals: bool, locks: bool) -> Vec<String> {
    let s = v.state;
    let dash = || "-".to_owned();
    let last = match &s.last_tick {
        Some(t) => format!("{} {}", t.outcome, ago(t.ended_at)),
        None => "never".into(),
    };
    let status = match v.running() {
        Some((tick, since)) if v.config_error.is_none() => format!("running (tick {tick}, {})", took(since)),
        _ => v.shown_status(),
    };
    let next = match (v.next_due, v.overdue_by()) {
        (Some(_), Some(d)) => format!("overdue {}", coarse(d)),
        (Some(due), None) => left(due),
        (None, _) => dash(),
    };
    let mut row = vec![
        v.name.to_owned(),
        status,
        s.tick.to_string(),
        v.schedule_cadence().unwrap_or_else(dash),
        next,
        last,
    ];
    if approvals {
        row.push(s.pending_approvals.len().to_string());
    }
    if locks {
        let lock = match &v.lock {
            Some(h) if v.running().is_none() => lock_cell(h),
            _ => dash(),
        };
        row.push(lock);
    }
    row.push(v.description.clone().unwrap_or_default());
    row
}

/// A loop due longer ago than this is shown `overdue`, not `now`.
const OVERDUE: std::time::Duration = std::time::Duration::from_secs(5);

impl LoopView<'_> {
    /// How long it has been due, when that is long enough to say
    /// `overdue` (`list` and `status NAME` alike).
    fn overdue_by(&self) -> Option<std::time::Duration> {
        self.overdue.filter(|d| *d >= OVERDUE)
    }
}

/// How long since `t`: `10s`, `3m12s`.
fn took(t: Timestamp) -> String {
    let secs = crate::clock::now().duration_since(t).as_secs().max(0);
    coarse(std::time::Duration::from_secs(secs.unsigned_abs()))
}

/// `pid 4242 (pause)`, and the host when it is another.
fn lock_cell(h: &Holder) -> String {
    let host = match h.host == crate::who::host() {
        true => String::new(),
        false => format!(" on {}", h.host),
    };
    format!("pid {}{host} ({})", h.pid, h.command)
}

/// Below the table: the daemon serving the root (or the one that stopped),
/// and, when none does, the overdue loops that nothing fires (no installed
/// OS schedule either), said once.
fn daemon_lines(root: &Root, listed: &[Listed<'_>]) -> String {
    let status = crate::daemon::daemon_status(root);
    let mut text = match &status {
        Ok(Some(s)) => format!("{}\n", safe(&s.describe())),
        Ok(None) => String::new(),
        Err(e) => format!("daemon: {}\n", safe(&e.to_string())),
    };
    if serving(&status) {
        return text;
    }
    let stranded = unfired(
        root,
        listed.iter().filter_map(|l| match l {
            Listed::Loop(v) => Some(&**v),
            Listed::Unreadable { .. } => None,
        }),
    );
    if let Some(first) = stranded.first() {
        let (n, them) = match stranded.len() {
            1 => (format!("loop {first} is"), "it"),
            n => (format!("{n} loops are"), "them"),
        };
        // A stopped daemon's line has said already that none serves it.
        let none = match text.is_empty() {
            true => "no daemon serves this root, and ",
            false => "",
        };
        text += &format!(
            "{none}{n} overdue with no OS schedule: nothing fires {them}; \
             run `automaton daemon`, or `automaton schedule install NAME`\n"
        );
    }
    text
}

/// Whether a daemon serves the root, by its status record.
fn serving(status: &Result<Option<crate::daemon::DaemonStatus>>) -> bool {
    matches!(status, Ok(Some(s)) if s.serving)
}

/// The loops of `views` that are overdue and have no OS schedule on:
/// nothing fires them unless a daemon serves the root.
fn unfired<'a>(root: &Root, views: impl IntoIterator<Item = &'a LoopView<'a>>) -> Vec<&'a str> {
    views
        .into_iter()
        .filter(|v| v.overdue_by().is_some())
        .map(|v| v.name)
        .filter(|name| !crate::schedule::record::read(root, name).is_ok_and(|r| r.is_some_and(|r| r.enabled)))
        .collect()
}

/// One loop in detail: a row each of what it is, how its ticks went,
/// what it holds and who holds it.
fn detail(v: &LoopView<'_>) -> String {
    let mut rows = Rows::default();
    rows.identity(v);
    rows.ticks(v);
    rows.approvals(v.state);
    rows.holdings(v);
    let mut text = table(&rows.0);
    text += &config_record(v);
    text
}

/// The record of the rules: a change not yet recorded, one awaiting an
/// approval, and the changes since the last approval with their diffs.
fn config_record(v: &LoopView<'_>) -> String {
    let mut text = String::new();
    if v.unrecorded_config.is_some() {
        text += &format!("\n{}\n", super::review::UNRECORDED);
    }
    let recorded = v.state.recorded_config.as_ref();
    if let Some(u) = recorded.and_then(|r| r.unapproved.as_ref()) {
        let rules = crate::rules::names(&u.rules);
        text += &format!(
            "\na change to the rules ({rules}) awaits approval since {}\n",
            local(u.since)
        );
    }
    if v.config_changes.is_empty() {
        return text;
    }
    text += "\nconfig changes since the last approval:\n";
    for c in &v.config_changes {
        text += &format!("  {}\n", safe(&super::review::change_line(c)));
        for l in c.change.diff.lines() {
            text += &format!("    {}\n", safe(l));
        }
    }
    text
}

/// The rows of [`detail`]'s table: a key, then its value.
/// What `status` says of a loop whose step runs unconfined.
pub const UNCONFINED: &str = "unconfined ([step] confine = \"off\"): it runs with the runner's every right";

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
        if v.unconfined {
            self.row("step", UNCONFINED.to_owned());
        }
        if let Some((gate, phase, tick)) = &v.stopped_by {
            self.row("stopped by", format!("gate {gate} ({phase}, tick {tick})"));
            self.row("to clear", clears(v.name, gate));
        }
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
        if let Some(b) = v.os_schedule {
            self.row(
                "fired by",
                format!("{b}, its OS schedule (a daemon leaves it to {b})"),
            );
        }
        match (v.next_due, v.overdue_by()) {
            (Some(_), Some(d)) => {
                let since = jiff::SignedDuration::try_from(d)
                    .ok()
                    .and_then(|d| crate::clock::now().checked_sub(d).ok())
                    .unwrap_or(Timestamp::MIN);
                self.row(
                    "next due",
                    format!("overdue {} (came due {})", coarse(d), local(since)),
                );
            }
            (Some(due), None) => self.row("next due", format!("{} ({})", local(due), left(due))),
            (None, _) => {}
        }
        if v.unfired {
            self.row(
                "fired by",
                format!(
                    "nothing: no daemon serves this root and it has no OS schedule; \
                     run `automaton daemon`, or `automaton schedule install {}`",
                    v.name
                ),
            );
        }
        if let Some(m) = &v.last_missed {
            let firings = match m.count {
                1 => format!("1 firing, {}", local(m.at)),
                n => format!("{n} firings, {} to {}", local(m.at), local(m.last_at())),
            };
            let why = m.detail.as_deref().unwrap_or(&m.why);
            self.row(
                "last missed",
                format!("{firings}: {why} (automaton fires {})", v.name),
            );
        }
        if let Some(r) = &v.refused_firings {
            let firings = match r.count {
                1 => format!("1 firing, {}", local(r.at)),
                n => format!("{n} firings, {} to {}", local(r.at), local(r.last_at())),
            };
            let why = r.detail.as_deref().unwrap_or(&r.why);
            self.row("not ticked", format!("{firings}: {}", safe(why)));
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
                    None if v.last_run_dir.is_some() => self.row("output", output_hint(v, t)),
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
            let totals: Vec<String> = s
                .totals
                .iter()
                .map(|(k, v)| format!("{k}={}", number(*v)))
                .collect();
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

/// The gate whose decision stopped a halted or completed loop: the newest
/// gate event in its history that decided its status for the reason it
/// gives, unless a resume or a rejection came after it.
fn stopped_by(dir: &dyn LoopStore, state: &State) -> Option<(String, crate::gate::Phase, u64)> {
    use crate::gate::Decision;
    use crate::history::EventKind;
    use crate::state::Status;
    let reason = state.status_reason.as_deref()?;
    if !matches!(state.status, Status::Halted | Status::Completed) {
        return None;
    }
    let history = dir.history().ok()?;
    for e in history.events.iter().rev() {
        match &e.kind {
            EventKind::Gate { tick, verdict, .. } => {
                let decided = match (&verdict.decision, state.status) {
                    (Decision::Halt(r), Status::Halted) | (Decision::Complete(r), Status::Completed) => {
                        r == reason
                    }
                    _ => false,
                };
                if decided {
                    return Some((verdict.gate.clone(), verdict.phase, *tick));
                }
            }
            EventKind::Resumed { .. } | EventKind::Rejected { .. } => return None,
            _ => {}
        }
    }
    None
}

/// What clears a stop by gate `gate` of loop `name`.
pub(crate) fn clears(name: &str, gate: &str) -> String {
    match gate {
        "stock:budget" => format!(
            "`automaton resume {name} --reset-budget` starts its totals over (or raise the gate's `max`: `automaton edit {name}`)"
        ),
        "stock:max-failures" => format!("`automaton resume {name}`: the failure count starts over"),
        "stock:no-progress" => format!("`automaton resume {name}`: the count of unchanged ticks starts over"),
        "stock:max-ticks" => {
            format!("raise the gate's `max` (`automaton edit {name}`), then `automaton resume {name}`")
        }
        _ => format!(
            "`automaton resume {name}` once what the gate checks has changed, or change its params (`automaton edit {name}`)"
        ),
    }
}

/// The `logs` command that shows the last tick's output: the failed
/// verifier's, else the step's (`logs` shows its standard error when that
/// is all it wrote); or that it wrote nothing.
fn output_hint(v: &LoopView<'_>, t: &crate::state::LastTick) -> String {
    let command = format!("automaton logs {} {}", v.name, t.number);
    let Some(run) = v
        .last_run_dir
        .as_deref()
        .and_then(|p| crate::fsx::Dir::open(p).ok())
    else {
        return command;
    };
    let wrote = |what: &str| {
        [false, true].into_iter().any(|err| {
            run.open_read(crate::runs::output_name(what, err))
                .ok()
                .flatten()
                .is_some_and(|(_, len)| len > 0)
        })
    };
    let verifier_failed = t.verifier.as_ref().is_some_and(|r| !r.success());
    match (wrote("step"), wrote("verifier")) {
        (_, true) if verifier_failed => format!("{command} --verifier"),
        (true, _) => command,
        (false, true) => format!("{command} --verifier"),
        (false, false) => "none: the step wrote nothing".into(),
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
