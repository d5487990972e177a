//! The store: where loops live, and the one way a loop changes. Every
//! change (a tick, an operator command, a recovered crash) is one commit of
//! the new state together with the events that describe it: after a crash
//! at any instant both are there or neither is, and readers never see one
//! without the other (docs/store.md gives the argument step by step).
//!
//! The interface is two traits. [`LoopStore`] is a loop: its config, its
//! committed state and history (read without the lock), its lock holder,
//! and [`LoopStore::lock`], which opens a [`Session`]. A session holds the
//! loop's lock until it is dropped; its [`Session::load`] first finishes
//! what a dead holder left (a torn record, stray temporary files, a tick
//! that died mid-way, recorded as crashed in a commit of its own), and its
//! [`Session::commit`] checks the version and commits. The file store
//! ([`LoopDir`]) is the first implementation; the shape fits a database
//! too, where the session is a server connection holding an advisory lock
//! and a commit is a transaction.

mod file;
mod journal;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::LoopConfig;
use crate::error::Result;
use crate::history::{Event, EventKind, History};
use crate::lock::{Holder, Wait};
use crate::root::LoopName;
use crate::state::{InFlight, State};

pub use file::{LoopDir, create_dirs, create_loop, init_root, list_loops, parse_state, write_file};

/// One loop in a store.
pub trait LoopStore: Send + Sync {
    fn name(&self) -> &LoopName;

    /// The directory paths in loop.toml are relative to (gate files, the
    /// workdir, the worktree).
    fn base_dir(&self) -> &Path;

    /// Where this host keeps the loop's step and verifier output.
    fn runs_dir(&self) -> PathBuf;

    /// The loop's config, read and validated.
    fn config(&self) -> Result<LoopConfig>;

    /// The last committed state, read without the lock.
    fn load(&self) -> Result<State>;

    /// The committed history, oldest first, consistent with the state that
    /// was committed when it was read; read without the lock.
    fn history(&self) -> Result<History>;

    /// Who holds the loop's lock, if anyone alive does.
    fn holder(&self) -> Option<Holder>;

    /// Takes the loop's lock as `wait` allows, for one command.
    fn lock(&self, holder: Holder, wait: Wait) -> Result<Box<dyn Session + '_>>;

    /// What is wrong with the loop's record, looked at without the lock
    /// and without changing anything (for `doctor`). What a session's
    /// `load` repairs is marked `fixable`.
    fn check(&self) -> Vec<Finding>;
}

/// Something `doctor` found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// What was checked: `state`, `history`, `lock`, `config`, ...
    pub check: &'static str,
    pub level: Level,
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Whether `doctor --fix` repairs it.
    pub fixable: bool,
}

impl Finding {
    pub fn ok(check: &'static str, message: impl Into<String>) -> Finding {
        Finding {
            check,
            level: Level::Ok,
            message: message.into(),
            action: None,
            fixable: false,
        }
    }

    pub fn new(
        check: &'static str,
        level: Level,
        message: impl Into<String>,
        action: impl Into<String>,
    ) -> Finding {
        Finding {
            check,
            level,
            message: message.into(),
            action: Some(action.into()),
            fixable: false,
        }
    }

    /// Marks it as one `doctor --fix` repairs.
    pub fn fixable(mut self) -> Finding {
        self.fixable = true;
        self
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Fine.
    Ok,
    /// Worth knowing; nothing to do.
    Note,
    /// Harmless to the record but worth a repair.
    Warning,
    /// The loop cannot be used until it is mended.
    Error,
}

/// A held lock on one loop: the only way to change it. Dropping the
/// session releases the lock.
pub trait Session {
    fn holder(&self) -> &Holder;

    /// Records the tick being run, so waiters and `status` can name it.
    fn set_tick(&mut self, tick: u64);

    /// Recovers what a dead holder left, then returns the committed state.
    /// A tick found dead mid-way is recorded as crashed (a commit of its
    /// own, made before this returns) and returned in [`Loaded::recovered`].
    fn load(&mut self) -> Result<Loaded>;

    /// Commits `state` as the next version together with `events`, in one
    /// atomic record. The state must be the one this session loaded or last
    /// committed (its `version` is checked); on success its `version` and
    /// `updated_at` are the committed ones.
    fn commit(&mut self, state: &mut State, events: Vec<EventKind>, durability: Durability) -> Result<()>;

    /// Deletes the loop. Needs no `load` first, so a loop whose state is
    /// unreadable can still be removed.
    fn remove(self: Box<Self>) -> Result<()>;
}

/// The state a session loaded, and the crash it recorded on the way.
#[derive(Debug)]
pub struct Loaded {
    pub state: State,
    pub recovered: Option<InFlight>,
}

/// How much of a commit must survive a power loss. Either way a crash of
/// the process leaves the whole commit or none of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On disk when `commit` returns.
    Full,
    /// In the operating system when `commit` returns, on disk soon after;
    /// a power loss may take it back to the previous commit. For the tick's
    /// `in_flight` marker, whose loss only forgets that a step was running.
    Relaxed,
}

/// Events of one commit, stamped with the version they belong to.
fn stamp(events: Vec<EventKind>, version: u64, at: jiff::Timestamp) -> Vec<Event> {
    events
        .into_iter()
        .map(|kind| Event { v: version, at, kind })
        .collect()
}

/// What a dead tick's recovery does to the state: the tick counts (its
/// step may have run, and `runs/<n>` must not be reused) and counts as a
/// failure. Returns the crash event.
fn record_crash(state: &mut State, dead: &InFlight) -> EventKind {
    state.consecutive_failures += 1;
    state.tick = state.tick.max(dead.tick);
    EventKind::Crashed {
        tick: dead.tick,
        pid: dead.pid,
        host: dead.host.clone(),
        started_at: dead.started_at,
    }
}
