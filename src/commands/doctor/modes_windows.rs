//! The modes of a root's files, on Windows: there are no modes to check.
//! What automaton makes is given an ACL for its owner alone as it is made
//! ([`crate::os::make_private`]); a root shared by a group is a Unix
//! arrangement, so nothing is walked.

use std::path::Path;

use crate::store::Finding;

/// What a walk of the root found and did: nothing.
pub(crate) struct Walked;

impl Walked {
    /// Paths still wrong.
    #[allow(clippy::unused_self)] // as on Unix, where a walk holds them
    pub(crate) fn left(&self) -> usize {
        0
    }
}

pub(crate) fn walk(_: &Path, _: bool) -> Walked {
    Walked
}

pub(crate) fn findings(_: &Path, _: &Walked) -> Vec<Finding> {
    Vec::new()
}
