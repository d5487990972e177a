//! The core of automaton's verbs and views, shared by every front-end.
//!
//! The CLI, the console and the daemon each parse their own input, build a
//! request, and call an operation here with a [`Ctx`]: the root, the store
//! already open, and the person acting, passed in explicitly. The role
//! check, the record of a refusal, the commit and the follow-ups happen
//! here, once; a front-end renders the typed outcome or view it gets back.
//!
//! A verb is given an [`Answer`]: how its front-end answers the outcome
//! (print it, or nothing, for a server that answers with the returned
//! outcome). It is called once the change is committed and before the
//! follow-ups, so a slow notify command or webhook never holds the answer
//! back.

pub(crate) mod allow_rollback;
pub(crate) mod approve;
pub(crate) mod cancel;
pub(crate) mod check;
pub(crate) mod pause;
pub(crate) mod promote;
pub(crate) mod refusal;
pub(crate) mod reject;
pub(crate) mod resume;
pub(crate) mod rm;
pub(crate) mod tick;
pub(crate) mod views;

use serde::{Serialize, Serializer};

use crate::access::{Access, Action};
use crate::error::{Error, Result};
use crate::history::EventKind;
use crate::lock::{Holder, Wait};
use crate::notify::{Notice, Operation};
use crate::root::Root;
use crate::state::{Refusal, State};
use crate::store::{Durability, LoopStore, Stores};
use crate::tick::after::{self, Change};
use crate::who::Actor;
use refusal::Refusals;

/// What every operation is given: where, on which store, and for whom.
pub(crate) struct Ctx<'a> {
    /// The root the loops live in.
    pub root: &'a Root,
    /// The root's store, opened once by the front-end.
    pub stores: &'a Stores,
    /// The person the operation acts for: its role checks and the records
    /// of its changes name them.
    pub actor: Actor,
    /// The refusals a long-lived front-end recorded lately (a server's):
    /// one a minute per person and loop is recorded. None: each is.
    pub refusals: Option<&'a Refusals>,
}

/// How a front-end answers a verb's outcome, before its follow-ups run.
pub(crate) type Answer<'r, T> = &'r mut dyn FnMut(&T) -> Result<()>;

impl<'a> Ctx<'a> {
    /// A context acting for `actor` on `stores`. The records name the
    /// store's database role beside a server's user, as beside the CLI's.
    pub(crate) fn new(root: &'a Root, stores: &'a Stores, mut actor: Actor) -> Ctx<'a> {
        if actor.db_role.is_none() {
            actor.db_role = stores.db_role().map(str::to_owned);
        }
        Ctx {
            root,
            stores,
            actor,
            refusals: None,
        }
    }

    /// A context acting as this process's own actor ([`Stores::me`]): the
    /// command line's.
    pub(crate) fn own(root: &'a Root, stores: &'a Stores) -> Ctx<'a> {
        Ctx::new(root, stores, stores.me().clone())
    }

    /// This context, its refusals kept to one recorded a minute per person
    /// and loop by `refusals`.
    pub(crate) fn limiting(self, refusals: &'a Refusals) -> Ctx<'a> {
        Ctx {
            refusals: Some(refusals),
            ..self
        }
    }

    /// Loop `name`, once the actor may do `action` to it (a refusal is
    /// recorded apart from the history, waiting for no lock).
    fn allowed(&self, name: &str, action: Action) -> Result<Box<dyn LoopStore>> {
        let dir = self.stores.get(name)?;
        let rules = crate::store::access_rules(&*dir, self.stores.access());
        self.require(&*dir, action, &rules)?;
        Ok(dir)
    }

    /// The actor must hold the role `action` needs under `rules`
    /// ([`refusal::require`]).
    fn require(&self, dir: &dyn LoopStore, action: Action, rules: &Access) -> Result<()> {
        refusal::require(self, dir, action, rules)
    }

    /// The one check before a change to the loop `store`, for a front-end
    /// that found the loop itself: the actor must hold the role `action`
    /// needs (a refusal is kept and returned as [`refusal::require`]
    /// says).
    pub(crate) fn allowed_on(&self, store: &dyn LoopStore, action: Action) -> Result<()> {
        let rules = crate::store::access_rules(store, self.stores.access());
        self.require(store, action, &rules)
    }

    /// Loads the loop's state under its lock, lets `change` modify it and
    /// say what happened, and commits both as the next version, as the
    /// actor. A change that returns no events changed nothing, and nothing
    /// is committed.
    pub(crate) fn update(
        &self,
        store: &dyn LoopStore,
        command: &str,
        wait: Wait,
        change: impl FnOnce(&mut State) -> Result<Vec<EventKind>>,
    ) -> Result<State> {
        let mut session = store.lock(Holder::me(command), wait)?;
        let mut state = session.load(self.stores.me())?.state;
        let mut events = config_found(self.root, store, &mut state);
        events.extend(change(&mut state)?);
        if !events.is_empty() {
            session.commit(&self.actor, &mut state, events, Durability::Full)?;
        }
        Ok(state)
    }

    /// What the actor did, for the loop's people (`[notify] on =
    /// ["operator"]`).
    fn operated(&self, dir: &dyn LoopStore, state: &State, action: &'static str) -> Notice {
        let op = Operation {
            action,
            actor: self.actor.clone(),
        };
        Notice::operator(dir.name().as_str(), state, op, None, self.root.path())
    }

    /// The follow-up of `change`, outside the lock, on the store open.
    fn follow(&self, change: Change<'_>) {
        after::follow(self.root, change);
    }
}

/// A config changed since the loop last recorded one, as a change that
/// commits finds it (one that does not load is left to the tick, which
/// says why).
fn config_found(root: &Root, store: &dyn LoopStore, state: &mut State) -> Vec<EventKind> {
    let Ok(config) = store.config() else {
        return Vec::new();
    };
    let now = crate::rules::Current::of(root.path(), &config);
    let policy = config.approval.config_changes;
    crate::rules::take_in(state, &now, policy, crate::rules::Via::Outside, None)
        .map(|change| EventKind::ConfigChanged { change })
        .into_iter()
        .collect()
}

/// A change the loop's state refuses, as the error that says so.
fn refused(dir: &dyn LoopStore) -> impl FnOnce(Refusal) -> Error + '_ {
    move |r| Error::Refused {
        name: dir.name().to_string(),
        message: r.0,
    }
}

/// A loop as a change left it: what `status NAME --json` shows, which is
/// what the verbs that change a loop answer.
pub(crate) struct Looked {
    dir: Box<dyn LoopStore>,
    /// The state the change committed (or found, when it changed nothing).
    pub state: State,
}

impl Looked {
    /// The loop's name.
    pub(crate) fn name(&self) -> &str {
        self.dir.name().as_str()
    }
}

impl Serialize for Looked {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::ops::views::status::view(&*self.dir, &self.state).serialize(s)
    }
}
