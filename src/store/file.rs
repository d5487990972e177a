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

use std::fs::{self, DirBuilder, File};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::flight::{self, Flight, Found};
use super::rotation::{self, HISTORY};
use super::{Durability, Finding, Level, Loaded, LoopStore, Session, journal};
use crate::config::{ConfigError, HistoryLimits, LoopConfig};
use crate::error::{Error, Result};
use crate::fsx;
use crate::history::{Event, EventKind, History};
use crate::lock::{self, Held, Holder, Wait};
use crate::root::{LoopName, Root};
use crate::state::{SCHEMA, State};

const CONFIG: &str = "loop.toml";
const STATE: &str = ".state.loop";
const LOCK: &str = ".state.lock";
/// The record of a tick's `in_flight` commit, written in place.
const FLIGHT: &str = ".state.flight";
/// The previous state, which earlier builds kept to write the next one
/// over in place; a stray now, removed with the temporary files.
const SPARE: &str = ".state.spare";
const RUNS: &str = "runs";
/// Temporary files of atomic writes; any left under the lock are strays.
const TMP_PREFIX: &str = ".tmp-";

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

    /// The directory of `name` when it is a valid loop name.
    pub fn new_checked(root: &Root, name: &str) -> Option<LoopDir> {
        LoopName::new(name).ok().map(|n| LoopDir::new(root, n))
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
    pub fn is_link(&self) -> bool {
        self.dir
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
    }

    pub fn name(&self) -> &LoopName {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A loop exists when its state file does.
    pub fn exists(&self) -> bool {
        self.state_path().symlink_metadata().is_ok()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG)
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE)
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK)
    }

    pub fn history_path(&self) -> PathBuf {
        self.dir.join(HISTORY)
    }

    pub fn flight_path(&self) -> PathBuf {
        self.dir.join(FLIGHT)
    }

    pub fn runs_dir(&self) -> PathBuf {
        self.dir.join(RUNS)
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
    pub fn read_state(&self) -> Result<State> {
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
                Found::Missing | Found::Stale(_) => break,
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
    pub fn stray_files(&self) -> Result<Vec<PathBuf>> {
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

    fn runs_dir(&self) -> PathBuf {
        LoopDir::runs_dir(self)
    }

    fn config_path(&self) -> PathBuf {
        LoopDir::config_path(self)
    }

    fn commit_marker(&self) -> Option<PathBuf> {
        Some(self.state_path())
    }

    fn config(&self) -> Result<LoopConfig> {
        LoopDir::config(self)
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
                return Ok(history);
            }
            snap = now;
        }
    }

    fn holder(&self) -> Option<Holder> {
        lock::read_holder(&self.lock_path())
    }

    fn check(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let (found, file_state) = Finding::state(self.read_state(), ".state.loop");
        out.push(found);
        let holder = lock::recorded_holder(&self.lock_path());
        let ticking = matches!(&holder, Some((h, true)) if h.command == "tick");
        let mut state = file_state.clone();
        if let Some(s) = &file_state {
            let (found, whole) = self.check_flight(s.version, ticking);
            out.extend(found);
            if let Some(f) = whole {
                state = Some(f.state);
            }
        }
        match &holder {
            Some((h, true)) => out.push(Finding::ok("lock", format!("held by {}", h.describe()))),
            Some((h, false)) => out.push(Finding::new(
                "lock",
                Level::Note,
                format!(
                    "the lock file names pid {} on {}, which is gone; the lock is free",
                    h.pid, h.host
                ),
                "nothing: the next holder writes its own record",
            )),
            None => out.push(Finding::ok("lock", "free")),
        }
        if let Some(f) = state.as_ref().and_then(|s| s.in_flight.as_ref()) {
            out.push(Finding::in_flight(f, ticking));
        }
        if let Some(s) = &file_state {
            out.extend(self.check_history(s.version));
        }
        match self.stray_files() {
            Ok(strays) if !strays.is_empty() => out.push(
                Finding::new(
                    "temp-files",
                    Level::Warning,
                    match strays.len() {
                        1 => "a temporary file left by a writer that died".to_owned(),
                        n => format!("{n} temporary files left by writers that died"),
                    },
                    "the next command on the loop removes them; `--fix` does it now",
                )
                .fixable(),
            ),
            Ok(_) => {}
            Err(e) => out.push(Finding::new(
                "temp-files",
                Level::Error,
                e.to_string(),
                "check the directory's permissions",
            )),
        }
        out
    }

    fn lock(&self, holder: Holder, wait: Wait) -> Result<Box<dyn Session + '_>> {
        let held = lock::acquire(&self.lock_path(), self.name.as_str(), holder, wait)?;
        Ok(Box::new(FileSession {
            dir: self,
            whole: held.found_released(),
            held,
            version: None,
            pending: None,
            limits: None,
        }))
    }
}

impl LoopDir {
    /// The `in_flight` record's findings, against the state file's
    /// `version`, and the record when it is whole and of the next version.
    fn check_flight(&self, version: u64, ticking: bool) -> (Option<Finding>, Option<Flight>) {
        match flight::read(&self.flight_path(), version + 1) {
            Ok(Found::Missing) => (None, None),
            Ok(Found::Whole(f)) => (
                Some(Finding::ok(
                    "in-flight-record",
                    format!("{FLIGHT} commits version {}", f.version()),
                )),
                Some(*f),
            ),
            Ok(Found::Stale(v)) => (
                Some(Finding::ok(
                    "in-flight-record",
                    format!("{FLIGHT} is of version {v}, which the state has passed; it is ignored"),
                )),
                None,
            ),
            Ok(Found::Newer(v)) => (
                Some(Finding::new(
                    "in-flight-record",
                    Level::Warning,
                    format!("{FLIGHT} is of version {v}, ahead of the state's {version}; it is ignored"),
                    "nothing is lost: the state and history do not depend on it; the next tick writes over it",
                )),
                None,
            ),
            Ok(Found::Torn) if ticking => (
                Some(Finding::ok(
                    "in-flight-record",
                    format!("{FLIGHT} is being written by the running tick"),
                )),
                None,
            ),
            Ok(Found::Torn) => (
                Some(Finding::new(
                    "in-flight-record",
                    Level::Note,
                    format!("{FLIGHT} is torn (its writer died mid-write); it is ignored"),
                    "nothing: a torn record never counted, and the next tick writes over it",
                )),
                None,
            ),
            Err(e) => (
                Some(Finding::new(
                    "in-flight-record",
                    Level::Error,
                    e.to_string(),
                    format!("move {FLIGHT} aside: the loop cannot be used while it does not read"),
                )),
                None,
            ),
        }
    }

    /// The history's findings: an unfinished commit at its end, lines that
    /// cannot be read, rotated files an older build left with a gap.
    fn check_history(&self, version: u64) -> Vec<Finding> {
        let mut out: Vec<Finding> = rotation::check(&self.dir).into_iter().collect();
        match journal::uncommitted(&self.history_path(), version) {
            Ok(0) => {}
            Ok(n) => out.push(
                Finding::new(
                    "history",
                    Level::Warning,
                    format!("{n} bytes at the end of {HISTORY} are an unfinished commit (a writer died mid-commit); readers pass over them"),
                    "the next command on the loop cuts them; `--fix` does it now",
                )
                .fixable(),
            ),
            Err(e) => out.push(Finding::new("history", Level::Error, e.to_string(), "move the file aside")),
        }
        let read =
            rotation::open_all(&self.dir).and_then(|(files, _)| journal::read_committed(files, version));
        match read {
            Ok(h) if h.bad.is_empty() => {
                out.push(Finding::ok("history", format!("{} events", h.events.len())));
            }
            Ok(h) => {
                for b in h.bad.iter().take(5) {
                    out.push(Finding::new(
                        "history",
                        Level::Warning,
                        format!("{}:{} cannot be read: {}", b.path.display(), b.line, b.reason),
                        "readers pass over it; if it matters, mend or remove the line by hand",
                    ));
                }
            }
            Err(e) => out.push(Finding::new(
                "history",
                Level::Error,
                e.to_string(),
                "move the file aside",
            )),
        }
        out
    }
}

/// A held lock on a loop directory.
struct FileSession<'a> {
    dir: &'a LoopDir,
    held: Held,
    /// The version loaded or last committed: a commit must build on it.
    version: Option<u64>,
    /// The `in_flight` record committed on top of the state file (by this
    /// session, or by a dead one and found by `load`): the next commit
    /// appends its events with its own.
    pending: Option<Flight>,
    /// History rotation limits, read from the config on the first commit.
    limits: Option<HistoryLimits>,
    /// Nothing of an unfinished write is in the loop's files: the last
    /// holder let go saying so (on this boot), or `load` has recovered
    /// them; cleared by a commit that fails. Said on letting go unless a
    /// step is in flight.
    whole: bool,
}

impl Drop for FileSession<'_> {
    fn drop(&mut self) {
        self.held.release_whole(self.whole && self.pending.is_none());
    }
}

impl FileSession<'_> {
    /// Removes temporary files of writers that died mid-write.
    fn remove_strays(&self) -> Result<()> {
        for path in self.dir.stray_files()? {
            tracing::info!("removing {}, left by a writer that died", path.display());
            fs::remove_file(&path).map_err(Error::io("removing", &path))?;
        }
        Ok(())
    }

    fn limits(&mut self) -> HistoryLimits {
        // Those of the config the caller passed (a tick's, read before it
        // locked), else read now. A config that does not read must not stop
        // an operator's command; rotation then keeps to the defaults.
        self.limits
            .get_or_insert_with(|| self.dir.config().map(|c| c.history).unwrap_or_default())
            .clone()
    }
}

impl FileSession<'_> {
    /// Commits a state with `in_flight` set, on top of the state file, as
    /// the `in_flight` record: one write in place, synced unless the
    /// commit is relaxed. The state file is not touched; the next commit
    /// appends the record's events with its own and passes it.
    fn commit_flight(
        &mut self,
        state: &mut State,
        next_state: State,
        events: Vec<Event>,
        durability: Durability,
    ) -> Result<()> {
        let record = Flight {
            state: next_state,
            events,
        };
        let sync = durability == Durability::Full;
        if let Err(e) = flight::write(&self.dir.dir, &self.dir.flight_path(), &record, sync) {
            // The record may be whole (a failed sync): then it counts, and
            // the next session records the tick as crashed. Either way this
            // session takes no further commit.
            self.version = None;
            return Err(e);
        }
        *state = record.state.clone();
        self.version = Some(state.version);
        self.pending = Some(record);
        Ok(())
    }
}

impl Session for FileSession<'_> {
    fn holder(&self) -> &Holder {
        self.held.holder()
    }

    fn set_tick(&mut self, tick: u64) {
        self.held.set_tick(tick);
    }

    fn use_config(&mut self, config: &LoopConfig) {
        self.limits = Some(config.history.clone());
    }

    fn check_all(&mut self) {
        self.whole = false;
    }

    fn load(&mut self) -> Result<Loaded> {
        let mut state = self.dir.read_state()?;
        if let (true, Some(own)) = (self.whole, &self.pending) {
            // This session's own `in_flight` commit, on top of the state.
            state = own.state.clone();
        }
        if !self.whole {
            self.pending = None;
            // A writer may have died mid-write since the last look: what
            // it left is cut, removed or recovered now.
            let cut = journal::repair(&self.dir.history_path(), state.version)?;
            if cut > 0 {
                tracing::info!(
                    "loop {:?}: cut {cut} bytes of an unfinished commit from {}",
                    self.dir.name.as_str(),
                    self.dir.history_path().display()
                );
            }
            self.remove_strays()?;
            // A commit whose directory sync failed is in place but maybe
            // not durable: synced now, before anything builds on it.
            sync_dir(&self.dir.dir)?;
            // Under the lock nobody writes the record: torn is torn.
            if let Found::Whole(f) = flight::read(&self.dir.flight_path(), state.version + 1)? {
                state = f.state.clone();
                self.pending = Some(*f);
            }
            self.whole = true;
        }
        self.version = Some(state.version);
        let recovered = state.in_flight.take();
        if let Some(dead) = &recovered {
            tracing::warn!(
                "loop {:?}: tick {} (pid {} on {}) died mid-way; recorded as crashed",
                self.dir.name.as_str(),
                dead.tick,
                dead.pid,
                dead.host
            );
            let event = super::record_crash(&mut state, dead);
            self.commit(&mut state, vec![event], Durability::Full)?;
        }
        Ok(Loaded { state, recovered })
    }

    fn commit(&mut self, state: &mut State, events: Vec<EventKind>, durability: Durability) -> Result<()> {
        let committed = self.commit_files(state, events, durability);
        if committed.is_err() {
            // Whatever it left is for the next holder to look at.
            self.whole = false;
        }
        committed
    }

    fn mend(&mut self) -> Result<()> {
        if rotation::list(&self.dir.dir)?.gaps().is_empty() {
            return Ok(());
        }
        let n = rotation::renumber_old(&self.dir.dir)?;
        tracing::info!(
            "loop {:?}: renamed {n} rotated history files to close a gap an older build left",
            self.dir.name.as_str()
        );
        Ok(())
    }

    fn forget(mut self: Box<Self>) -> Result<()> {
        self.whole = false;
        self.forget_files()
    }

    fn remove(self: Box<Self>) -> Result<()> {
        self.remove_dir()
    }
}

impl FileSession<'_> {
    fn commit_files(
        &mut self,
        state: &mut State,
        events: Vec<EventKind>,
        durability: Durability,
    ) -> Result<()> {
        if self.version != Some(state.version) {
            return Err(Error::Conflict {
                name: self.dir.name.to_string(),
                expected: self.version,
                found: state.version,
            });
        }
        let now = crate::clock::now();
        let next = state.version + 1;
        let events = super::stamp(events, next, now);
        let mut next_state = state.clone();
        next_state.version = next;
        next_state.updated_at = now;
        if next_state.in_flight.is_some() && self.pending.is_none() {
            return self.commit_flight(state, next_state, events, durability);
        }
        // The state file's version: what an unfinished commit is cut to.
        let base = self.pending.as_ref().map_or(state.version, |p| p.version() - 1);
        let mut lines: Vec<u8> = Vec::new();
        if let Some(p) = &self.pending {
            lines.extend(p.events.iter().flat_map(Event::to_line));
        }
        lines.extend(events.iter().flat_map(Event::to_line));
        if !lines.is_empty() {
            let limits = self.limits();
            if journal::append(&self.dir.dir, &lines, &limits)? {
                tracing::info!("loop {:?}: history rotated", self.dir.name.as_str());
            }
        }
        let written = write_atomic(
            &self.dir.dir,
            &self.dir.state_path(),
            &state_bytes(&next_state),
            durability,
        );
        match written {
            Written::Durable => {}
            Written::Not(e) => {
                // Not committed: its events must not count as the next
                // commit's. Cut them now if possible (the next session does
                // otherwise), and take no further commit in this session.
                self.version = None;
                let _ = journal::repair(&self.dir.history_path(), base);
                return Err(e);
            }
            Written::Unsynced(e) => {
                // Committed: the state is in place and its events are the
                // record. Nothing is cut; the next holder syncs the
                // directory again. This session takes no further commit.
                *state = next_state;
                self.version = None;
                self.pending = None;
                return Err(Error::NotDurable {
                    name: self.dir.name.to_string(),
                    version: next,
                    source: Box::new(e),
                });
            }
        }
        *state = next_state;
        self.version = Some(next);
        self.pending = None;
        Ok(())
    }

    fn forget_files(&self) -> Result<()> {
        let dir = self.dir;
        // The state first: without it the loop no longer exists here.
        let mut files = vec![dir.state_path(), dir.flight_path(), dir.dir.join(SPARE)];
        files.extend(rotation::list(&dir.dir)?.paths(&dir.dir));
        files.push(dir.config_path());
        for path in files {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io("removing", &path)(e));
                }
                _ => {}
            }
        }
        sync_dir(&dir.dir)
    }

    fn remove_dir(self: Box<Self>) -> Result<()> {
        let dir = self.dir;
        let parent = dir.path().parent().unwrap_or(Path::new("."));
        let loops = fsx::Dir::open(parent).map_err(fsx::io_error("opening", parent))?;
        // The directory was opened as a directory, not a link; checked again
        // here, under the lock, so that nothing it might point to is touched.
        if dir.is_link() {
            return Err(Error::Link {
                path: dir.path().to_owned(),
            });
        }
        let aside = format!(".removed-{}-{}", dir.name(), std::process::id());
        // Moved aside under the lock, so a waiter that then takes the (now
        // orphaned) lock finds no loop rather than half of one.
        fs::rename(dir.path(), loops.join(&aside)).map_err(Error::io("moving aside", dir.path()))?;
        sync_dir(parent)?;
        drop(self);
        // Through descriptors, from the loops directory down: a link inside
        // (a `runs/` pointing elsewhere, say) is unlinked, not followed.
        loops.remove_tree(&aside).map_err(loops.error("removing", &aside))
    }
}

fn state_bytes(state: &State) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(state).expect("state serialises");
    bytes.push(b'\n');
    bytes
}

/// Parses state text, checking the schema before the shape. A state of this
/// build's schema is parsed once; anything else is parsed again to say
/// what is wrong with it.
pub fn parse_state(text: &[u8], path: &Path) -> Result<State> {
    match serde_json::from_slice::<State>(text) {
        Ok(state) if state.schema == SCHEMA => Ok(state),
        _ => state_error(text, path),
    }
}

/// Why `text` is not a state of this build's schema: the schema first, then
/// the shape.
fn state_error(text: &[u8], path: &Path) -> Result<State> {
    #[derive(Deserialize)]
    struct Probe {
        schema: Option<serde_json::Value>,
    }
    let corrupt = |reason: String| Error::CorruptState {
        path: path.to_owned(),
        reason,
    };
    let probe: Probe = serde_json::from_slice(text).map_err(|e| corrupt(format!("not valid JSON ({e})")))?;
    match probe.schema {
        None => return Err(corrupt("it has no `schema` number".into())),
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(SCHEMA)) => {}
        Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => {
            return Err(Error::UnknownSchema {
                path: path.to_owned(),
                found: n.as_u64().unwrap_or_default(),
                expected: SCHEMA,
            });
        }
        Some(other) => return Err(corrupt(format!("`schema` is {other}, not a number"))),
    }
    serde_json::from_slice(text).map_err(|e| corrupt(e.to_string()))
}

/// The committed state as readers see it, and where it came from.
struct Snapshot {
    state: State,
    /// The state file's version: history lines up to it are committed.
    base: u64,
    /// The events of the `in_flight` record the state came from, if it did.
    events: Vec<Event>,
}

/// Replaces `path` (in `dir`) with `bytes` atomically and durably, as the
/// state is written; for the root's other small files (schedule records).
pub fn write_file(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    match write_atomic(dir, path, bytes, Durability::Full) {
        Written::Durable => Ok(()),
        Written::Unsynced(e) | Written::Not(e) => Err(e),
    }
}

/// Replaces `path` with `bytes` so that a reader sees the old file or the
/// new one, never a torn one: a temporary file in `dir`, synced, renamed
/// over `path`, then (for a full commit) the directory synced. The rename
/// is the commit point: an error before it is [`Written::Not`] (nothing
/// changed), a failed directory sync after it is [`Written::Unsynced`].
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8], durability: Durability) -> Written {
    let renamed = tempfile::Builder::new()
        .prefix(TMP_PREFIX)
        .tempfile_in(dir)
        .map_err(Error::io("creating a temporary file in", dir))
        .and_then(|mut tmp| {
            tmp.write_all(bytes)
                .and_then(|()| tmp.as_file().sync_data())
                .map_err(Error::io("writing", tmp.path().to_owned()))?;
            tmp.persist(path)
                .map_err(|e| Error::io("replacing", path)(e.error))
        });
    if let Err(e) = renamed {
        return Written::Not(e);
    }
    match durability {
        Durability::Full => match sync_dir(dir) {
            Ok(()) => Written::Durable,
            Err(e) => Written::Unsynced(e),
        },
        Durability::Relaxed => Written::Durable,
    }
}

/// How far an atomic replacement got.
enum Written {
    /// In place, and durable as asked.
    Durable,
    /// In place (readers see it), but the directory sync that makes it
    /// survive a power loss failed.
    Unsynced(Error),
    /// Not in place: the old file stands.
    Not(Error),
}

pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("syncing directory", dir))
}

/// Creates directories (mode 0700) down to `path`.
pub fn create_dirs(path: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(Error::io("creating directory", path))
}

/// Makes the root's directories.
pub fn init_root(root: &Root) -> Result<bool> {
    let fresh = !root.loops_dir().is_dir();
    create_dirs(&root.loops_dir())?;
    create_dirs(&root.cache_dir())?;
    Ok(fresh)
}

/// Builds a new loop in a temporary directory beside the others and renames
/// it into place; fails if the loop exists. No lock file is made. `events`
/// are the loop's first history, committed with `state`.
pub fn create_loop(
    root: &Root,
    name: &LoopName,
    config_text: &str,
    state: &State,
    events: Vec<EventKind>,
) -> Result<LoopDir> {
    let target = LoopDir::new(root, name.clone());
    let exists = || Error::LoopExists {
        name: name.to_string(),
        root: root.path().to_owned(),
    };
    if target.path().symlink_metadata().is_ok() {
        return Err(exists());
    }
    let loops = root.loops_dir();
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".new-{name}-"))
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(&loops)
        .map_err(Error::io("creating a temporary directory in", &loops))?;
    let write = |file: &str, bytes: &[u8]| -> Result<()> {
        let path = tmp.path().join(file);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(Error::io("creating", &path))?;
        f.write_all(bytes)
            .and_then(|()| f.sync_data())
            .map_err(Error::io("writing", &path))
    };
    let history: Vec<u8> = super::stamp(events, state.version, state.updated_at)
        .iter()
        .flat_map(Event::to_line)
        .collect();
    write(CONFIG, config_text.as_bytes())?;
    write(HISTORY, &history)?;
    write(STATE, &state_bytes(state))?;
    sync_dir(tmp.path())?;
    match crate::fsx::rename_noreplace(tmp.path(), target.path()) {
        Ok(()) => {
            // The directory now lives at its final name; nothing to clean up.
            let _ = tmp.keep();
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists()),
        Err(e) => return Err(Error::io("renaming into place", target.path())(e)),
    }
    sync_dir(&loops)?;
    Ok(target)
}

/// Writes a loop moved here from another store into `<root>/loops/<name>/`,
/// which may hold the loop's files already (step output, gate files): its
/// loop.toml and history as given (each event keeps its version), then its
/// state, the commit point. Fails if the loop exists here.
pub fn adopt_loop(
    root: &Root,
    name: &LoopName,
    config_text: &str,
    state: &State,
    events: &[Event],
) -> Result<LoopDir> {
    let target = LoopDir::new(root, name.clone());
    if target.exists() {
        return Err(Error::LoopExists {
            name: name.to_string(),
            root: root.path().to_owned(),
        });
    }
    create_dirs(target.path())?;
    // An `in_flight` record left from the loop's earlier life here would
    // be read against the new state: it goes before the state exists.
    match fs::remove_file(target.flight_path()) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("removing", target.flight_path())(e));
        }
        _ => {}
    }
    let history: Vec<u8> = events.iter().flat_map(Event::to_line).collect();
    write_file(target.path(), &target.config_path(), config_text.as_bytes())?;
    write_file(target.path(), &target.history_path(), &history)?;
    write_file(target.path(), &target.state_path(), &state_bytes(state))?;
    Ok(target)
}

/// The loops under `root`, sorted by name. Entries that are not loops
/// (temporary directories, stray files) are passed over.
pub fn list_loops(root: &Root) -> Result<Vec<LoopDir>> {
    let loops = root.loops_dir();
    let mut out = Vec::new();
    for entry in fs::read_dir(&loops).map_err(Error::io("listing", &loops))? {
        let entry = entry.map_err(Error::io("listing", &loops))?;
        let Some(name) = entry.file_name().to_str().and_then(|n| LoopName::new(n).ok()) else {
            continue;
        };
        let dir = LoopDir::new(root, name);
        // A link in place of a loop directory is no loop (`doctor` says so).
        if !dir.is_link() && dir.exists() {
            out.push(dir);
        }
    }
    out.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_checked_before_shape() {
        let p = Path::new("s");
        assert!(matches!(
            parse_state(b"{\"schema\": 2}", p),
            Err(Error::UnknownSchema { found: 2, .. })
        ));
        assert!(matches!(
            parse_state(b"{\"schema\": 1}", p),
            Err(Error::CorruptState { .. })
        ));
        assert!(matches!(
            parse_state(b"{\"sche", p),
            Err(Error::CorruptState { .. })
        ));
        assert!(matches!(parse_state(b"[]", p), Err(Error::CorruptState { .. })));
        assert!(matches!(parse_state(b"{}", p), Err(Error::CorruptState { .. })));
        let good = state_bytes(&State::new(crate::clock::now()));
        assert!(parse_state(&good, p).is_ok());
    }
}
