//! The core of automaton's verbs and views, shared by every front-end.
//!
//! The CLI, the console and the daemon each parse their own input, build a
//! request, and call an operation here with a [`Ctx`]: the root, the store
//! already open, and the person acting, passed in explicitly. The role
//! check, the record of a refusal, the commit and the follow-ups happen
//! here, once; a front-end renders the typed outcome or view it gets back.

pub mod views;

use crate::root::Root;
use crate::store::Stores;
use crate::who::Actor;

/// What every operation is given: where, on which store, and for whom.
pub struct Ctx<'a> {
    /// The root the loops live in.
    pub root: &'a Root,
    /// The root's store, opened once by the front-end.
    pub stores: &'a Stores,
    /// The person the operation acts for: its role checks and the records
    /// of its changes name them.
    pub actor: Actor,
}

impl<'a> Ctx<'a> {
    /// A context acting for `actor` on `stores`.
    pub fn new(root: &'a Root, stores: &'a Stores, actor: Actor) -> Ctx<'a> {
        Ctx { root, stores, actor }
    }
}
