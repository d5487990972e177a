//! The file store: a loop is a directory, `<root>/loops/<name>/`, and this
//! is the only code that knows the names of its state, history, config and
//! lock (the files inside `runs/<tick>/` are the step runner's). A commit appends its events
//! to `history.jsonl` stamped with the new version, syncs them, then
//! replaces `.state.loop` atomically (temp file, fsync, rename, fsync the
//! directory); the rename is the commit point. A tick's `in_flight` commit
//! is written in place into `.state.flight` instead (see [`flight`]), and
//! the commit after it appends that record's events with its own. Readers
//! read the state first, take a whole record of the next version as the
//! committed state, and keep only the events of versions they have reached;
//! the next lock holder cuts whatever an unfinished commit left. A state
//! file that fails to read is reported and never overwritten.
//!
//! The parts, one job each: this file (the loop's paths and its reads
//! without the lock), `session` (recovery and the commit, under the lock),
//! `check` (what `doctor` finds), `state_file` (the state's bytes),
//! `create` (a new root, a new or adopted loop), `journal` and `rotation`
//! (the history and its rotated files), `refusals` (viewers' refusals,
//! kept apart from the history), `flight` (the `in_flight` record)
//! and `edits` (what `edit` leaves beside loop.toml); `approved` (the
//! root's last approvals, which wake the daemon).

mod approved;
mod check;
mod create;
pub mod edits;
mod fires;
mod flight;
mod journal;
mod refusals;
mod rotation;
mod session;
mod state_file;
mod users;
mod watch;

use std::fs;
use std::path::{Path, PathBuf};

use super::{Finding, LoopStore, Session, Store};
use crate::config::{ConfigError, LoopConfig};
use crate::error::{Error, Result};
use crate::fsx::{self, TMP_PREFIX};
use crate::history::{Event, EventKind, History};
use crate::lock::{self, Holder, Wait};
use crate::root::{LoopName, Root};
use crate::state::State;
use crate::who::Actor;
pub(crate) use check::check_loops_dir;
pub(crate) use create::init_root;
use create::{adopt_loop, create_loop};
use flight::Found;
use rotation::HISTORY;

/// The run ledger's file in a loop's directory.
const LEDGER: &str = "ledger.jsonl";
use session::FileSession;
pub use state_file::parse_state;

const CONFIG: &str = "loop.toml";
const STATE: &str = ".state.loop";
const LOCK: &str = ".state.lock";
/// The record of a tick's `in_flight` commit, written in place.
const FLIGHT: &str = ".state.flight";
/// The previous state, which earlier builds kept to write the next one
/// over in place; a stray now, removed with the temporary files.
const SPARE: &str = ".state.spare";

/// A loop being made by `new`, before it is renamed into place.
const NEW_PREFIX: &str = ".new-";
/// A loop being removed by `rm`, after it is renamed out of place.
const REMOVED_PREFIX: &str = ".removed-";

/// The largest state file read. States stay far smaller (what gates and
/// steps put there is bounded); a larger one is not one automaton wrote.
const STATE_MAX: u64 = 16 * 1024 * 1024;
/// How often a history read starts again when commits keep landing under it.
const HISTORY_READS: usize = 5;
/// The largest loop.toml read.
pub(super) const CONFIG_MAX: u64 = 1024 * 1024;
/// How often a read starts again when the `in_flight` record it found is
/// newer than the state file it read (commits landing under it).
const FLIGHT_READS: usize = 5;

/// One loop's directory, `<root>/loops/<name>/`: the file store's loop.
#[derive(Debug, Clone)]
pub struct LoopDir {
    name: LoopName,
    dir: PathBuf,
}

impl LoopDir {
    /// The directory of `name` under `root`, whether or not the loop exists.
    pub fn new(root: &Root, name: LoopName) -> LoopDir {
        let dir = root.loops_dir().join(name.as_str());
        LoopDir { name, dir }
    }

    /// The loop `name`, which must exist (have a state file). A loop
    /// directory that is a symbolic link is refused: its files would be
    /// read, written and removed wherever it points.
    pub fn open(root: &Root, name: &str) -> Result<LoopDir> {
        let dir = LoopDir::new(root, LoopName::new(name)?);
        if dir.is_link() {
            return Err(Error::Link { path: dir.dir });
        }
        if !dir.exists() {
            return Err(Error::NoSuchLoop {
                name: name.to_owned(),
                root: root.path().to_owned(),
            });
        }
        Ok(dir)
    }

    /// Whether the loop directory is a symbolic link.
    pub(crate) fn is_link(&self) -> bool {
        self.dir
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
    }

    pub fn name(&self) -> &LoopName {
        &self.name
    }

    /// The loop's run ledger ([`crate::ledger`]): a cache, made again
    /// from the history when lost; it goes with the loop's directory.
    fn ledger_path(&self) -> PathBuf {
        self.dir.join(LEDGER)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A loop exists when its state file does.
    pub fn exists(&self) -> bool {
        self.state_path().symlink_metadata().is_ok()
    }

    pub(crate) fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG)
    }

    pub(crate) fn state_path(&self) -> PathBuf {
        self.dir.join(STATE)
    }

    pub(crate) fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK)
    }

    pub(crate) fn history_path(&self) -> PathBuf {
        self.dir.join(HISTORY)
    }

    pub(crate) fn refusals_path(&self) -> PathBuf {
        self.dir.join(refusals::REFUSALS)
    }

    pub(crate) fn flight_path(&self) -> PathBuf {
        self.dir.join(FLIGHT)
    }

    /// Reads and validates `loop.toml`.
    pub fn config(&self) -> Result<LoopConfig> {
        let path = self.config_path();
        let text = fsx::read_regular(&path, CONFIG_MAX)?.ok_or_else(|| ConfigError::Read {
            path: path.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        let text = String::from_utf8(text).map_err(|_| ConfigError::Invalid {
            path: path.clone(),
            line: 1,
            column: 1,
            message: "the file is not UTF-8 text".to_owned(),
        })?;
        Ok(LoopConfig::parse(&text, &path)?)
    }

    /// Reads the state. Missing means no such loop; unparsable or of an
    /// unknown schema is an error naming the file.
    pub(crate) fn read_state(&self) -> Result<State> {
        let path = self.state_path();
        match fsx::read_regular(&path, STATE_MAX)? {
            Some(text) => parse_state(&text, &path),
            None => Err(Error::NoSuchLoop {
                name: self.name.to_string(),
                root: self
                    .dir
                    .parent()
                    .and_then(Path::parent)
                    .unwrap_or(&self.dir)
                    .to_owned(),
            }),
        }
    }

    /// The committed state as readers see it, without the lock: the state
    /// file, or the `in_flight` record of the next version when it is
    /// whole. A record newer than that (or torn) means the state file may
    /// have moved on since it was read: it is read again, and when it has
    /// not, the record is a write in progress (or a dead writer's) and
    /// the state file is the committed state.
    fn snapshot(&self) -> Result<Snapshot> {
        let path = self.flight_path();
        let mut state = self.read_state()?;
        for _ in 0..FLIGHT_READS {
            match flight::read(&path, state.version + 1)? {
                Found::Whole(f) => {
                    let f = *f;
                    return Ok(Snapshot {
                        base: state.version,
                        state: f.state,
                        events: f.events,
                    });
                }
                Found::Missing | Found::Stale => break,
                Found::Torn | Found::Newer(_) => {
                    let again = self.read_state()?;
                    if again.version == state.version {
                        break;
                    }
                    state = again;
                }
            }
        }
        Ok(Snapshot {
            base: state.version,
            state,
            events: Vec::new(),
        })
    }

    /// Temporary files that writers killed mid-write left behind.
    pub(crate) fn stray_files(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let entries = fs::read_dir(&self.dir).map_err(Error::io("listing", &self.dir))?;
        for entry in entries {
            let entry = entry.map_err(Error::io("listing", &self.dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if (name.starts_with(TMP_PREFIX) || name == SPARE) && entry.file_type().is_ok_and(|t| t.is_file())
            {
                out.push(entry.path());
            }
        }
        Ok(out)
    }
}

impl LoopStore for LoopDir {
    fn name(&self) -> &LoopName {
        &self.name
    }

    fn base_dir(&self) -> &Path {
        &self.dir
    }

    fn config_path(&self) -> PathBuf {
        LoopDir::config_path(self)
    }

    /// The state file's modification time: it moves with every commit.
    fn stamp(&self) -> Option<super::Stamp> {
        watch::stamp(&self.state_path())
    }

    fn config(&self) -> Result<LoopConfig> {
        LoopDir::config(self)
    }

    fn fires(&self, since: Option<jiff::Timestamp>) -> Result<Vec<crate::fires::Fire>> {
        self.read_fires(since)
    }

    fn fires_mark(&self) -> Option<String> {
        self.read_fires_mark()
    }

    fn record_fires(
        &self,
        make: &mut dyn FnMut(Option<&crate::fires::Fire>) -> Vec<crate::fires::Fire>,
    ) -> Result<()> {
        let last = self.read_last_fire()?;
        self.append_fires(&make(last.as_ref()))
    }

    fn config_bytes(&self) -> Result<Vec<u8>> {
        edits::read_config(&self.config_path())
    }

    fn save_config(&self, text: &[u8]) -> Result<()> {
        edits::save(&self.dir, &self.config_path(), text)
    }

    fn config_text(&self) -> Result<String> {
        let path = self.config_path();
        let text = fsx::read_regular(&path, CONFIG_MAX)?.ok_or_else(|| ConfigError::Read {
            path: path.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        String::from_utf8(text).map_err(|_| {
            ConfigError::Invalid {
                path,
                line: 1,
                column: 1,
                message: "the file is not UTF-8 text".to_owned(),
            }
            .into()
        })
    }

    fn load(&self) -> Result<State> {
        Ok(self.snapshot()?.state)
    }

    fn history(&self) -> Result<History> {
        // The state first: every event of a version it has reached was
        // written before it (or is in the `in_flight` record it came from).
        // A commit while the files are read may cut an unfinished commit
        // under the reader (the state's version then moves), or rotate the
        // files (the listing then changes): the read starts again.
        let mut snap = self.snapshot()?;
        let mut attempts = 0;
        loop {
            let (files, settled) = rotation::open_all(&self.dir)?;
            let mut history = journal::read_committed(files, snap.base)?;
            let now = self.snapshot()?;
            attempts += 1;
            if (settled && now.state.version == snap.state.version) || attempts == HISTORY_READS {
                history.events.append(&mut snap.events);
                let kept = refusals::read(&self.dir)?;
                history.events = crate::history::merge(history.events, kept.events);
                history.bad.extend(kept.bad);
                return Ok(history);
            }
            snap = now;
        }
    }

    fn history_last(&self, n: usize, admits: &dyn Fn(&Event) -> bool) -> Result<History> {
        // As `history`, read from the end.
        let mut snap = self.snapshot()?;
        let mut attempts = 0;
        loop {
            let (files, settled) = rotation::open_all(&self.dir)?;
            let refused = refusals::open(&self.dir)?;
            let history = journal::read_last(files, snap.base, &snap.events, refused, n, admits)?;
            let now = self.snapshot()?;
            attempts += 1;
            if (settled && now.state.version == snap.state.version) || attempts == HISTORY_READS {
                return Ok(history);
            }
            snap = now;
        }
    }

    fn gate_history(
        &self,
        committed: u64,
        request: &crate::domain::HistoryRequest,
        now: jiff::Timestamp,
        current: Option<&crate::domain::PastRun>,
    ) -> Result<crate::domain::GateHistory> {
        use crate::ledger::{self, SyncError};
        let path = self.ledger_path();
        let runs = |h: History| h.events.iter().filter_map(ledger::run_of).collect::<Vec<_>>();
        let mut newer = |after: u64, n: usize| {
            let is_newer = move |e: &Event| ledger::run_of(e).is_some_and(|r| r.tick > after);
            self.history_last(n, &is_newer).map(runs)
        };
        let mut all = || self.history().map(runs);
        let mut file = match ledger::sync(&path, committed, &mut newer, &mut all) {
            Ok(file) => file,
            Err(SyncError::History(e)) => return Err(e),
            Err(SyncError::Io(e)) => return Err(Error::io("bring up to date the run ledger", &path)(e)),
        };
        let now = u64::try_from(now.as_millisecond()).unwrap_or(0);
        ledger::answer(&mut file, request, now, current).map_err(Error::io("read the run ledger", &path))
    }

    fn record_refusal(&self, event: &Event) -> Result<()> {
        let max = self.config().map(|c| c.history).unwrap_or_default().max_size;
        refusals::append(&self.dir, event, max.as_u64())
    }

    fn holder(&self) -> Option<Holder> {
        lock::read_holder(&self.lock_path())
    }

    fn check(&self) -> Vec<Finding> {
        check::findings(self)
    }

    fn lock(&self, holder: Holder, wait: Wait) -> Result<Box<dyn Session + '_>> {
        let held = lock::acquire(&self.lock_path(), self.name.as_str(), holder, wait)?;
        Ok(Box::new(FileSession::new(self, held)))
    }
}

/// The committed state as readers see it, and where it came from.
struct Snapshot {
    state: State,
    /// The state file's version: history lines up to it are committed.
    base: u64,
    /// The events of the `in_flight` record the state came from, if it did.
    events: Vec<Event>,
}

/// The file store: a root's `loops/` directory, a directory a loop.
pub struct FileStore {
    root: Root,
}

impl FileStore {
    pub fn new(root: &Root) -> FileStore {
        FileStore { root: root.clone() }
    }

    /// Reads the console's users, lets `change` change them and, if it
    /// says it did, adds `entry` to the admin record and writes them back,
    /// under `users.lock` so two `user` commands at once never lose one's
    /// change. The entry goes first: a crash between the two leaves an
    /// entry for a change not made, never a change not recorded. Returns
    /// what `change` said.
    fn change_users(
        &self,
        entry: &crate::admin::Entry,
        change: impl FnOnce(&mut Vec<crate::users::User>) -> bool,
    ) -> Result<bool> {
        let _held = self.lock_users()?;
        let mut all = users::read(self.root.path())?;
        let changed = change(&mut all);
        if changed {
            users::append_log(self.root.path(), entry)?;
            users::write(self.root.path(), &all)?;
        }
        Ok(changed)
    }

    /// Holds `users.lock`, which guards the users and the admin record.
    fn lock_users(&self) -> Result<lock::Held> {
        let lock = self.root.path().join(USERS_LOCK);
        lock::acquire(&lock, "users.json", Holder::me("user"), USERS_WAIT)
    }
}

/// The lock file of the console's users, beside `users.json`.
const USERS_LOCK: &str = "users.lock";
/// How long a `user` command waits for another's change of the users.
const USERS_WAIT: Wait = Wait::For(std::time::Duration::from_secs(10));

impl Store for FileStore {
    fn describe(&self) -> String {
        self.root.loops_dir().display().to_string()
    }

    fn users(&self) -> Result<Vec<crate::users::User>> {
        users::read(self.root.path())
    }

    fn put_user(&self, user: &crate::users::User, entry: &crate::admin::Entry) -> Result<()> {
        self.change_users(entry, |all| {
            all.retain(|u| u.name != user.name);
            all.push(user.clone());
            true
        })
        .map(drop)
    }

    fn remove_user(&self, name: &str, entry: &crate::admin::Entry) -> Result<bool> {
        self.change_users(entry, |all| {
            let before = all.len();
            all.retain(|u| u.name != name);
            all.len() != before
        })
    }

    fn admin_log(&self) -> Result<Vec<crate::admin::Entry>> {
        users::read_log(self.root.path())
    }

    fn record_admin(&self, entry: &crate::admin::Entry) -> Result<()> {
        let _held = self.lock_users()?;
        users::append_log(self.root.path(), entry)
    }

    fn change_delegates(
        &self,
        change: &mut dyn FnMut(Vec<String>) -> Option<crate::admin::Entry>,
    ) -> Result<Option<crate::admin::Entry>> {
        let _held = self.lock_users()?;
        let current = crate::admin::recorded_delegates(&users::read_log(self.root.path())?);
        let entry = change(current);
        if let Some(entry) = &entry {
            users::append_log(self.root.path(), entry)?;
        }
        Ok(entry)
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn watch(&self) -> Result<Box<dyn super::Changes>> {
        Ok(Box::new(watch::Poll::start(&self.root)?))
    }

    fn watch_few(&self) -> Result<Box<dyn super::Changes>> {
        Ok(Box::new(watch::Few::start(&self.root)))
    }

    fn get(&self, name: &str) -> Result<Box<dyn LoopStore>> {
        Ok(Box::new(LoopDir::open(&self.root, name)?))
    }

    fn list(&self) -> Result<Vec<Box<dyn LoopStore>>> {
        Ok(list_loops(&self.root)?
            .into_iter()
            .map(|l| Box::new(l) as Box<dyn LoopStore>)
            .collect())
    }

    /// One read of the loops directory ([`walk_loops`]).
    fn list_unknown(&self, known: &dyn Fn(&str) -> bool) -> Result<crate::store::Listed> {
        let (names, new) = walk_loops(&self.root, known)?;
        Ok((
            names,
            new.into_iter()
                .map(|l| Box::new(l) as Box<dyn LoopStore>)
                .collect(),
        ))
    }

    fn create(
        &self,
        name: &LoopName,
        config_text: &str,
        state: &State,
        events: Vec<EventKind>,
        by: &Actor,
    ) -> Result<Box<dyn LoopStore>> {
        Ok(Box::new(create_loop(
            &self.root,
            name,
            config_text,
            state,
            events,
            by,
        )?))
    }

    fn adopt(&self, name: &LoopName, config_text: &str, state: &State, events: &[Event]) -> Result<()> {
        adopt_loop(&self.root, name, config_text, state, events).map(drop)
    }
}

/// The loops under `root`, sorted by name. Entries that are not loops
/// (temporary directories, stray files) are passed over.
fn list_loops(root: &Root) -> Result<Vec<LoopDir>> {
    let mut out = walk_loops(root, &|_| false)?.1;
    out.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(out)
}

/// One read of the loops directory: every loop's name, and the loops
/// `known` does not know, opened. A known loop costs no system call of its
/// own (a link in its place shows in the entry's type); a new one is
/// checked to be a directory, not a link, holding a state.
fn walk_loops(root: &Root, known: &dyn Fn(&str) -> bool) -> Result<(Vec<String>, Vec<LoopDir>)> {
    let loops = root.loops_dir();
    let (mut names, mut new) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(&loops).map_err(Error::io("listing", &loops))? {
        let entry = entry.map_err(Error::io("listing", &loops))?;
        let Some(name) = entry.file_name().to_str().and_then(|n| LoopName::new(n).ok()) else {
            continue;
        };
        if known(name.as_str()) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                names.push(name.to_string());
            }
            continue;
        }
        let dir = LoopDir::new(root, name);
        // A link in place of a loop directory is no loop (`doctor` says so).
        if !dir.is_link() && dir.exists() {
            names.push(dir.name().to_string());
            new.push(dir);
        }
    }
    Ok((names, new))
}
