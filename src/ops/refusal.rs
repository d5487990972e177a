//! A refusal: what the one refused is told, and what is kept of it.
//!
//! Someone who may not even view the loop is refused with nothing
//! written: the refusal is logged (stderr, a server's log), never
//! committed, and the loop's lock is never asked for, so no flood of them
//! holds a tick back or fills the loop's history; nor are they told who
//! holds the role. Someone who may view it is told who may, and the
//! refusal is recorded (a `refused` event, in a commit of its own under
//! the lock, waited for a moment at most), at most once a minute per
//! person and loop where the front-end keeps a [`Refusals`] (a server);
//! the refusals in between are counted, in the log and in the next one
//! recorded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Ctx;
use crate::access::{self, Access, Action, Denied, Record};
use crate::error::{Error, Result};
use crate::history::EventKind;
use crate::lock::{Holder, Wait};
use crate::store::{Durability, LoopStore};

/// How long a refusal waits for the loop's lock to be recorded when its
/// front-end sets no bound of its own (`--timeout`): a tick that holds the
/// lock for half an hour does not hold the refusal back with it.
pub const REFUSAL_WAIT: Duration = Duration::from_secs(2);

/// At most one refusal recorded per person and loop in this long.
pub const RECORD_EVERY: Duration = Duration::from_secs(60);

/// The (person, loop) pairs kept at most: past it, those whose minute is
/// over are forgotten.
const KEPT: usize = 10_000;

/// The wait for a refusal's record: the front-end's own bound (its
/// `--timeout` or `--no-wait`), else [`REFUSAL_WAIT`].
pub fn record_wait(bound: Wait) -> Wait {
    match bound {
        Wait::Forever => Wait::For(REFUSAL_WAIT),
        bounded => bounded,
    }
}

/// The refusals a long-lived front-end (a server) recorded lately, per
/// person and loop: what keeps their records to one a minute.
#[derive(Default)]
pub struct Refusals {
    seen: Mutex<HashMap<(String, String), Seen>>,
}

/// A person's refusals on one loop.
struct Seen {
    /// When the last one was recorded.
    recorded: Instant,
    /// How many were not, since.
    counted: u32,
}

/// What becomes of a refusal under the limit.
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    /// Recorded, with the number not recorded before it.
    Record(u32),
    /// Counted, not recorded: the number so far.
    Count(u32),
}

impl Refusals {
    /// Whether the refusal of `user` on loop `name` at `now` is recorded.
    fn admit(&self, user: &str, name: &str, now: Instant) -> Admit {
        let Ok(mut seen) = self.seen.lock() else {
            return Admit::Record(0);
        };
        if seen.len() >= KEPT {
            seen.retain(|_, s| now.duration_since(s.recorded) < RECORD_EVERY);
        }
        let key = (user.to_owned(), name.to_owned());
        match seen.get_mut(&key) {
            Some(s) if now.duration_since(s.recorded) < RECORD_EVERY => {
                s.counted += 1;
                Admit::Count(s.counted)
            }
            found => {
                let before = found.map_or(0, |s| s.counted);
                seen.insert(
                    key,
                    Seen {
                        recorded: now,
                        counted: 0,
                    },
                );
                Admit::Record(before)
            }
        }
    }
}

/// The one role check before a change: the context's actor must hold the
/// role `action` needs under `rules`. A refusal is returned as
/// [`Error::NotAllowed`], kept as the module says (one a minute where the
/// context keeps [`Refusals`]); `bound` is the front-end's own bound on
/// waiting for the lock (`Wait::Forever` when it sets none), which a
/// record waits for at most ([`record_wait`]).
pub(crate) fn require(
    ctx: &Ctx<'_>,
    store: &dyn LoopStore,
    action: Action,
    rules: &Access,
    bound: Wait,
) -> Result<()> {
    let actor = &ctx.actor;
    let Err(denied) = access::check(actor, action, rules) else {
        return Ok(());
    };
    let name = store.name().as_str();
    let viewer = access::check(actor, Action::View, rules).is_ok();
    let record = match (
        viewer,
        ctx.refusals.map(|l| l.admit(&actor.user, name, Instant::now())),
    ) {
        (false, _) => {
            tracing::warn!(
                "loop {name:?}: refused {} `{}`: they may not view the loop; logged, not recorded",
                actor.describe(),
                action.command()
            );
            Record::Unasked
        }
        (true, Some(Admit::Count(n))) => {
            tracing::warn!(
                "loop {name:?}: {n} refusals of {} not recorded since the last one (one a minute is)",
                actor.describe()
            );
            Record::Counted
        }
        (true, Some(Admit::Record(unrecorded))) => kept(ctx, store, &denied, unrecorded, bound),
        (true, None) => kept(ctx, store, &denied, 0, bound),
    };
    Err(Error::NotAllowed {
        name: name.to_owned(),
        command: action.command(),
        user: actor.user.clone(),
        role: denied.role.as_str(),
        holders: viewer.then_some(denied.holders),
        record: Box::new(record),
    })
}

/// Records the refusal under the loop's lock, if it comes in time.
fn kept(ctx: &Ctx<'_>, store: &dyn LoopStore, denied: &Denied, unrecorded: u32, bound: Wait) -> Record {
    match record(ctx, store, denied, unrecorded, record_wait(bound)) {
        Ok(()) => Record::Kept,
        Err(Error::LockNotObtained { holder, .. }) => Record::Busy(holder),
        Err(e) => Record::Failed(e.to_string()),
    }
}

/// The refusal's commit, as the refused actor's; a dead tick found on the
/// way is recorded as this process's own finding.
fn record(ctx: &Ctx<'_>, store: &dyn LoopStore, denied: &Denied, unrecorded: u32, wait: Wait) -> Result<()> {
    let actor = &ctx.actor;
    let mut session = store.lock(Holder::me("refused"), wait)?;
    let mut state = session.load(ctx.stores.me())?.state;
    let event = EventKind::Refused {
        by: actor.user.clone(),
        action: denied.action,
        role: denied.role,
        holders: denied.holders.clone(),
        unrecorded,
    };
    session.commit(actor, &mut state, vec![event], Durability::Full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_refusal_a_minute_is_recorded_per_person_and_loop_and_the_rest_counted() {
        let limit = Refusals::default();
        let t0 = Instant::now();
        assert_eq!(limit.admit("ann", "a", t0), Admit::Record(0));
        assert_eq!(
            limit.admit("ann", "a", t0 + Duration::from_secs(1)),
            Admit::Count(1)
        );
        assert_eq!(
            limit.admit("ann", "a", t0 + Duration::from_secs(59)),
            Admit::Count(2)
        );
        assert_eq!(limit.admit("bob", "a", t0), Admit::Record(0));
        assert_eq!(limit.admit("ann", "b", t0), Admit::Record(0));
        assert_eq!(limit.admit("ann", "a", t0 + RECORD_EVERY), Admit::Record(2));
        assert_eq!(limit.admit("ann", "a", t0 + RECORD_EVERY), Admit::Count(1));
    }
}
