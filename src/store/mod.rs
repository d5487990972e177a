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
//! ([`LoopDir`]) is the first implementation; the PostgreSQL store
//! (`pg/`) is the second, where the session is a server connection holding
//! an advisory lock and a commit is a transaction. [`Stores`] opens
//! whichever one a root uses.

pub mod edits;
mod file;
mod flight;
mod journal;
mod pg;
mod rotation;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::config::LoopConfig;
use crate::error::Result;
use crate::history::{Event, EventKind, History};
use crate::lock::{Holder, Wait};
use crate::root::{LoopName, Root, StoreChoice};
use crate::state::{InFlight, State};

pub use file::{
    LoopDir, adopt_loop, create_dirs, create_loop, init_root, list_loops, parse_state, write_file,
};
pub use pg::Listener;

/// Bounds every wait of this process on a shared store's server
/// (connecting, each statement, each table or row lock) by a command's
/// `--timeout`, where that is shorter than the defaults
/// (docs/postgres.md). Call it before opening the store.
pub fn bound_server_waits(bound: std::time::Duration) {
    pg::set_bound(bound);
}

/// The loops of a root, in whichever store it uses (`--store`,
/// `$AUTOMATON_STORE`, or `store` in `<root>/automaton.toml`): the one way
/// commands find, list, create and remove loops.
pub struct Stores {
    root: Root,
    pg: Option<Arc<pg::Database>>,
}

impl Stores {
    /// Opens the root's store: for PostgreSQL, connects and brings the
    /// schema up to date.
    pub fn open(root: &Root) -> Result<Stores> {
        let pg = match root.store() {
            StoreChoice::File => None,
            StoreChoice::Postgres(url) => Some(pg::Database::open(url, root.loops_dir())?),
        };
        Ok(Stores {
            root: root.clone(),
            pg,
        })
    }

    /// Where the loops are, for messages: the root's loops directory or the
    /// store's URL (its password redacted).
    pub fn describe(&self) -> String {
        match &self.pg {
            Some(db) => db.url().to_owned(),
            None => self.root.loops_dir().display().to_string(),
        }
    }

    pub fn is_shared(&self) -> bool {
        self.pg.is_some()
    }

    /// The loop `name`, which must exist.
    pub fn get(&self, name: &str) -> Result<Box<dyn LoopStore>> {
        let store: Box<dyn LoopStore> = match &self.pg {
            Some(db) => Box::new(db.open_loop(name)?),
            None => Box::new(LoopDir::open(&self.root, name)?),
        };
        Ok(store)
    }

    /// Every loop, sorted by name.
    pub fn list(&self) -> Result<Vec<Box<dyn LoopStore>>> {
        Ok(match &self.pg {
            Some(db) => db
                .list()?
                .into_iter()
                .map(|l| Box::new(l) as Box<dyn LoopStore>)
                .collect(),
            None => list_loops(&self.root)?
                .into_iter()
                .map(|l| Box::new(l) as Box<dyn LoopStore>)
                .collect(),
        })
    }

    /// Makes a loop from its config text, first state and first events;
    /// fails if it exists.
    pub fn create(
        &self,
        name: &LoopName,
        config_text: &str,
        state: &State,
        events: Vec<EventKind>,
    ) -> Result<Box<dyn LoopStore>> {
        let store: Box<dyn LoopStore> = match &self.pg {
            Some(db) => Box::new(db.create(name, config_text, state, events)?),
            None => Box::new(create_loop(&self.root, name, config_text, state, events)?),
        };
        Ok(store)
    }

    /// Replaces a loop's config text; `None` for the file store, whose
    /// loop.toml is a file the caller replaces itself.
    pub fn set_config(&self, name: &LoopName, text: &str) -> Option<Result<()>> {
        self.pg.as_ref().map(|db| db.set_config(name, text))
    }

    /// A connection told of every change to a loop (a commit, a new loop, a
    /// removal), for a shared store; `None` for the file store.
    pub fn listen(&self) -> Option<Result<Listener>> {
        self.pg.as_ref().map(|db| db.listen())
    }

    /// Waits up to `timeout` for changes on `listener`; the loops named.
    pub fn wait_changes(&self, listener: &mut Listener, timeout: std::time::Duration) -> Result<Vec<String>> {
        match &self.pg {
            Some(db) => db.wait_changes(listener, timeout),
            None => Ok(Vec::new()),
        }
    }
}

impl Stores {
    /// Moves loop `name` from this store to `to` with its config, state and
    /// history (each event keeps its version), under the loop's lock here:
    /// a loop whose lock is held is refused. A tick that died mid-way is
    /// recorded first. Returns the events moved.
    pub fn move_loop(&self, to: &Stores, name: &str) -> Result<usize> {
        let src = self.get(name)?;
        let mut session = src.lock(Holder::me("migrate"), Wait::No).map_err(|e| match e {
            crate::Error::LockNotObtained { name, holder } => crate::Error::NotMoved {
                reason: match holder {
                    Some(h) => format!(
                        "it is locked, held by {}; try again when it is free",
                        h.describe()
                    ),
                    None => "it is locked; try again when it is free".to_owned(),
                },
                name,
            },
            e => e,
        })?;
        let state = session.load()?.state;
        let history = src.history()?;
        if let Some(bad) = history.bad.first() {
            return Err(crate::Error::NotMoved {
                name: name.to_owned(),
                reason: format!(
                    "{}:{} cannot be read ({}); mend or remove it first (`automaton doctor`)",
                    bad.path.display(),
                    bad.line,
                    bad.reason
                ),
            });
        }
        let config = src.config_text()?;
        let loop_name = src.name().clone();
        match &to.pg {
            Some(db) => {
                db.import(&loop_name, &config, &state, &history.events)?;
            }
            None => {
                adopt_loop(&to.root, &loop_name, &config, &state, &history.events)?;
            }
        }
        session.forget()?;
        Ok(history.events.len())
    }
}

/// The loop `name` in the store `root` uses; it must exist.
pub fn open(root: &Root, name: &str) -> Result<Box<dyn LoopStore>> {
    Stores::open(root)?.get(name)
}

/// One loop in a store.
pub trait LoopStore: Send + Sync {
    fn name(&self) -> &LoopName;

    /// The directory paths in loop.toml are relative to (gate files, the
    /// workdir, the worktree).
    fn base_dir(&self) -> &Path;

    /// Where this host keeps the loop's step and verifier output.
    fn runs_dir(&self) -> PathBuf;

    /// What messages call the loop's loop.toml.
    fn config_path(&self) -> PathBuf;

    /// Where the loop lives, for messages.
    fn location(&self) -> String {
        self.base_dir().display().to_string()
    }

    /// A file whose modification time moves with every commit, for
    /// watchers that poll (the daemon); `None` for a store that notifies
    /// instead ([`Stores::listen`]).
    fn commit_marker(&self) -> Option<PathBuf> {
        None
    }

    /// The loop's config, read and validated.
    fn config(&self) -> Result<LoopConfig>;

    /// The loop's config as written.
    fn config_text(&self) -> Result<String>;

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

    /// The state as a store read it; `restore` says what to restore from
    /// when it could not be read.
    fn state(read: Result<State>, restore: &str) -> (Finding, Option<State>) {
        match read {
            Ok(s) => (
                Finding::ok("state", format!("version {}, {}", s.version, s.status)),
                Some(s),
            ),
            Err(e) => (
                Finding::new(
                    "state",
                    Level::Error,
                    e.to_string(),
                    format!(
                        "restore {restore} from a backup, or remove the loop with `automaton rm --force`"
                    ),
                ),
                None,
            ),
        }
    }

    /// The tick the state says is in flight: running when its holder is a
    /// tick, else dead and not recorded yet.
    fn in_flight(f: &InFlight, running: bool) -> Finding {
        if running {
            Finding::ok("in-flight", format!("tick {} is running", f.tick))
        } else {
            Finding::new(
                "in-flight",
                Level::Warning,
                format!(
                    "tick {} (pid {} on {}) died mid-way and is not recorded yet",
                    f.tick, f.pid, f.host
                ),
                "the next command on the loop records it as crashed; `--fix` does it now",
            )
            .fixable()
        }
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

    /// For a lock that can be lost while its holder lives (the PostgreSQL
    /// store's lease, when the holder can no longer renew it): the watch
    /// that says so, in time to stop what runs under the lock before
    /// anyone else may take it. `None` for a lock only death releases.
    fn lock_watch(&self) -> Option<crate::lock::LockWatch> {
        None
    }

    /// The loop's config as the caller read it, for what a commit needs of
    /// it (history rotation), so the session does not read it again.
    fn use_config(&mut self, _config: &LoopConfig) {}

    /// Recovers what a dead holder left, then returns the committed state.
    /// A tick found dead mid-way is recorded as crashed (a commit of its
    /// own, made before this returns) and returned in [`Loaded::recovered`].
    /// A store may skip looking for what nobody can have left (the file
    /// store, when the last holder let go with the files whole).
    fn load(&mut self) -> Result<Loaded>;

    /// Makes the next [`load`](Session::load) look for what a dead holder
    /// left whatever the last holder said (`doctor --fix`).
    fn check_all(&mut self) {}

    /// Puts right what an older build left that commands read as it is
    /// and leave alone (the file store: rotated history files whose
    /// numbers have a gap, renamed to this build's names in order), losing
    /// nothing; for `doctor --fix`, after [`load`](Session::load).
    fn mend(&mut self) -> Result<()> {
        Ok(())
    }

    /// Commits `state` as the next version together with `events`, in one
    /// atomic record. The state must be the one this session loaded or last
    /// committed (its `version` is checked); on success its `version` and
    /// `updated_at` are the committed ones.
    fn commit(&mut self, state: &mut State, events: Vec<EventKind>, durability: Durability) -> Result<()>;

    /// Deletes the loop. Needs no `load` first, so a loop whose state is
    /// unreadable can still be removed.
    fn remove(self: Box<Self>) -> Result<()>;

    /// Deletes the loop's record (config, state, history) from this store
    /// but keeps this host's files of it (step output, gate files): the
    /// last step of moving it to another store.
    fn forget(self: Box<Self>) -> Result<()>;
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
    /// `in_flight` marker, whose loss only forgets that a step was running
    /// (the file store writes it into its record without syncing it).
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
