//! The store: where loops live, and the one way a loop changes. Every
//! change (a tick, an operator command, a recovered crash) is one commit of
//! the new state together with the events that describe it: after a crash
//! at any instant both are there or neither is, and readers never see one
//! without the other (docs/store.md gives the argument step by step).
//!
//! The interface is three traits. [`Store`] is a root's store: it finds,
//! lists, makes and watches loops. [`LoopStore`] is a loop: its config, its
//! committed state and history (read without the lock), its lock holder,
//! and [`LoopStore::lock`], which opens a [`Session`]. A session holds the
//! loop's lock until it is dropped; its [`Session::load`] first finishes
//! what a dead holder left (a torn record, stray temporary files, a tick
//! that died mid-way, recorded as crashed in a commit of its own), and its
//! [`Session::commit`] checks the version and commits. Both stores share
//! the commit's prologue (the version check and the next version, [`Next`])
//! and the recording of a dead tick ([`recover`]). The file store (`file/`,
//! [`FileStore`], [`LoopDir`]) is the first implementation; the PostgreSQL
//! store (`pg/`) is the second, where the session is a server connection
//! holding an advisory lock and a commit is a transaction. [`Stores`] opens
//! whichever one a root uses; no caller branches on which it has.

mod file;
mod pg;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::access::Access;
use crate::config::LoopConfig;
use crate::error::Result;
use crate::history::{Event, EventKind, History};
use crate::lock::{Holder, Wait};
use crate::root::{LoopName, Root, StoreChoice};
use crate::state::{InFlight, State};
use crate::who::Actor;

pub use file::{FileStore, LoopDir, edits, parse_state};
pub(crate) use file::{check_loops_dir, init_root};
pub(crate) use pg::refuses_connections;

/// A root's store: where its loops are kept, and how they are found,
/// listed, made and watched. The file store ([`FileStore`]) and PostgreSQL
/// implement it; no caller asks which one it has.
pub trait Store: Send + Sync {
    /// Where the loops are, for messages: the root's loops directory, or
    /// the store's URL with its password masked.
    fn describe(&self) -> String;

    /// Whether runners on other hosts share the store.
    fn is_shared(&self) -> bool;

    /// The loop `name`, which must exist.
    fn get(&self, name: &str) -> Result<Box<dyn LoopStore>>;

    /// The loop `name`, for a caller whose next read says whether it
    /// exists (its config, its lock): a store that would ask a server
    /// first does not.
    fn handle(&self, name: &str) -> Result<Box<dyn LoopStore>> {
        self.get(name)
    }

    /// The budgets' ledger the store keeps for every host, when it keeps
    /// one (PostgreSQL); else the root's file is (src/budget/mod.rs).
    fn shared_ledger(&self) -> Option<&dyn crate::budget::SharedLedger> {
        None
    }

    /// Every loop, sorted by name.
    fn list(&self) -> Result<Vec<Box<dyn LoopStore>>>;

    /// Every loop's name, and a handle on each loop `known` says the
    /// caller does not know yet: a caller that keeps its loops between
    /// listings (the daemon, every half minute) pays only for the new ones.
    fn list_unknown(&self, known: &dyn Fn(&str) -> bool) -> Result<Listed> {
        let all = self.list()?;
        let names = all.iter().map(|d| d.name().to_string()).collect();
        Ok((
            names,
            all.into_iter().filter(|d| !known(d.name().as_str())).collect(),
        ))
    }

    /// Every loop, sorted by name, with what a listing shows of it, read
    /// without the lock: one loop at a time, or (a store on a server) all
    /// in one query.
    fn read_all(&self) -> Result<Vec<Listing>> {
        Ok(self
            .list()?
            .into_iter()
            .map(|dir| Listing {
                state: dir.load(),
                config: dir.config(),
                holder: dir.holder(),
                dir,
            })
            .collect())
    }

    /// Makes a loop from its config text, first state and first events,
    /// recorded as `by`'s; fails if it exists.
    fn create(
        &self,
        name: &LoopName,
        config_text: &str,
        state: &State,
        events: Vec<EventKind>,
        by: &Actor,
    ) -> Result<Box<dyn LoopStore>>;

    /// Takes in a loop moved here from another store, with its config,
    /// state and history as they were there (each event keeps its
    /// version); fails if it exists here.
    fn adopt(&self, name: &LoopName, config_text: &str, state: &State, events: &[Event]) -> Result<()>;

    /// The change feed: every change to a loop from now on (a commit, a
    /// new loop, a removal), told by the store's server where it has one
    /// (PostgreSQL's notifications), else found by the store itself (the
    /// file store looks at each loop's commit marker while the feed is
    /// waited on). Its callers never ask which.
    fn watch(&self) -> Result<Box<dyn Changes>>;

    /// Whether the store's server tells [`Store::watch`] of changes, at no
    /// cost per loop, as they happen (a caller may wait on the feed in a
    /// thread of its own); else the feed looks for them when it is waited
    /// on, and a caller that needs only a few loops' changes (the daemon)
    /// asks for those ([`Store::watch_few`]).
    fn notifies(&self) -> bool {
        false
    }

    /// The change feed of a caller that follows a few loops only (the
    /// daemon, the loops awaiting approval): every approval given in the
    /// root, and every change to the loops it follows
    /// ([`Changes::follow`]), from now on. A store that looks for changes
    /// itself looks at so much only (the file store: the root's record of
    /// approvals, and the followed loops' commits); one whose server
    /// tells of every change gives its whole feed.
    fn watch_few(&self) -> Result<Box<dyn Changes>> {
        self.watch()
    }

    /// Where daemons sharing the store claim due firings between them, so
    /// each firing is offered to one daemon ([`Claims`]); `None` for a
    /// store one daemon serves (the file store), whose daemon keeps its
    /// firings to itself.
    fn claims(&self) -> Option<&dyn Claims> {
        None
    }

    /// A mark of each loop's ledger of firings, read at once for every
    /// loop, that moves whenever a record is added to or folded into it:
    /// `/metrics` reads a ledger again only when its mark moved. `None`
    /// where each loop's own ([`LoopStore::fires_mark`]) is as cheap.
    fn fires_marks(&self) -> Option<Result<std::collections::HashMap<String, String>>> {
        None
    }

    /// The console's users ([`crate::users`]), sorted by name.
    fn users(&self) -> Result<Vec<crate::users::User>>;

    /// Adds `user`, or replaces the one of its name, and adds `entry` to
    /// the admin record with it ([`crate::admin`]).
    fn put_user(&self, user: &crate::users::User, entry: &crate::admin::Entry) -> Result<()>;

    /// Removes the user `name`, adding `entry` to the admin record with
    /// it; false (and nothing recorded) when there is none.
    fn remove_user(&self, name: &str, entry: &crate::admin::Entry) -> Result<bool>;

    /// The root's admin record, oldest first.
    fn admin_log(&self) -> Result<Vec<crate::admin::Entry>>;

    /// Adds `entry`, which changes nothing else (a refusal), to the admin
    /// record.
    fn record_admin(&self, entry: &crate::admin::Entry) -> Result<()>;

    /// The root-wide access a shared store's admin record holds (the
    /// last `access import`); `None` where none is recorded, and on the
    /// file store, whose root-wide access is its automaton.toml's.
    fn root_access(&self) -> Result<Option<crate::access::Access>> {
        Ok(None)
    }

    /// Keeps a connection for a daemon's bookkeeping (its ledger of
    /// firings, its claims' settling and renewal) from now on, where the
    /// store has connections to run out of.
    fn keep_bookkeeping(&self) -> Result<()> {
        Ok(())
    }

    /// The delegates the admin record holds.
    fn delegates(&self) -> Result<Vec<String>> {
        Ok(crate::admin::recorded_delegates(&self.admin_log()?))
    }

    /// Gives `change` the recorded delegates and adds the entry it returns
    /// to the admin record, with no other change of them in between;
    /// returns that entry (`None`: nothing changed).
    fn change_delegates(
        &self,
        change: &mut dyn FnMut(Vec<String>) -> Option<crate::admin::Entry>,
    ) -> Result<Option<crate::admin::Entry>>;
}

/// The scheduled loops' next firings, kept in a shared store and claimed
/// by one daemon at a time (docs/postgres.md, "Several hosts"). Times are
/// compared by the store's clock; a claim runs out one lease after it was
/// taken or last renewed, so the claims of a daemon that died go to the
/// others.
pub trait Claims: Send + Sync {
    /// Writes each loop's first firing for its cadence, unless the store
    /// holds a firing of that cadence already: daemons reading the same
    /// schedule write it once. `offers` are in name order.
    fn offer(&self, offers: &[Offer]) -> Result<()>;

    /// Forgets `name`'s firings: it has no schedule any more.
    fn withdraw(&self, name: &str) -> Result<()>;

    /// Claims for `me` up to `max` firings due now that no live claim
    /// holds, most overdue first, passing over those another daemon is
    /// claiming this instant; with fewer than `max`, also when the next
    /// one may come due.
    fn claim(&self, me: &str, max: usize, host: &str) -> Result<Claimed>;

    /// Lets `me`'s claim of `name` go with its next firing written
    /// (`None`: it fires no more, until a daemon offers it again). A claim `me` no longer holds (it
    /// ran out and another took it) is left as it is.
    fn settle(&self, me: &str, name: &str, next: Option<Firing>) -> Result<()>;

    /// Renews `me`'s claims of the loops in `running` (the ticks it runs
    /// now) for one more lease, and lets go every other claim `me` holds
    /// but those of `unsettled` (ticks ended whose settling is to be tried
    /// again): a claim whose answer was lost, so `me` never ran its tick,
    /// is due again at once. A claim is never renewed past its tick.
    fn renew(&self, me: &str, running: &[String], unsettled: &[String]) -> Result<()>;

    /// How long a claim lasts past its taking or last renewal.
    fn claim_ttl(&self) -> std::time::Duration;

    /// Makes `name` due now, once for its state `version` (an approval
    /// given at that version), unless a daemon holds its claim.
    fn fire_now(&self, name: &str, version: u64) -> Result<()>;
}

/// A firing: when it falls (`nominal`, from which the next is counted)
/// and when it is due (with its jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firing {
    pub nominal: jiff::Timestamp,
    pub due: jiff::Timestamp,
}

/// A loop's first firing for a schedule ([`Claims::offer`]).
#[derive(Debug, Clone)]
pub struct Offer {
    pub name: String,
    /// The schedule and the hosts the firing was computed for.
    pub cadence: String,
    /// The hosts it may run on; empty: any.
    pub hosts: Vec<String>,
    pub first: Firing,
}

/// What [`Claims::claim`] took: the loops and each one's nominal firing,
/// and when the next firing not claimed may come due.
#[derive(Debug, Default)]
pub struct Claimed {
    pub loops: Vec<(String, jiff::Timestamp)>,
    pub next: Option<jiff::Timestamp>,
}

/// A loop as a listing reads it ([`Store::read_all`]): its committed
/// state, its config and its lock holder, each as it could be read.
pub struct Listing {
    pub dir: Box<dyn LoopStore>,
    pub state: Result<State>,
    pub config: Result<LoopConfig>,
    pub holder: Option<Holder>,
}

/// Changes to loops as a store tells of them ([`Store::watch`]).
pub trait Changes: Send {
    /// Waits up to `timeout` for changes; the loops named. A zero
    /// `timeout` looks once.
    fn wait(&mut self, timeout: std::time::Duration) -> Result<Vec<Change>>;

    /// Follows loop `name`'s changes from now on (`on`), or no longer, in
    /// a feed of [`Store::watch_few`]; a feed that tells of every loop
    /// anyway has nothing to do.
    fn follow(&mut self, _name: &str, _on: bool) {}
}

/// A sign of a loop's last commit, read cheaply ([`LoopStore::stamp`]):
/// equal stamps, no commit in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp(std::time::SystemTime);

/// A loop that changed, as a store told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub name: String,
    /// Only its state and history changed (a commit): its config, and
    /// whether it exists, did not.
    pub state_only: bool,
}

/// What [`Store::list_unknown`] finds: every loop's name, and the loops
/// new to the caller.
pub type Listed = (Vec<String>, Vec<Box<dyn LoopStore>>);

/// The store a root uses (`--store`, `$AUTOMATON_STORE`, or `store` in
/// `<root>/automaton.toml`): the one way commands find, list, create and
/// remove loops, whichever store it is; and this process's own actor, as
/// the store says who it is ([`Stores::me`]).
#[derive(Clone)]
pub struct Stores {
    store: Arc<dyn Store>,
    me: Arc<Actor>,
    /// The root-wide access every loop falls back to
    /// ([`crate::admin::resolved_access`]).
    access: Arc<crate::access::Access>,
}

impl Stores {
    /// Opens the root's store: for PostgreSQL, connects and brings the
    /// schema up to date. A process that serves many requests (`serve`)
    /// opens it once and hands it to what each request runs. This
    /// process's actor is resolved here, once: the delegates it honours
    /// are those the store records ([`crate::admin::honoured_delegates`]),
    /// and a PostgreSQL store's role is recorded beside it.
    pub fn open(root: &Root) -> Result<Stores> {
        let (store, role): (Arc<dyn Store>, Option<String>) = match root.store() {
            StoreChoice::File => (Arc::new(FileStore::new(root)), None),
            StoreChoice::Postgres(url) => {
                let db = pg::Database::open(url, root.loops_dir(), root.server_bound())?;
                let role = db.role().to_owned();
                (Arc::new(db), Some(role))
            }
        };
        let delegates = crate::admin::honoured_delegates(root, &*store)?;
        let me = Arc::new(crate::who::own(&delegates, role.as_deref()));
        let access = Arc::new(crate::admin::resolved_access(root, store.root_access()?));
        Ok(Stores { store, me, access })
    }

    /// The root-wide `[access]` every loop whose loop.toml leaves a role
    /// unset falls back to: on a shared store the one recorded there
    /// ([`crate::admin::resolved_access`]).
    pub fn access(&self) -> &crate::access::Access {
        &self.access
    }

    /// This process's own actor: its OS user, or the person a recorded
    /// delegate acts for, with the store's database role. What the
    /// process's own commands, its scheduler and its recoveries of dead
    /// ticks are recorded as.
    pub fn me(&self) -> &Actor {
        &self.me
    }

    /// The database role of the store's connections, if it is on a server.
    pub fn db_role(&self) -> Option<&str> {
        self.me.db_role.as_deref()
    }

    /// The OS user of this process as the actor, whoever `$AUTOMATON_USER`
    /// names: who does an admin's acts ([`crate::admin`]).
    pub(crate) fn os_actor(&self) -> Actor {
        crate::who::os_actor(self.db_role())
    }

    /// Moves loop `name` from this store to `to` with its config, state and
    /// history (each event keeps its version), under the loop's lock here:
    /// a loop whose lock is held is refused. A tick that died mid-way is
    /// recorded first, as `by` found it. Returns the events moved.
    pub(crate) fn move_loop(&self, to: &Stores, name: &str, by: &Actor) -> Result<usize> {
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
        let state = session.load(by)?.state;
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
        let moved = history.events.len();
        let (refusals, events): (Vec<Event>, Vec<Event>) = history
            .events
            .into_iter()
            .partition(|e| matches!(e.kind, EventKind::Refused { .. }));
        to.adopt(src.name(), &config, &state, &events)?;
        // The refusals follow it, kept apart there too; one that cannot
        // be is said, and does not undo the move.
        let moved_to = to.get(name)?;
        for r in &refusals {
            if let Err(e) = moved_to.record_refusal(r) {
                tracing::warn!("loop {name:?}: a refusal was not moved: {e}");
            }
        }
        session.forget()?;
        Ok(moved)
    }
}

impl std::ops::Deref for Stores {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        self.store.as_ref()
    }
}

/// The loop `name` in the store `root` uses; it must exist.
pub fn open(root: &Root, name: &str) -> Result<Box<dyn LoopStore>> {
    Stores::open(root)?.get(name)
}

/// The `[access]` lists that hold for the loop `store` with the root's
/// defaults: its loop.toml's, else (when it does not load) the root's alone.
pub(crate) fn access_rules(store: &dyn LoopStore, defaults: &Access) -> Access {
    match store.config() {
        Ok(config) => crate::access::rules_of(&config, defaults),
        Err(_) => defaults.clone(),
    }
}

/// One loop in a store.
pub trait LoopStore: Send + Sync {
    fn name(&self) -> &LoopName;

    /// The directory paths in loop.toml are relative to (gate files, the
    /// workdir, the worktree).
    fn base_dir(&self) -> &Path;

    /// What messages call the loop's loop.toml.
    fn config_path(&self) -> PathBuf;

    /// Where the loop lives, for messages.
    fn location(&self) -> String {
        self.base_dir().display().to_string()
    }

    /// A sign of the loop's last commit, for a caller that asks again and
    /// again whether the loop changed (the daemon, of a loop it found
    /// paused): `None` where asking costs as much as reading the state.
    fn stamp(&self) -> Option<Stamp> {
        None
    }

    /// The loop's config, read and validated.
    /// The budgets' ledger its store keeps for every host, when it keeps
    /// one: as [`Store::shared_ledger`].
    fn shared_ledger(&self) -> Option<&dyn crate::budget::SharedLedger> {
        None
    }

    fn config(&self) -> Result<LoopConfig>;

    /// The loop's config as written.
    fn config_text(&self) -> Result<String>;

    /// The loop's config byte for byte, for `edit`, which must be able to
    /// open a loop.toml that is not UTF-8 text in order to mend it.
    fn config_bytes(&self) -> Result<Vec<u8>> {
        self.config_text().map(String::into_bytes)
    }

    /// Replaces the loop's config with `text`, which the caller has
    /// checked, atomically and durably. Takes no lock: each command reads
    /// the config afresh.
    fn save_config(&self, text: &[u8]) -> Result<()>;

    /// The last committed state, read without the lock.
    fn load(&self) -> Result<State>;

    /// The committed history, oldest first, consistent with the state that
    /// was committed when it was read, with the refusals kept apart merged
    /// in ([`crate::history::merge`]); read without the lock.
    fn history(&self) -> Result<History>;

    /// The newest `n` events of the history (as [`LoopStore::history`]
    /// has them) that `admits` takes, oldest first: what a bounded answer
    /// needs. The file store reads them from the end, holding no more
    /// than they are.
    fn history_last(&self, n: usize, admits: &dyn Fn(&Event) -> bool) -> Result<History> {
        let mut history = self.history()?;
        history.events.retain(|e| admits(e));
        let skip = history.events.len().saturating_sub(n);
        history.events.drain(..skip);
        Ok(history)
    }

    /// What a gate's `request` asks to see of the loop's runs at `now`
    /// (`context.history`): the committed runs up to tick `committed`, and
    /// `current` (this tick's run, after its step, not yet committed) as
    /// the newest. Made here from the whole history; the file store and
    /// PostgreSQL keep a ledger of the runs so a tick reads little of it
    /// ([`crate::ledger`]).
    fn gate_history(
        &self,
        committed: u64,
        request: &crate::domain::HistoryRequest,
        now: jiff::Timestamp,
        current: Option<&crate::domain::PastRun>,
    ) -> Result<crate::domain::GateHistory> {
        let history = self.history()?;
        let entries = crate::ledger::from_events(
            history
                .events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Tick { tick, .. } if tick <= committed)),
        );
        let now = u64::try_from(now.as_millisecond()).unwrap_or(0);
        crate::ledger::answer(&mut entries.as_slice(), request, now, current)
            .map_err(crate::error::Error::io("read the history of", self.location()))
    }

    /// Keeps a `refused` event apart from the history, without the loop's
    /// lock: a record of its own, bounded (the oldest go first), that
    /// [`LoopStore::history`] merges in. So refusals never rotate the
    /// history, and the `created` event and the operators' records stay.
    fn record_refusal(&self, event: &Event) -> Result<()>;

    /// Who holds the loop's lock, if anyone alive does.
    fn holder(&self) -> Option<Holder>;

    /// The loop's ledger of firings ([`crate::fires`]), folded, oldest
    /// first: the records whose last firing fell at or after `since`.
    fn fires(&self, since: Option<jiff::Timestamp>) -> Result<Vec<crate::fires::Fire>>;

    /// A mark of the ledger of firings that moves whenever a record is
    /// added to or folded into it ([`Store::fires_marks`]); `None` when
    /// there is none to read cheaply.
    fn fires_mark(&self) -> Option<String> {
        None
    }

    /// Adds to the ledger the records `make` makes, given its last record
    /// (from which the firings missed since are counted), folded into it
    /// where [`crate::fires::Fire::folds`] says so. Only the scheduler
    /// that fires the loop (the daemon, or the tick an OS schedule runs)
    /// writes its ledger.
    fn record_fires(
        &self,
        make: &mut dyn FnMut(Option<&crate::fires::Fire>) -> Vec<crate::fires::Fire>,
    ) -> Result<()>;

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
    /// A tick found dead mid-way is recorded as crashed, as `by` found it
    /// (the loading process's own actor, [`Stores::me`]: not the person a
    /// server acts for), in a commit of its own made before this returns,
    /// and returned in [`Loaded::recovered`].
    /// A store may skip looking for what nobody can have left (the file
    /// store, when the last holder let go with the files whole).
    fn load(&mut self, by: &Actor) -> Result<Loaded>;

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
    fn commit(
        &mut self,
        by: &Actor,
        state: &mut State,
        events: Vec<EventKind>,
        durability: Durability,
    ) -> Result<()>;

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

/// What a commit writes: the state's next version and the events stamped
/// with it, once the version check has passed. Every store's commit starts
/// here.
struct Next {
    state: State,
    events: Vec<Event>,
}

impl Next {
    /// The commit of `state` with `events` in a session that loaded or last
    /// committed version `held` (`None`: it may commit no more).
    fn of(
        name: &LoopName,
        held: Option<u64>,
        state: &State,
        events: Vec<EventKind>,
        by: &Actor,
    ) -> Result<Next> {
        if held != Some(state.version) {
            return Err(crate::Error::Conflict {
                name: name.to_string(),
                expected: held,
                found: state.version,
            });
        }
        let now = crate::clock::now();
        let mut next = state.clone();
        next.version = state.version + 1;
        next.updated_at = now;
        Ok(Next {
            events: stamp(events, next.version, now, by),
            state: next,
        })
    }
}

/// Records the tick that `state` says is in flight, whose holder is gone
/// (the caller holds the lock), as crashed, in a commit of its own through
/// `session`, as `by` found it; returns it. Every store's `load` ends here.
fn recover(
    session: &mut dyn Session,
    name: &LoopName,
    state: &mut State,
    by: &Actor,
) -> Result<Option<InFlight>> {
    let Some(dead) = state.in_flight.take() else {
        return Ok(None);
    };
    tracing::warn!(
        "loop {:?}: tick {} (pid {} on {}) died mid-way; recorded as crashed",
        name.as_str(),
        dead.tick,
        dead.pid,
        dead.host
    );
    let event = record_crash(state, &dead);
    // A commit whose directory sync failed is the crash's record only: the
    // command that found it goes no further and must not say its own
    // change was made.
    let committed = session.commit(by, state, vec![event], Durability::Full);
    match committed {
        Err(crate::error::Error::NotDurable {
            name,
            version,
            source,
        }) => Err(crate::error::Error::RecoveryNotDurable {
            name,
            tick: dead.tick,
            version,
            source,
        }),
        other => other.map(|()| Some(dead)),
    }
}

/// Events of one commit, stamped with the version they belong to.
fn stamp(events: Vec<EventKind>, version: u64, at: jiff::Timestamp, by: &Actor) -> Vec<Event> {
    events
        .into_iter()
        .map(|kind| Event::stamped(kind, version, at, by))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::who::identify;

    /// A file store with one loop, made as `by`'s.
    fn made(by: &Actor) -> (tempfile::TempDir, Box<dyn LoopStore>) {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::at(tmp.path());
        init_root(&root).unwrap();
        let name = LoopName::new("l").unwrap();
        let config = "[step]\ncommand = \"true\"\n";
        let mut state = State::new(crate::clock::now());
        state.version = 1;
        let created = EventKind::Created { by: by.user.clone() };
        let dir = FileStore::new(&root)
            .create(&name, config, &state, vec![created], by)
            .unwrap();
        (tmp, dir)
    }

    #[test]
    fn records_name_the_actor_they_are_given_and_a_dead_tick_its_finder() {
        let (ann, zed) = (identify("ann", None, &[]), identify("zed", None, &[]));
        let (_tmp, dir) = made(&ann);
        {
            let mut session = dir.lock(Holder::me("tick"), Wait::No).unwrap();
            let mut state = session.load(&ann).unwrap().state;
            state.in_flight = Some(InFlight {
                tick: 1,
                pid: std::process::id(),
                host: crate::who::host(),
                started_at: crate::clock::now(),
                group: None,
                group_start: None,
            });
            session
                .commit(&ann, &mut state, Vec::new(), Durability::Relaxed)
                .unwrap();
        }
        let mut session = dir.lock(Holder::me("pause"), Wait::No).unwrap();
        let loaded = session.load(&zed).unwrap();
        assert_eq!(loaded.recovered.map(|f| f.tick), Some(1));
        drop(session);
        let events = dir.history().unwrap().events;
        let by: Vec<(&str, Option<&str>)> = events
            .iter()
            .map(|e| match &e.kind {
                EventKind::Created { .. } => "created",
                EventKind::Crashed { .. } => "crashed",
                _ => "other",
            })
            .zip(events.iter().map(|e| e.actor.as_ref().map(|a| a.user.as_str())))
            .collect();
        assert_eq!(by, [("created", Some("ann")), ("crashed", Some("zed"))]);
    }

    /// Commits `events` to `dir` as `by`.
    fn commit(dir: &dyn LoopStore, by: &Actor, events: Vec<EventKind>) {
        let mut session = dir.lock(Holder::me("approve"), Wait::No).unwrap();
        let mut state = session.load(by).unwrap().state;
        session.commit(by, &mut state, events, Durability::Full).unwrap();
    }

    #[test]
    fn the_few_loops_feed_tells_of_approvals_committed_and_of_followed_loops_only() {
        let ann = identify("ann", None, &[]);
        let (tmp, dir) = made(&ann);
        let store = FileStore::new(&Root::at(tmp.path()));
        let mut feed = store.watch_few().unwrap();
        let zero = std::time::Duration::ZERO;
        let names = |feed: &mut Box<dyn Changes>| -> Vec<String> {
            feed.wait(zero).unwrap().into_iter().map(|c| c.name).collect()
        };
        assert!(names(&mut feed).is_empty());
        // A commit to a loop not followed, with no approval: not told.
        commit(
            &*dir,
            &ann,
            vec![EventKind::Paused {
                by: "ann".into(),
                reason: None,
            }],
        );
        assert!(names(&mut feed).is_empty());
        // An approval is told, whichever loop it is for.
        let approved = EventKind::Approved {
            by: "ann".into(),
            id: "a1".into(),
            note: None,
            await_id: None,
            head: None,
            snapshot: None,
        };
        commit(&*dir, &ann, vec![approved]);
        assert_eq!(names(&mut feed), ["l"]);
        assert!(names(&mut feed).is_empty());
        // A followed loop's commit is told; once unfollowed, no more.
        feed.follow("l", true);
        std::thread::sleep(std::time::Duration::from_millis(20));
        commit(
            &*dir,
            &ann,
            vec![EventKind::Resumed {
                by: "ann".into(),
                from: crate::state::Status::Paused,
            }],
        );
        assert_eq!(names(&mut feed), ["l"]);
        feed.follow("l", false);
        std::thread::sleep(std::time::Duration::from_millis(20));
        commit(
            &*dir,
            &ann,
            vec![EventKind::Paused {
                by: "ann".into(),
                reason: None,
            }],
        );
        assert!(names(&mut feed).is_empty());
    }
}
