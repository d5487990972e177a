//! The PostgreSQL store: loops shared by runner hosts and operators on
//! several machines (docs/postgres.md). A loop is a row of `loops` (its
//! loop.toml text, its state as JSON, its version), its history the rows
//! of `events`. A session is a connection of its own holding a
//! session-level advisory lock on the loop, so the server releases it when
//! the runner dies or its connection drops; the holder (pid, host,
//! command, tick, since) is a row of `holders`, read as stale once its
//! lease has run out (the lease, not the advisory lock, holds the lock:
//! `lease.rs`). A commit is one transaction: the
//! state row updated `WHERE version = $old` (so a lost update is
//! impossible even without the lock) and the commit's events inserted.
//! Step output and relative gate files stay on the host, in
//! `<root>/loops/<name>/`. This folder is the only code that sees a
//! `tokio_postgres` type; every call on the server keeps its bound
//! (`client.rs`).

mod budgets;
mod client;
mod commit;
mod conn;
mod fires;
mod firings;
mod lease;
mod listing;
mod refusals;
mod runs;
mod schema;
mod session;
mod users;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{Client, PgError, Transaction};

use super::{Change, Changes, Finding, Level, LoopStore, Session, Store};
use crate::config::LoopConfig;
use crate::error::{Error, Result};
use crate::history::{BadLine, Event, EventKind, History};
use crate::lock::{self, Holder, Wait};
use crate::root::LoopName;
use crate::state::State;
use crate::who::Actor;
use session::PgSession;

/// The longest pause between two attempts to take a held lock (each is a
/// round trip to the server, so fewer than the file store's).
const MAX_POLL: Duration = Duration::from_millis(100);
/// Idle connections kept for reuse (the daemon's workers, a command's
/// reads and its session).
const IDLE_MAX: usize = 8;
/// The advisory-lock key of a loop: its name in the schema its tables live
/// in, so roots sharing a database (in different schemas) never contend.
const KEY: &str = "hashtextextended('automaton:' || current_schema() || ':' || $1, 0)";
/// The key operators waiting for a loop's lock hold shared, and a tick
/// about to take it tries for exclusively (the waiting operators' line).
const WAITING_KEY: &str = "hashtextextended('automaton:waiting:' || current_schema() || ':' || $1, 0)";
/// The notification channel: a loop's name, sent on every create, config
/// change and removal; `NAME state` on every commit of its state.
pub(super) const CHANNEL: &str = "automaton_loops";
/// Keeps a connection that idles by design (the listener, the lease
/// renewals') from being ended by the server's `idle_session_timeout`,
/// where the server has one and it is set (a DBA's default).
const NEVER_IDLE_OUT: &str = "SELECT set_config('idle_session_timeout', '0', false)
     WHERE coalesce(current_setting('idle_session_timeout', true), '0') <> '0'";
/// What follows a loop's name in a commit's notification.
const STATE_ONLY: &str = " state";

/// Whether `e`, or an error that caused it, is a PostgreSQL server turning
/// a new connection away for want of slots (`too many clients`,
/// `remaining connection slots are reserved`: SQLSTATE 53300).
pub(crate) fn refuses_connections(e: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let server = c
            .downcast_ref::<client::ConnectError>()
            .and_then(|c| match c {
                client::ConnectError::Server(e) => Some(e),
                _ => None,
            })
            .or_else(|| match c.downcast_ref::<PgError>() {
                Some(PgError::Server(e)) => Some(e),
                _ => None,
            })
            .or_else(|| c.downcast_ref::<tokio_postgres::Error>());
        if server.is_some_and(|e| e.code() == Some(&tokio_postgres::error::SqlState::TOO_MANY_CONNECTIONS)) {
            return true;
        }
        cause = c.source();
    }
    false
}

/// One PostgreSQL store: how to connect, and the connections kept idle.
pub struct Database {
    /// The URL with its password redacted: the only form ever shown.
    url: String,
    connector: conn::Connector,
    /// Where this host keeps each loop's local files.
    loops_dir: PathBuf,
    idle: Mutex<Vec<Client>>,
    /// The renewals of the leases this process holds: one connection.
    renewals: lease::Renewals,
    /// Who the database knows this process as, recorded beside its actor.
    role: String,
    /// The root-wide access the admin record held when the store was
    /// opened (`access import`); `None`: none recorded.
    access: Option<crate::access::Access>,
    /// A daemon's bookkeeping connection ([`Database::keep_bookkeeping`]):
    /// its ledger records, and the settling and renewal of its claims.
    kept: Mutex<Option<Client>>,
    /// Whether the bookkeeping uses `kept`: set by a daemon.
    keeps: std::sync::atomic::AtomicBool,
}

impl Database {
    /// Connects to the store at `url`, bringing its schema up to date (or
    /// refusing one newer than this binary knows); `bound`, a command's
    /// `--timeout`, shortens every wait on the server (docs/postgres.md).
    pub fn open(url: &str, loops_dir: PathBuf, bound: Option<Duration>) -> Result<Arc<Database>> {
        let shown = crate::root::redact(url);
        let connector = conn::config(url, &shown, bound)?;
        let mut db = Database {
            url: shown,
            renewals: lease::Renewals::new(connector.clone()),
            connector,
            loops_dir,
            idle: Mutex::new(Vec::new()),
            role: String::new(),
            access: None,
            kept: Mutex::new(None),
            keeps: std::sync::atomic::AtomicBool::new(false),
        };
        let mut client = db.connect(None)?;
        // Behind a pooler, a second connection made while the first is
        // idle: one in transaction or statement pooling mode gives it the
        // first one's server session, marked, and it is refused, so that
        // the first command through a pool no one used yet is refused too
        // (docs/postgres.md, "Poolers"). Kept idle for the command's use.
        let second = match db.connector.is_between() {
            true => Some(db.connect(None)?),
            false => None,
        };
        schema::ensure(&mut client, &db.url)?;
        // The role, and the root-wide access recorded, in one round trip.
        let row = client
            .query_one(
                "SELECT current_user::text,
                        (SELECT record::text FROM admin_log WHERE kind = 'access-set' ORDER BY n DESC LIMIT 1)",
                &[],
            )
            .map_err(db.fail(None, "cannot read the connection's role"))?;
        db.role = crate::bounds::name(row.get(0));
        if let Some(text) = row.get::<_, Option<String>>(1) {
            let entry: crate::admin::Entry =
                serde_json::from_str(&text).map_err(|e| Error::CorruptState {
                    path: format!("{}/admin_log (the root-wide access)", db.url).into(),
                    reason: e.to_string(),
                })?;
            db.access = crate::admin::recorded_access(&[entry]);
        }
        db.put_back(client);
        if let Some(second) = second {
            db.put_back(second);
        }
        Ok(Arc::new(db))
    }

    /// The role the database knows this process's connections as.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The redacted URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn connect(&self, name: Option<&str>) -> Result<Client> {
        self.connector.connect().map_err(|e| Error::Database {
            name: name.map(str::to_owned),
            url: self.url.clone(),
            action: "cannot connect".to_owned(),
            lock_wait: false,
            source: Box::new(e),
        })
    }

    /// An error about loop `name` (or the store) while doing `action`.
    fn fail(&self, name: Option<&str>, action: &str) -> impl FnOnce(PgError) -> Error {
        let (name, url, action) = (name.map(str::to_owned), self.url.clone(), action.to_owned());
        move |e| Error::Database {
            name,
            url,
            action,
            lock_wait: e.is_lock_wait(),
            source: Box::new(e),
        }
    }

    /// An error about a write of `what` to loop `name` (or the store): one
    /// whose answer was lost may have been made, and `check` says whether.
    fn fail_write(
        &self,
        name: Option<&str>,
        action: &str,
        what: &str,
        check: &str,
    ) -> impl FnOnce(PgError) -> Error {
        let (url, what, check) = (self.url.clone(), what.to_owned(), check.to_owned());
        let fail = self.fail(name, action);
        let name = name.map(str::to_owned);
        move |e| match e.outcome_unknown() {
            true => Error::MaybeMade {
                name,
                url,
                what,
                check,
                source: Box::new(e),
            },
            false => fail(e),
        }
    }

    /// From now on, keeps a connection for this process's bookkeeping
    /// (the ledger of firings, and the settling and renewal of claims),
    /// made now: a server that has no connection left to give cannot
    /// refuse a tick that ran its record in the ledger, nor its next
    /// firing. One the server ends is made again when next needed.
    pub(crate) fn keep_bookkeeping(&self) -> Result<()> {
        self.keeps.store(true, std::sync::atomic::Ordering::Relaxed);
        let client = self.connect_kept(None)?;
        *self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(client);
        Ok(())
    }

    /// A connection made to be kept: the server's idle timeout does not
    /// end it.
    fn connect_kept(&self, name: Option<&str>) -> Result<Client> {
        let mut client = self.connect(name)?;
        client
            .batch_execute(NEVER_IDLE_OUT)
            .map_err(self.fail(name, "cannot keep a connection for the bookkeeping"))?;
        Ok(client)
    }

    /// Runs a bookkeeping write `f`, as [`Database::with`]: on the kept
    /// connection where a daemon keeps one and it is free; else on one of
    /// the pool, unless the server refuses a new one, when it waits for
    /// the kept one.
    fn bookkeeping<T>(
        &self,
        name: Option<&str>,
        action: &str,
        f: impl FnOnce(&mut Client) -> Result<T, PgError>,
    ) -> Result<T> {
        use std::sync::TryLockError;
        if !self.keeps.load(std::sync::atomic::Ordering::Relaxed) {
            return self.with(name, action, f);
        }
        let mut kept = match self.kept.try_lock() {
            Ok(kept) => kept,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => match self.take(name) {
                Ok(mut client) => {
                    let out = f(&mut client).map_err(self.fail(name, action))?;
                    self.put_back(client);
                    return Ok(out);
                }
                Err(e) if refuses_connections(&e) => self
                    .kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Err(e) => return Err(e),
            },
        };
        let client = match kept.take() {
            Some(c) if !c.is_closed() => kept.insert(c),
            _ => kept.insert(self.connect_kept(name)?),
        };
        f(client).map_err(self.fail(name, action))
    }

    /// An idle connection, or a new one.
    fn take(&self, name: Option<&str>) -> Result<Client> {
        let idle = self.idle.lock().map_or(None, |mut v| v.pop());
        match idle {
            Some(c) if !c.is_closed() => Ok(c),
            _ => self.connect(name),
        }
    }

    fn put_back(&self, client: Client) {
        if client.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < IDLE_MAX
        {
            idle.push(client);
        }
    }

    /// Runs `f` on a connection; a connection that failed is not reused.
    fn with<T>(
        &self,
        name: Option<&str>,
        action: &str,
        f: impl FnOnce(&mut Client) -> Result<T, PgError>,
    ) -> Result<T> {
        self.run(name, f, self.fail(name, action))
    }

    /// Runs a write of `what` on a connection, as [`Database::with`]; one
    /// whose answer was lost is said to be maybe made, `check` saying how
    /// to tell.
    fn write<T>(
        &self,
        name: Option<&str>,
        (action, what, check): (&str, &str, &str),
        f: impl FnOnce(&mut Client) -> Result<T, PgError>,
    ) -> Result<T> {
        self.run(name, f, self.fail_write(name, action, what, check))
    }

    fn run<T>(
        &self,
        name: Option<&str>,
        f: impl FnOnce(&mut Client) -> Result<T, PgError>,
        fail: impl FnOnce(PgError) -> Error,
    ) -> Result<T> {
        let mut client = self.take(name)?;
        let out = f(&mut client).map_err(fail)?;
        self.put_back(client);
        Ok(out)
    }

    /// The loop `name`, which must exist.
    pub(crate) fn open_loop(self: &Arc<Self>, name: &str) -> Result<PgLoop> {
        let lp = self.handle(LoopName::new(name)?);
        if !lp.exists()? {
            return Err(lp.no_such());
        }
        Ok(lp)
    }

    fn handle(self: &Arc<Self>, name: LoopName) -> PgLoop {
        PgLoop {
            base: self.loops_dir.join(name.as_str()),
            config_path: PathBuf::from(format!("{}/loops/{name}/loop.toml", self.url)),
            db: Arc::clone(self),
            name,
        }
    }

    /// The loops in the store, sorted by name.
    pub fn list(self: &Arc<Self>) -> Result<Vec<PgLoop>> {
        let names = self.with(None, "cannot list the loops", |c| {
            c.query("SELECT name FROM loops ORDER BY name", &[])
        })?;
        Ok(names
            .iter()
            .filter_map(|r| r.try_get::<_, String>(0).ok())
            .filter_map(|n| LoopName::new(&n).ok())
            .map(|n| self.handle(n))
            .collect())
    }

    /// Makes a loop from its config text and first state and events; fails
    /// if it exists.
    pub fn create(
        self: &Arc<Self>,
        name: &LoopName,
        config_text: &str,
        state: &State,
        events: Vec<EventKind>,
        by: &Actor,
    ) -> Result<PgLoop> {
        let lp = self.handle(name.clone());
        let events = super::stamp(events, state.version, state.updated_at, by);
        let check = format!("automaton status {name}");
        let what = ("cannot create the loop", "the loop's creation", check.as_str());
        let made = self.write(Some(name.as_str()), what, |c| {
            let mut tx = c.transaction()?;
            if !insert_loop(&mut tx, name, config_text, state)? {
                return Ok(false);
            }
            insert_events(&mut tx, name.as_str(), state.version, &events)?;
            notify(&mut tx, name.as_str())?;
            tx.commit()?;
            Ok(true)
        })?;
        if !made {
            return Err(Error::LoopExists {
                name: name.to_string(),
                root: PathBuf::from(&self.url),
            });
        }
        Ok(lp)
    }

    /// Writes a loop moved here from another store: its config, state and
    /// history, each event keeping its version, in one transaction. Fails
    /// if the loop exists here.
    pub fn import(&self, name: &LoopName, config_text: &str, state: &State, events: &[Event]) -> Result<()> {
        let check = format!("automaton status {name}");
        let what = ("cannot import the loop", "the loop's import", check.as_str());
        let made = self.write(Some(name.as_str()), what, |c| {
            let mut tx = c.transaction()?;
            if !insert_loop(&mut tx, name, config_text, state)? {
                return Ok(false);
            }
            for chunk in events.chunk_by(|a, b| a.v == b.v) {
                insert_events(&mut tx, name.as_str(), chunk[0].v, chunk)?;
            }
            notify(&mut tx, name.as_str())?;
            tx.commit()?;
            Ok(true)
        })?;
        if !made {
            return Err(Error::LoopExists {
                name: name.to_string(),
                root: PathBuf::from(&self.url),
            });
        }
        Ok(())
    }

    /// Replaces loop `name`'s config text (as `edit` does with loop.toml).
    pub fn set_config(&self, name: &LoopName, text: &str) -> Result<()> {
        let check = format!("automaton edit {name}");
        let what = ("cannot save the config", "the config's change", check.as_str());
        self.write(Some(name.as_str()), what, |c| {
            let mut tx = c.transaction()?;
            tx.execute(
                "UPDATE loops SET config = $2 WHERE name = $1",
                &[&name.as_str(), &text],
            )?;
            notify(&mut tx, name.as_str())?;
            tx.commit()
        })
    }

    /// A connection listening for changes to loops.
    pub fn listen(self: &Arc<Self>) -> Result<Listener> {
        let mut client = self.connect(None)?;
        client
            .batch_execute(NEVER_IDLE_OUT)
            .map_err(self.fail(None, "cannot listen for changes"))?;
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .map_err(self.fail(None, "cannot listen for changes"))?;
        Ok(Listener {
            client,
            db: Arc::clone(self),
        })
    }
}

impl Store for Arc<Database> {
    fn describe(&self) -> String {
        self.url().to_owned()
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn get(&self, name: &str) -> Result<Box<dyn LoopStore>> {
        Ok(Box::new(self.open_loop(name)?))
    }

    fn handle(&self, name: &str) -> Result<Box<dyn LoopStore>> {
        Ok(Box::new(Database::handle(self, LoopName::new(name)?)))
    }

    fn read_all(&self) -> Result<Vec<super::Listing>> {
        Database::read_all(self)
    }

    fn shared_ledger(&self) -> Option<&dyn crate::budget::SharedLedger> {
        Some(&**self)
    }

    fn list(&self) -> Result<Vec<Box<dyn LoopStore>>> {
        Ok(Database::list(self)?
            .into_iter()
            .map(|l| Box::new(l) as Box<dyn LoopStore>)
            .collect())
    }

    fn create(
        &self,
        name: &LoopName,
        config_text: &str,
        state: &State,
        events: Vec<EventKind>,
        by: &Actor,
    ) -> Result<Box<dyn LoopStore>> {
        Ok(Box::new(Database::create(
            self,
            name,
            config_text,
            state,
            events,
            by,
        )?))
    }

    fn adopt(&self, name: &LoopName, config_text: &str, state: &State, events: &[Event]) -> Result<()> {
        self.import(name, config_text, state, events)
    }

    fn watch(&self) -> Result<Box<dyn Changes>> {
        Database::listen(self).map(|l| Box::new(l) as Box<dyn Changes>)
    }

    fn notifies(&self) -> bool {
        true
    }

    fn fires_marks(&self) -> Option<Result<std::collections::HashMap<String, String>>> {
        Some(self.read_fires_marks())
    }

    fn claims(&self) -> Option<&dyn super::Claims> {
        Some(self.as_ref())
    }

    fn users(&self) -> Result<Vec<crate::users::User>> {
        users::read(self)
    }

    fn put_user(&self, user: &crate::users::User, entry: &crate::admin::Entry) -> Result<()> {
        users::put(self, user, entry)
    }

    fn remove_user(&self, name: &str, entry: &crate::admin::Entry) -> Result<bool> {
        users::remove(self, name, entry)
    }

    fn admin_log(&self) -> Result<Vec<crate::admin::Entry>> {
        users::log(self)
    }

    fn record_admin(&self, entry: &crate::admin::Entry) -> Result<()> {
        users::record(self, entry)
    }

    fn root_access(&self) -> Result<Option<crate::access::Access>> {
        Ok(self.access.clone())
    }

    fn keep_bookkeeping(&self) -> Result<()> {
        Database::keep_bookkeeping(self)
    }

    fn change_delegates(
        &self,
        change: &mut dyn FnMut(Vec<String>) -> Option<crate::admin::Entry>,
    ) -> Result<Option<crate::admin::Entry>> {
        users::change_delegates(self, change)
    }
}

/// A connection that listens for changes to loops.
pub struct Listener {
    client: Client,
    db: Arc<Database>,
}

impl Changes for Listener {
    /// Waits up to `timeout` for a loop to change (a commit, a new loop, a
    /// removal); returns the names notified.
    fn wait(&mut self, timeout: Duration) -> Result<Vec<Change>> {
        let notes = self
            .client
            .notifications(timeout)
            .map_err(self.db.fail(None, "lost the notification connection"))?;
        let change = |payload: &str| match payload.strip_suffix(STATE_ONLY) {
            Some(name) => Change {
                name: name.to_owned(),
                state_only: true,
            },
            None => Change {
                name: payload.to_owned(),
                state_only: false,
            },
        };
        Ok(notes.iter().map(|n| change(n.payload())).collect())
    }
}

/// Inserts loop `name`'s row; false when a loop of that name exists.
fn insert_loop(
    tx: &mut Transaction<'_>,
    name: &LoopName,
    config_text: &str,
    state: &State,
) -> Result<bool, PgError> {
    let n = tx.execute(
        "INSERT INTO loops (name, config, state, version) VALUES ($1, $2, $3::text::json, $4)
         ON CONFLICT (name) DO NOTHING",
        &[
            &name.as_str(),
            &config_text,
            &state_text(state),
            &(state.version as i64),
        ],
    )?;
    Ok(n == 1)
}

fn notify(tx: &mut Transaction<'_>, name: &str) -> Result<(), PgError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &name])
        .map(drop)
}

fn state_text(state: &State) -> String {
    serde_json::to_string(state).expect("state serialises")
}

fn insert_events(
    tx: &mut Transaction<'_>,
    name: &str,
    version: u64,
    events: &[Event],
) -> Result<(), PgError> {
    if events.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string(e).expect("events serialise"))
        .collect();
    let at = events[0].at.to_string();
    tx.execute(
        "INSERT INTO events (loop, v, n, at, event)
         SELECT $1, $2, t.i::integer, $3::text::timestamptz, t.e::json
         FROM unnest($4::text[]) WITH ORDINALITY AS t(e, i)",
        &[&name, &(version as i64), &at, &texts],
    )
    .map(drop)
}

/// One loop in a PostgreSQL store.
pub struct PgLoop {
    db: Arc<Database>,
    name: LoopName,
    /// `<root>/loops/<name>/` on this host: step output, relative gate files.
    base: PathBuf,
    /// What config errors call loop.toml.
    config_path: PathBuf,
}

impl PgLoop {
    fn n(&self) -> Option<&str> {
        Some(self.name.as_str())
    }

    fn no_such(&self) -> Error {
        Error::NoSuchLoop {
            name: self.name.to_string(),
            root: PathBuf::from(&self.db.url),
        }
    }

    fn exists(&self) -> Result<bool> {
        self.db.with(self.n(), "cannot read the loop", |c| {
            c.query_opt("SELECT 1 FROM loops WHERE name = $1", &[&self.name.as_str()])
                .map(|r| r.is_some())
        })
    }

    /// The loop's state text and version column, if the loop exists.
    fn read(&self, client: &mut Client) -> Result<Option<(String, i64)>, PgError> {
        let row = client.query_opt(
            "SELECT state::text, version FROM loops WHERE name = $1",
            &[&self.name.as_str()],
        )?;
        row.map(|r| Ok::<_, PgError>((r.try_get(0)?, r.try_get(1)?)))
            .transpose()
    }

    fn parse(&self, text: Option<(String, i64)>) -> Result<State> {
        let (text, _) = text.ok_or_else(|| self.no_such())?;
        let shown = PathBuf::from(format!("{}/loops/{}/state", self.db.url, self.name));
        super::parse_state(text.as_bytes(), &shown)
    }

    /// The holder row, if its lease still stands (its session may be gone:
    /// the lock is held until the lease runs out).
    fn live_holder(&self, client: &mut Client) -> Result<Option<Holder>, PgError> {
        let row = client.query_opt(
            "SELECT h.pid, h.host, h.command, h.tick,
                    to_char(h.since AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
             FROM holders h
             WHERE h.loop = $1 AND EXISTS (
                 SELECT 1 FROM leases l
                 WHERE l.loop = h.loop AND l.expires_at > clock_timestamp())",
            &[&self.name.as_str()],
        )?;
        Ok(row.and_then(|r| {
            Some(Holder {
                pid: u32::try_from(r.try_get::<_, i64>(0).ok()?).ok()?,
                host: r.try_get(1).ok()?,
                command: r.try_get(2).ok()?,
                tick: r.try_get::<_, Option<i64>>(3).ok()?.map(|t| t as u64),
                since: r.try_get::<_, String>(4).ok()?.parse().ok()?,
            })
        }))
    }
}

impl LoopStore for PgLoop {
    fn name(&self) -> &LoopName {
        &self.name
    }

    fn shared_ledger(&self) -> Option<&dyn crate::budget::SharedLedger> {
        Some(&*self.db)
    }

    fn base_dir(&self) -> &Path {
        &self.base
    }

    fn config_path(&self) -> PathBuf {
        self.config_path.clone()
    }

    fn location(&self) -> String {
        format!("{} (files on this host in {})", self.db.url, self.base.display())
    }

    fn config(&self) -> Result<LoopConfig> {
        let text: Option<String> = self.db.with(self.n(), "cannot read the config", |c| {
            c.query_opt("SELECT config FROM loops WHERE name = $1", &[&self.name.as_str()])?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(PgError::from)
        })?;
        let text = text.ok_or_else(|| self.no_such())?;
        Ok(LoopConfig::parse(&text, &self.config_path)?)
    }

    fn save_config(&self, text: &[u8]) -> Result<()> {
        self.db.set_config(&self.name, &String::from_utf8_lossy(text))
    }

    fn config_text(&self) -> Result<String> {
        let text: Option<String> = self.db.with(self.n(), "cannot read the config", |c| {
            c.query_opt("SELECT config FROM loops WHERE name = $1", &[&self.name.as_str()])?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(PgError::from)
        })?;
        text.ok_or_else(|| self.no_such())
    }

    fn load(&self) -> Result<State> {
        let text = self
            .db
            .with(self.n(), "cannot read the state", |c| self.read(c))?;
        self.parse(text)
    }

    fn history(&self) -> Result<History> {
        let rows = self.db.with(self.n(), "cannot read the history", |c| {
            c.query(refusals::MERGED, &[&self.name.as_str()])
        })?;
        let mut history = History::default();
        for (i, row) in rows.iter().enumerate() {
            let text: String = row.get(1);
            match serde_json::from_str::<Event>(&text) {
                Ok(e) => history.events.push(e),
                Err(e) => history.bad.push(BadLine {
                    path: PathBuf::from(format!("{}/loops/{}/events", self.db.url, self.name)),
                    line: i + 1,
                    reason: e.to_string(),
                }),
            }
        }
        Ok(history)
    }

    fn gate_history(
        &self,
        committed: u64,
        request: &crate::domain::HistoryRequest,
        now: jiff::Timestamp,
        current: Option<&crate::domain::PastRun>,
    ) -> Result<crate::domain::GateHistory> {
        let now = u64::try_from(now.as_millisecond()).unwrap_or(0);
        self.db
            .with(self.n(), "cannot read the loop's runs", |c| {
                runs::gate_history(c, self.name.as_str(), committed, request, now, current)
            })?
            .map_err(Error::io("read the runs of", self.location()))
    }

    fn fires(&self, since: Option<jiff::Timestamp>) -> Result<Vec<crate::fires::Fire>> {
        self.read_fires(since)
    }

    fn record_fires(
        &self,
        make: &mut dyn FnMut(Option<&crate::fires::Fire>) -> Vec<crate::fires::Fire>,
    ) -> Result<()> {
        self.add_fires(make)
    }

    fn history_last(&self, n: usize, admits: &dyn Fn(&Event) -> bool) -> Result<History> {
        self.read_last(n, admits)
    }

    fn record_refusal(&self, event: &Event) -> Result<()> {
        self.add_refusal(event)
    }

    fn holder(&self) -> Option<Holder> {
        self.db
            .with(self.n(), "cannot read the lock holder", |c| self.live_holder(c))
            .ok()
            .flatten()
    }

    fn check(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let (found, state) = Finding::state(self.load(), "the row");
        out.push(found);
        let holder = self.holder();
        out.push(match &holder {
            Some(h) => Finding::ok("lock", format!("held by {}", h.describe())),
            None => Finding::ok("lock", "free"),
        });
        if let Some(f) = state.as_ref().and_then(|s| s.in_flight.as_ref()) {
            let running = holder.as_ref().is_some_and(|h| h.command == "tick");
            out.push(Finding::in_flight(f, running));
        }
        match self.history() {
            Ok(h) if h.bad.is_empty() => {
                out.push(Finding::ok("history", format!("{} events", h.events.len())));
            }
            Ok(h) => out.extend(h.bad.iter().take(5).map(|b| {
                Finding::new(
                    "history",
                    Level::Warning,
                    format!("event {} cannot be read: {}", b.line, b.reason),
                    "readers pass over it",
                )
            })),
            Err(e) => out.push(Finding::new(
                "history",
                Level::Error,
                e.to_string(),
                "check the server",
            )),
        }
        out
    }

    fn lock(&self, holder: Holder, wait: Wait) -> Result<Box<dyn Session + '_>> {
        // The step's workdir and output live here, on whichever host runs it.
        crate::fsx::create_dirs(&self.base)?;
        // One connection polls for the lock and, between attempts, reads
        // who holds it: a waiting command holds one connection, not two.
        let client = std::cell::RefCell::new(self.db.take(self.n())?);
        let name = self.name.as_str();
        let ttl = lease::ttl();
        let key = std::cell::Cell::new(0i64);
        let taken = std::cell::Cell::new(None);
        let advisory = std::cell::Cell::new(false);
        // The advisory lock, then the lease: a lease still running (its
        // holder's session may be gone, its step not) keeps the lock held.
        // The lease alone decides: a session the server still keeps for a
        // holder cut off from it (the network cut, packets lost) holds the
        // advisory lock until the server notices, long after its lease ran
        // out, so a lease run out or let go is taken without the advisory
        // lock too. The lock's connection is never ended by the server for
        // idling.
        // An operator that finds the lock held waits in line, on this
        // connection: a shared advisory lock on the loop's waiting key,
        // which a tick about to take the lock tries for exclusively, in the
        // statement that takes it, and gives way when it cannot
        // ([`lock::in_line`] is the file store's). It goes with the
        // connection when the waiter dies or gives up.
        let gives_way = holder.gives_way();
        let waiting = std::cell::Cell::new(false);
        let in_line = |client: &mut Client| -> Result<()> {
            if gives_way || wait == Wait::No || waiting.get() {
                return Ok(());
            }
            client
                .query_one(
                    &format!("SELECT pg_advisory_lock_shared({WAITING_KEY})"),
                    &[&name],
                )
                .map_err(self.db.fail(Some(name), "cannot wait for the loop's lock"))?;
            waiting.set(true);
            Ok(())
        };
        let attempt = || -> Result<bool> {
            let fail = || self.db.fail(Some(name), "cannot take the loop's lock");
            let mut client = client.borrow_mut();
            let row = client
                .query_one(
                    &format!(
                        "SELECT CASE WHEN NOT $2 OR pg_try_advisory_xact_lock(w)
                                THEN pg_try_advisory_lock(k) END, k,
                            CASE WHEN current_setting('idle_session_timeout', true) <> '0'
                                THEN set_config('idle_session_timeout', '0', false) END,
                            EXISTS (SELECT 1 FROM leases
                                    WHERE loop = $1 AND expires_at > clock_timestamp())
                         FROM (SELECT {KEY} AS k, {WAITING_KEY} AS w) s"
                    ),
                    &[&name, &gives_way],
                )
                .map_err(fail())?;
            key.set(row.get(1));
            let (locked, leased): (Option<bool>, bool) = (row.get(0), row.get(3));
            // None: an operator waits, and this tick leaves the lock to it.
            let Some(locked) = locked else {
                return Ok(false);
            };
            if !locked && leased {
                return Ok(false);
            }
            match lease::take(&mut client, name, &holder, ttl).map_err(fail())? {
                Some(t) => {
                    taken.set(Some(t));
                    advisory.set(locked);
                    Ok(true)
                }
                None if locked => {
                    client
                        .query_one("SELECT pg_advisory_unlock($1)", &[&key.get()])
                        .map_err(fail())?;
                    Ok(false)
                }
                None => Ok(false),
            }
        };
        let try_take = || -> Result<bool> {
            let taken = attempt()?;
            if !taken {
                in_line(&mut client.borrow_mut())?;
            }
            Ok(taken)
        };
        let holder_now = || self.live_holder(&mut client.borrow_mut()).ok().flatten();
        lock::poll(name, wait, MAX_POLL, try_take, holder_now)?;
        let (mut client, key) = (client.into_inner(), key.get());
        if waiting.get() {
            client
                .query_one(
                    &format!("SELECT pg_advisory_unlock_shared({WAITING_KEY})"),
                    &[&name],
                )
                .map_err(
                    self.db
                        .fail(Some(name), "cannot leave the line for the loop's lock"),
                )?;
        }
        let (fence, taken_at) = taken.get().expect("the lease was taken with the lock");
        let mut session = PgSession {
            lp: self,
            client: Some(client),
            key,
            advisory: advisory.get(),
            holder,
            version: None,
            lease: lease::Lease::start(name, fence, ttl, &self.db.renewals, taken_at),
            tick_unsaid: None,
        };
        // The loop may have been removed while we waited.
        if !session.write_holder()? {
            return Err(self.no_such());
        }
        Ok(Box::new(session))
    }
}
