//! A refusal: what the one refused is told, and what is kept of it.
//!
//! Someone who may not even view the loop is refused with nothing
//! written: the refusal is logged (stderr, a server's log), never
//! recorded; nor are they told who holds the role. Someone who may view
//! it is told who may, and the refusal is recorded: a `refused` event,
//! kept apart from the loop's history ([`LoopStore::record_refusal`]: no
//! commit, no lock, a bounded record of its own that history's readers
//! merge in), so no flood of refusals holds a tick back or rotates the
//! `created` event and the operators' records out of the history. Where
//! the front-end keeps a [`Refusals`] (a server), at most one a minute per
//! person and loop is recorded; the refusals in between are counted, in
//! the log and in the next one recorded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Ctx;
use crate::access::{self, Access, Action, Denied, Record};
use crate::error::{Error, Result};
use crate::history::{Event, EventKind};
use crate::store::LoopStore;
use crate::who::Actor;

/// At most one refusal recorded per person and loop in this long.
pub(crate) const RECORD_EVERY: Duration = Duration::from_mins(1);

/// The (person, loop) pairs kept at most: past it, those whose minute is
/// over are forgotten.
const KEPT: usize = 10_000;

/// The refusals a long-lived front-end (a server) recorded lately, per
/// person and loop: what keeps their records to one a minute.
#[derive(Default)]
pub(crate) struct Refusals {
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
/// context keeps [`Refusals`]).
pub(crate) fn require(ctx: &Ctx<'_>, store: &dyn LoopStore, action: Action, rules: &Access) -> Result<()> {
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
        (true, Some(Admit::Record(unrecorded))) => kept(store, actor, &denied, unrecorded),
        (true, None) => kept(store, actor, &denied, 0),
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

/// Records the refusal apart from the history, at once.
fn kept(store: &dyn LoopStore, actor: &Actor, denied: &Denied, unrecorded: u32) -> Record {
    match record(store, actor, denied, unrecorded) {
        Ok(()) => Record::Kept,
        Err(e) => Record::Failed(e.to_string()),
    }
}

/// The `refused` event, stamped with the state version it saw (the
/// events of that version come before it in the history).
fn record(store: &dyn LoopStore, actor: &Actor, denied: &Denied, unrecorded: u32) -> Result<()> {
    let version = store.load()?.version;
    let kind = EventKind::Refused {
        by: actor.user.clone(),
        action: denied.action,
        role: denied.role,
        holders: denied.holders.clone(),
        unrecorded,
    };
    store.record_refusal(&Event::stamped(kind, version, crate::clock::now(), actor))
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
