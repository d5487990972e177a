//! The views of loops: `list` (every loop the actor may see) and `status`
//! (one in full). Read without the lock (every write is an atomic replace,
//! so a reader never sees a torn state). Each loop is shown with its
//! config as a tick would load it: a config that no longer loads makes the
//! loop `invalid`, with the error, wherever it is listed.

use std::path::PathBuf;

use jiff::Timestamp;
use serde::Serialize;

use crate::config::{Cadence, ConfigError, Schedule};
use crate::daemon::When;
use crate::error::{Error, Result};
use crate::lock::Holder;
use crate::ops::Ctx;
use crate::root::Root;
use crate::state::State;
use crate::store::LoopStore;

/// A loop as `status --json` and `list --json` show it: its name, what its
/// config says, its state, when it is next due and who holds its lock.
#[derive(Serialize)]
pub(crate) struct LoopView {
    pub name: String,
    pub description: Option<String>,
    /// `null` when loop.toml loads; else why it does not.
    pub config_error: Option<String>,
    #[serde(flatten)]
    pub state: State,
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
    pub stopped_by: Option<(String, crate::domain::Phase, u64)>,
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
    /// The last lines of each output of its last tick, by file
    /// (`step.err`, `step.out`, ...), when that tick failed (`status
    /// NAME`): the reason a step gives is most often on standard error.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub last_output: std::collections::BTreeMap<String, Vec<String>>,
    /// Whether its step runs unconfined (`[step] confine = "off"`): only
    /// present, as `true`, when it does.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unconfined: bool,
    /// Each shadow gate's evidence: of its last evaluations, how many
    /// agreed with the live side, and its last disagreement (`status NAME`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<super::shadow::Evidence>,
    /// The budgets it belongs to: spent and reserved against each cap in
    /// the current window.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<crate::domain::GateBudget>,
}

impl LoopView {
    /// The status an operator sees: the stored one, or `invalid`.
    pub(crate) fn shown_status(&self) -> String {
        match &self.config_error {
            Some(_) => "invalid".into(),
            None => self.state.status.to_string(),
        }
    }

    /// The tick running now, when a tick holds the loop's lock: its
    /// number and when it took the lock.
    pub(crate) fn running(&self) -> Option<(u64, Timestamp)> {
        self.lock
            .as_ref()
            .filter(|h| h.command == "tick")
            .and_then(|h| h.tick.map(|t| (t, h.since)))
    }
}

/// The view of loop `dir` in `state`, as a listing shows it.
pub(crate) fn view(dir: &dyn LoopStore, state: &State) -> LoopView {
    view_read(dir, state.clone(), &dir.config(), LoopStore::holder(dir))
}

/// The view of a loop whose config and lock holder were read already.
fn view_read(
    dir: &dyn LoopStore,
    state: State,
    config: &Result<crate::config::LoopConfig>,
    lock: Option<Holder>,
) -> LoopView {
    let (config, config_error) = match config {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let last_run_dir = state
        .last_tick
        .as_ref()
        .map(|t| crate::runs::run_path(dir.base_dir(), t.number))
        .filter(|p| p.is_dir());
    let mut v = LoopView {
        name: dir.name().to_string(),
        description: config.and_then(|c| c.description.clone()),
        config_error,
        state,
        schedule: config.and_then(|c| c.schedule.as_ref()).map(describe_schedule),
        next_due: None,
        last_run_dir,
        lock,
        overdue: None,
        unfired: false,
        stopped_by: None,
        last_missed: None,
        refused_firings: None,
        os_schedule: None,
        access: config.map(crate::config::LoopConfig::access),
        unrecorded_config: None,
        config_changes: Vec::new(),
        last_output: Default::default(),
        unconfined: config.is_some_and(|c| c.step.confine == crate::config::Confine::Off),
        shadows: Vec::new(),
        budgets: Vec::new(),
    };
    if let Some(schedule) = config.and_then(|c| c.schedule.as_ref()) {
        let running = v.running().map(|(_, since)| since);
        match next_due(schedule, &v.state, running, crate::clock::now()) {
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

impl LoopView {
    /// The schedule without its jitter, as the table shows it.
    pub(crate) fn schedule_cadence(&self) -> Option<String> {
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

/// When a loop is next due, and how long it has been due: only an active
/// loop is (a paused, halted or completed one runs no step, nor does one
/// awaiting approval until it is approved).
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
    // An awaiting loop's step runs only once it is approved: it is not
    // due, however long it waits.
    if state.status != crate::state::Status::Active {
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

/// What `validate` finds wrong with the loop's schedule and gates (one
/// missing, its params refused), so one loop's status calls a config valid only when
/// `validate` would. A listing does not look: it would load every gate.
fn check_gates(root: &Root, dir: &dyn LoopStore) -> Result<()> {
    let config = dir.config()?;
    let shown = dir.config_path();
    crate::ops::check::check_config(root, dir.base_dir(), &config, &shown)
}

/// A loop in a listing: its view, or why its state could not be read.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Listed {
    Loop(Box<LoopView>),
    Unreadable { name: String, error: String },
}

/// Every loop the context's actor may see, as `list --json` shows them,
/// and the error of the first whose state could not be read.
pub(crate) struct Listing {
    pub loops: Vec<Listed>,
    pub first_error: Option<Error>,
}

/// `list`: every loop the context's actor may see, each with its config
/// as a tick would load it.
pub(crate) fn list(ctx: &Ctx) -> Result<Listing> {
    let mut listing = Listing {
        loops: Vec::new(),
        first_error: None,
    };
    for seen in read_all(ctx)? {
        listing.loops.push(seen.listed);
        if let Some(e) = seen.error {
            listing.first_error.get_or_insert(e);
        }
    }
    Ok(listing)
}

/// A loop the context's actor may see, as a listing read it: its store,
/// its view (or why its state could not be read), its config when that
/// loads, and the error its state gave.
pub(crate) struct Seen {
    pub dir: Box<dyn LoopStore>,
    pub listed: Listed,
    pub config: Option<crate::config::LoopConfig>,
    pub error: Option<Error>,
}

/// Every loop the context's actor may see, read once: what `list` shows,
/// with the store and config each was read from (`/metrics` reads on from
/// them).
pub(crate) fn read_all(ctx: &Ctx) -> Result<Vec<Seen>> {
    let defaults = ctx.stores.access();
    let mut out = Vec::new();
    for r in ctx.stores.read_all()? {
        let (listed, error) = match r.state {
            Ok(state) => {
                let v = view_read(r.dir.as_ref(), state, &r.config, r.holder);
                (Listed::Loop(Box::new(v)), None)
            }
            Err(e) => {
                let name = r.dir.name().to_string();
                let error = e.to_string();
                (Listed::Unreadable { name, error }, Some(e))
            }
        };
        if sees(ctx, defaults, &listed) {
            out.push(Seen {
                dir: r.dir,
                listed,
                config: r.config.ok(),
                error,
            });
        }
    }
    // Every loop's budgets from one read of the ledger.
    let with_budgets: Vec<(usize, &str, &crate::config::LoopConfig)> = out
        .iter()
        .enumerate()
        .filter_map(|(i, seen)| match (&seen.listed, &seen.config) {
            (Listed::Loop(_), Some(config)) => Some((i, seen.dir.name().as_str(), config)),
            _ => None,
        })
        .collect();
    if let Some(first) = with_budgets.first() {
        let shared = out[first.0].dir.shared_ledger();
        let loops: Vec<(&str, &crate::config::LoopConfig)> = with_budgets
            .iter()
            .map(|&(_, name, config)| (name, config))
            .collect();
        let budgets = crate::budget::for_gates(ctx.root, shared, &loops);
        let at: Vec<usize> = with_budgets.iter().map(|&(i, _, _)| i).collect();
        for (i, b) in at.into_iter().zip(budgets) {
            if let Listed::Loop(v) = &mut out[i].listed {
                v.budgets = b;
            }
        }
    }
    Ok(out)
}

/// The most lines of each output of a failed tick `status` shows.
pub(crate) const FAILED_LINES: usize = 5;

/// The last lines of each output of the last tick, when it failed.
fn failed_output(dir: &dyn LoopStore, state: &State) -> std::collections::BTreeMap<String, Vec<String>> {
    match &state.last_tick {
        Some(t) if t.outcome == crate::state::Outcome::Failed => {
            super::review::outputs(dir, t.number, FAILED_LINES)
        }
        _ => Default::default(),
    }
}

/// Whether the context's actor may see a listed loop.
fn sees(ctx: &Ctx, defaults: &crate::access::Access, listed: &Listed) -> bool {
    if !super::held_to_viewers(&ctx.actor) {
        return true;
    }
    let rules = match listed {
        Listed::Loop(v) => v
            .access
            .as_ref()
            .map_or_else(|| defaults.clone(), |a| a.over(defaults)),
        Listed::Unreadable { .. } => defaults.clone(),
    };
    super::may_see(&ctx.actor, &rules).is_ok()
}

/// `status NAME`: one loop in full, as `list` shows it and with what a
/// listing does not look for: its gates checked as `validate` would, the
/// gate that stopped it, whether anything fires it, its missed and
/// refused firings, and the record of its rules.
pub(crate) fn status(ctx: &Ctx, name: &str) -> Result<LoopView> {
    let dir = ctx.stores.get(name)?;
    let dir = &*dir;
    super::may_view(ctx, dir)?;
    let state = dir.load()?;
    let root = ctx.root;
    let mut v = view(dir, &state);
    if v.config_error.is_none() {
        v.config_error = check_gates(root, dir).err().map(|e| e.to_string());
    }
    v.stopped_by = stopped_by(dir, &state);
    if let Ok(config) = dir.config() {
        v.budgets = crate::budget::for_gate(root, dir.shared_ledger(), name, &config);
    }
    v.unfired = !serving(&crate::daemon::daemon_status(root)) && !unfired(root, [&v]).is_empty();
    let fires = dir.fires(None).unwrap_or_else(|e| {
        tracing::warn!("{e}");
        Vec::new()
    });
    v.last_missed = crate::fires::last_missed(&fires).cloned();
    v.refused_firings = crate::fires::refused_now(&fires).cloned();
    v.os_schedule = crate::schedule::record::read(ctx.root, name)
        .ok()
        .flatten()
        .map(|r| r.backend);
    v.last_output = failed_output(dir, &state);
    v.unrecorded_config = super::review::unrecorded(root, dir, &state);
    match dir.history() {
        Ok(h) => {
            v.config_changes = super::review::config_changes(&h.events);
            if let Ok(config) = dir.config() {
                v.shadows = super::shadow::of_config(&config, &h.events);
            }
        }
        Err(e) => tracing::warn!("{e}"),
    }
    Ok(v)
}

/// A loop due longer ago than this is shown `overdue`, not `now`.
const OVERDUE: std::time::Duration = std::time::Duration::from_secs(5);

impl LoopView {
    /// How long it has been due, when that is long enough to say
    /// `overdue` (`list` and `status NAME` alike).
    pub(crate) fn overdue_by(&self) -> Option<std::time::Duration> {
        self.overdue.filter(|d| *d >= OVERDUE)
    }
}

/// Whether a daemon serves the root, by its status record.
pub(crate) fn serving(status: &Result<Option<crate::daemon::DaemonStatus>>) -> bool {
    matches!(status, Ok(Some(s)) if s.serving)
}

/// The loops of `views` that are overdue and have no OS schedule on:
/// nothing fires them unless a daemon serves the root.
pub(crate) fn unfired<'a>(root: &Root, views: impl IntoIterator<Item = &'a LoopView>) -> Vec<&'a str> {
    views
        .into_iter()
        .filter(|v| v.overdue_by().is_some())
        .map(|v| v.name.as_str())
        .filter(|name| !crate::schedule::record::read(root, name).is_ok_and(|r| r.is_some_and(|r| r.enabled)))
        .collect()
}

/// The gate whose decision stopped a halted or completed loop: the newest
/// gate event in its history that decided its status for the reason it
/// gives, unless a resume or a rejection came after it.
fn stopped_by(dir: &dyn LoopStore, state: &State) -> Option<(String, crate::domain::Phase, u64)> {
    use crate::domain::Decision;
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
