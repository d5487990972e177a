//! A held lock on a loop directory: recovery of what a dead holder left, and
//! the commit.

use std::fs;
use std::path::Path;

use super::flight::{self, Flight, Found};
use super::state_file::state_bytes;
use super::{LoopDir, REMOVED_PREFIX, SPARE, approved, journal, rotation};
use crate::config::{HistoryLimits, LoopConfig};
use crate::error::{Error, Result};
use crate::fsx::{self, Written, sync_dir};
use crate::history::{Event, EventKind};
use crate::lock::{Held, Holder};
use crate::state::State;
use crate::store::{Durability, Loaded, Next, Session};
use crate::who::Actor;

/// A held lock on a loop directory.
pub(super) struct FileSession<'a> {
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

impl<'a> FileSession<'a> {
    /// The session of `held`, the lock of `dir`.
    pub(super) fn new(dir: &'a LoopDir, held: Held) -> FileSession<'a> {
        FileSession {
            dir,
            whole: held.found_released(),
            held,
            version: None,
            pending: None,
            limits: None,
        }
    }
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

    fn load(&mut self, by: &Actor) -> Result<Loaded> {
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
        let dir = self.dir;
        let recovered = crate::store::recover(self, &dir.name, &mut state, by)?;
        Ok(Loaded { state, recovered })
    }

    fn commit(
        &mut self,
        by: &Actor,
        state: &mut State,
        events: Vec<EventKind>,
        durability: Durability,
    ) -> Result<()> {
        let approval = events.iter().any(|e| matches!(e, EventKind::Approved { .. }));
        let committed = self.commit_files(by, state, events, durability);
        match &committed {
            // Whatever it left is for the next holder to look at.
            Err(_) => self.whole = false,
            // A daemon serving the root hears of it and starts the tick it
            // releases at once, as a store's notification would tell.
            Ok(()) if approval => approved::say_of(self.dir, state.version),
            Ok(()) => {}
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
        by: &Actor,
        state: &mut State,
        events: Vec<EventKind>,
        durability: Durability,
    ) -> Result<()> {
        let Next {
            state: next_state,
            events,
        } = Next::of(&self.dir.name, self.version, state, events, by)?;
        let next = next_state.version;
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
        let written = fsx::replace(
            &self.dir.dir,
            &self.dir.state_path(),
            &state_bytes(&next_state),
            durability == Durability::Full,
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
        let aside = format!("{REMOVED_PREFIX}{}-{}", dir.name(), std::process::id());
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
