//! The file store's change feed ([`crate::store::Store::watch`]): the
//! files hold no channel to be told on, so the feed looks at each loop's
//! commit marker (its state file, whose modification time moves with every
//! commit) and at the list of loops, every [`POLL`] while it is waited on.
//! Its callers see what a store that notifies would tell: the loops that
//! changed, and the loops that came or went.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use super::{LoopDir, list_loops};
use crate::error::Result;
use crate::root::Root;
use crate::store::{Change, Changes};

/// How often the markers are looked at while the feed is waited on.
const POLL: Duration = Duration::from_millis(250);

/// Each loop's commit marker's modification time, by the loop's name.
type Marks = HashMap<String, Option<SystemTime>>;

/// The feed: the markers as last looked at.
pub(super) struct Poll {
    root: Root,
    seen: Marks,
}

impl Poll {
    /// Looks at the markers now, so that every change committed after
    /// this returns is told.
    pub(super) fn start(root: &Root) -> Result<Poll> {
        let seen = marks(&list_loops(root)?);
        Ok(Poll {
            root: root.clone(),
            seen,
        })
    }

    /// What changed since the last look: loops whose marker moved (their
    /// state), and loops that came or went.
    fn look(&mut self) -> Result<Vec<Change>> {
        let now = marks(&list_loops(&self.root)?);
        let mut changed: Vec<Change> = now
            .iter()
            .filter(|(name, at)| self.seen.get(*name) != Some(at))
            .map(|(name, _)| Change {
                name: name.clone(),
                state_only: self.seen.contains_key(name),
            })
            .collect();
        changed.extend(
            self.seen
                .keys()
                .filter(|name| !now.contains_key(*name))
                .map(|name| Change {
                    name: name.clone(),
                    state_only: false,
                }),
        );
        changed.sort_by(|a, b| a.name.cmp(&b.name));
        self.seen = now;
        Ok(changed)
    }
}

impl Changes for Poll {
    fn wait(&mut self, timeout: Duration) -> Result<Vec<Change>> {
        let until = Instant::now() + timeout;
        loop {
            let changed = self.look()?;
            let left = until.saturating_duration_since(Instant::now());
            if !changed.is_empty() || left.is_zero() {
                return Ok(changed);
            }
            std::thread::sleep(POLL.min(left));
        }
    }
}

/// The modification time of each loop's commit marker, or of its
/// refusals when they are newer (a refusal is no commit, but an event).
fn marks(dirs: &[LoopDir]) -> Marks {
    dirs.iter()
        .map(|d| {
            let at = |p: std::path::PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            (d.name.to_string(), at(d.state_path()).max(at(d.refusals_path())))
        })
        .collect()
}
