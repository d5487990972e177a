//! A held lock on one PostgreSQL loop: the session that loads, commits and
//! lets go of it, its lease renewed until it ends.

use std::path::Path;

use super::client::{Client, PgError};

use super::{PgLoop, STATE_ONLY, commit, lease, notify, state_text};
use crate::error::{Error, Result};
use crate::history::EventKind;
use crate::lock::{self, Holder};
use crate::state::State;
use crate::store::{Durability, Loaded, Next, Session, recover};
use crate::who::Actor;

/// A held lock on one loop: its advisory lock on a connection of its own,
/// and its lease, renewed until the session ends.
pub(super) struct PgSession<'a> {
    pub(super) lp: &'a PgLoop,
    /// Taken back on drop.
    pub(super) client: Option<Client>,
    pub(super) key: i64,
    /// Whether this connection holds the advisory lock `key`: a lease run
    /// out or let go is taken without it, and what was not taken is not
    /// unlocked (the server would warn "you don't own a lock").
    pub(super) advisory: bool,
    pub(super) holder: Holder,
    /// The version loaded or last committed: a commit must build on it.
    pub(super) version: Option<u64>,
    /// The lock's lease: its fence goes with every commit.
    pub(super) lease: lease::Lease,
    /// A tick [`Session::set_tick`] named that the holder record does not
    /// say yet: the next commit writes it.
    pub(super) tick_unsaid: Option<u64>,
}

impl PgSession<'_> {
    fn client(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("a session has its connection until dropped")
    }

    /// Records the holder; false (nothing written) when the loop is gone.
    pub(super) fn write_holder(&mut self) -> Result<bool> {
        let h = self.holder.clone();
        let (name, key) = (self.lp.name.as_str().to_owned(), self.key);
        self.client()
            .execute(
                "INSERT INTO holders (loop, pid, host, command, tick, since, backend_pid, lock_key)
                 SELECT $1, $2, $3, $4, $5, $6::text::timestamptz, pg_backend_pid(), $7
                 WHERE EXISTS (SELECT 1 FROM loops WHERE name = $1)
                 ON CONFLICT (loop) DO UPDATE SET pid = $2, host = $3, command = $4, tick = $5,
                     since = $6::text::timestamptz, backend_pid = pg_backend_pid(), lock_key = $7",
                &[
                    &name,
                    &i64::from(h.pid),
                    &h.host,
                    &h.command,
                    &h.tick.map(|t| t as i64),
                    &h.since.to_string(),
                    &key,
                ],
            )
            .map(|n| n == 1)
            .map_err(self.lp.db.fail(self.lp.n(), "cannot record the lock holder"))
    }
}

impl PgSession<'_> {
    /// Deletes the loop's rows in one transaction, under the lock's fence.
    fn delete_rows(&mut self, name: &str) -> Result<()> {
        self.refuse_if_lost()?;
        let fence = self.lease.fence();
        let deleted = (|| -> Result<bool, PgError> {
            let mut tx = self.client().transaction()?;
            if !lease::fenced(&mut tx, name, fence)? {
                return Ok(false);
            }
            tx.execute("DELETE FROM events WHERE loop = $1", &[&name])?;
            tx.execute("DELETE FROM loops WHERE name = $1", &[&name])?;
            notify(&mut tx, name)?;
            tx.commit()?;
            Ok(true)
        })()
        .map_err(self.lp.db.fail_write(
            self.lp.n(),
            "cannot remove the loop's record",
            "the loop's removal",
            "automaton list",
        ))?;
        if !deleted {
            return Err(self.lost_error(None));
        }
        Ok(())
    }

    /// Lets the lease and the advisory lock go.
    fn release(&mut self) -> Result<(), PgError> {
        let (name, fence) = (self.lp.name.as_str(), self.lease.fence());
        let key = self.advisory.then_some(self.key);
        commit::release(self.client(), name, fence, key)
    }

    /// Refuses, writing nothing, once the lease is known lost.
    /// Sends commit `c`; the answer, and the error of a first attempt
    /// whose answer was lost. Whether that attempt committed is unknown.
    /// A connection that broke (a backend terminated, a server restart) is
    /// made again, once, and the commit tried on it: the version check
    /// makes that safe, and settles the doubt, as a state already at the
    /// next version under this holder's fence can only be its own commit.
    /// A server that did not answer is not asked again: the command's
    /// bound is spent.
    fn send(&mut self, c: &commit::Commit<'_>) -> (Result<commit::Committed, PgError>, Option<PgError>) {
        let result = commit::run(self.client(), c);
        if !result
            .as_ref()
            .is_err_and(|e| e.outcome_unknown() && !e.timed_out())
            || self.reconnect().is_err()
        {
            return (result, None);
        }
        let lost_answer = result.err().filter(PgError::outcome_unknown);
        let retried = commit::run(self.client(), c).map(|r| match r {
            commit::Committed::Conflict(Some(v)) if v == c.next => commit::Committed::Done,
            r => r,
        });
        (retried, lost_answer)
    }

    fn refuse_if_lost(&self) -> Result<()> {
        match self.lease.lost() {
            Some(why) => Err(self.lost_error(Some(why))),
            None => Ok(()),
        }
    }

    fn lost_error(&self, why: Option<String>) -> Error {
        Error::LockLost {
            name: self.lp.name.to_string(),
            reason: why.unwrap_or_else(|| "its lease ran out or was taken over, the server says".to_owned()),
        }
    }

    /// A new connection in place of one that broke (a backend terminated,
    /// the server restarted): the lease, not the connection, holds the
    /// lock, and the fence keeps whatever is done on it safe.
    fn reconnect(&mut self) -> Result<()> {
        let mut client = self.lp.db.connect(self.lp.n())?;
        // Best effort: the advisory lock only keeps waiters from asking
        // for the lease.
        self.advisory = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&self.key])
            .is_ok_and(|row| row.get(0));
        self.client = Some(client);
        Ok(())
    }
}

impl Drop for PgSession<'_> {
    fn drop(&mut self) {
        self.lease.stop();
        // A lease known lost is not this session's to let go, and its
        // server may not answer (a cut network): closing the connection
        // waits on nothing the server does.
        if self.lease.lost().is_some() {
            drop(self.client.take());
            return;
        }
        let mut released = self.release();
        // A connection that broke while idle is made again once, so the
        // next holder need not wait for the lease to run out; not one
        // given up because the server did not answer: a new one would
        // wait as long.
        if released.is_err()
            && self
                .client
                .as_ref()
                .is_some_and(|c| c.is_closed() && !c.is_abandoned())
            && self.reconnect().is_ok()
        {
            released = self.release();
        }
        // A connection that could not say it let go is closed: the server
        // then releases the advisory lock itself, and the lease runs out.
        if released.is_ok()
            && let Some(client) = self.client.take()
        {
            self.lp.db.put_back(client);
        }
    }
}

impl Session for PgSession<'_> {
    fn holder(&self) -> &Holder {
        &self.holder
    }

    fn lock_watch(&self) -> Option<lock::LockWatch> {
        Some(self.lease.watch())
    }

    /// The holder record names the tick from the session's next commit
    /// on (the tick's `in_flight` mark), which saves a round trip: the
    /// record only informs waiters; the lock is what counts.
    fn set_tick(&mut self, tick: u64) {
        self.holder.tick = Some(tick);
        self.tick_unsaid = Some(tick);
    }

    fn load(&mut self, by: &Actor) -> Result<Loaded> {
        let lp = self.lp;
        let text = lp
            .read(self.client())
            .map_err(lp.db.fail(lp.n(), "cannot read the state"))?;
        let mut state = lp.parse(text)?;
        self.version = Some(state.version);
        let recovered = recover(self, &lp.name, &mut state, by)?;
        Ok(Loaded { state, recovered })
    }

    /// Every commit is synchronous, `Durability::Relaxed` included: an
    /// asynchronous commit is lost when the server restarts, not only on a
    /// power loss, and a lost `in_flight` marker would let a tick whose
    /// step ran go unrecorded and its run number be used again.
    fn commit(
        &mut self,
        by: &Actor,
        state: &mut State,
        events: Vec<EventKind>,
        _durability: Durability,
    ) -> Result<()> {
        let lp = self.lp;
        let Next {
            state: next_state,
            events,
        } = Next::of(&lp.name, self.version, state, events, by)?;
        let next = next_state.version;
        self.refuse_if_lost()?;
        let name = lp.name.as_str();
        let text = state_text(&next_state);
        // A tick's commits tell no one: the daemons need to hear of what
        // operators commit (an approval, a pause), not of each other's ticks.
        let payload = match self.holder.command.as_str() {
            "tick" => String::new(),
            _ => format!("{name}{STATE_ONLY}"),
        };
        // Under the lock's fence: a holder whose lease ran out or was taken
        // over commits nothing, whatever its connection.
        let c = commit::Commit {
            name,
            fence: self.lease.fence(),
            state: &text,
            next,
            old: state.version,
            events: &events,
            payload: &payload,
            tick: self.tick_unsaid.take(),
        };
        let (result, lost_answer) = self.send(&c);
        let maybe = |e: PgError| Error::MaybeMade {
            name: Some(name.to_owned()),
            url: lp.db.url.clone(),
            what: format!("version {next} of the loop's state"),
            check: format!("automaton status {name}"),
            source: Box::new(e),
        };
        match result {
            // The first attempt may have committed before the lease was lost.
            Ok(commit::Committed::Lost) if let Some(e) = lost_answer => {
                self.version = None;
                self.lease.watch().lose();
                Err(maybe(e))
            }
            Ok(commit::Committed::Lost) => {
                self.version = None;
                self.lease.watch().lose();
                Err(self.lost_error(None))
            }
            Ok(commit::Committed::Conflict(_)) => {
                self.version = None;
                Err(Error::Conflict {
                    name: name.to_owned(),
                    expected: None,
                    found: state.version,
                })
            }
            Ok(commit::Committed::Done) => {
                *state = next_state;
                self.version = Some(next);
                Ok(())
            }
            Err(e) => {
                // No further commit in this session: the version it would
                // build on is not known.
                self.version = None;
                if let Some(first) = lost_answer {
                    return Err(maybe(first));
                }
                if e.outcome_unknown() {
                    return Err(maybe(e));
                }
                Err(lp.db.fail(lp.n(), "cannot commit")(e))
            }
        }
    }

    fn forget(mut self: Box<Self>) -> Result<()> {
        let lp = self.lp;
        let name = lp.name.as_str().to_owned();
        self.delete_rows(&name)
    }

    fn remove(mut self: Box<Self>) -> Result<()> {
        let lp = self.lp;
        let name = lp.name.as_str().to_owned();
        // This host's files of the loop are removed after its rows: a
        // directory that is a link is refused first, with nothing removed.
        let parent = lp.base.parent().unwrap_or(Path::new("."));
        let loops = match crate::fsx::Dir::open(parent) {
            Ok(loops) => Some(loops),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(crate::fsx::io_error("opening", parent)(e)),
        };
        if lp
            .base
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(Error::Link {
                path: lp.base.clone(),
            });
        }
        self.delete_rows(&name)?;
        drop(self);
        // Other hosts keep theirs. Through descriptors: a link inside is
        // unlinked, not followed.
        let Some(loops) = loops else {
            return Ok(());
        };
        loops
            .remove_tree(name.as_str())
            .map_err(loops.error("removing", &name))
    }
}
