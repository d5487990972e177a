//! Who may do what to a loop (README, "Roles"): the roles, the commands
//! each guards, and the one check every command that changes a loop makes
//! before it changes anything. A refusal writes nothing but its own
//! record: a `refused` event committed under the loop's lock, waited for
//! a short while at most, so a refusal is said at once even while a long
//! tick holds the lock.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::LoopConfig;
use crate::error::{Error, Result};
use crate::history::EventKind;
use crate::lock::{Holder, Wait};
use crate::store::{Durability, LoopStore};
use crate::who::Actor;

/// `[access]`, in loop.toml or in the root's automaton.toml (the loop's
/// own lists win, each on its own). A role left unset is held by anyone
/// who may use the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// May `approve` and `reject`.
    #[serde(default)]
    pub approvers: Option<Vec<String>>,
    /// May `pause`, `resume`, `cancel`, `edit`, `rm`, `migrate`, `tick`
    /// by hand, `check-gate --apply` and `doctor --fix`; the daemon's
    /// user must be one for the daemon to tick the loop.
    #[serde(default)]
    pub operators: Option<Vec<String>>,
    /// May read a loop through a server; the command line does not check it.
    #[serde(default)]
    pub viewers: Option<Vec<String>>,
}

impl Access {
    /// The lists that hold for a loop: its own, else the root's.
    pub fn over(&self, defaults: &Access) -> Access {
        let pick =
            |own: &Option<Vec<String>>, root: &Option<Vec<String>>| own.clone().or_else(|| root.clone());
        Access {
            approvers: pick(&self.approvers, &defaults.approvers),
            operators: pick(&self.operators, &defaults.operators),
            viewers: pick(&self.viewers, &defaults.viewers),
        }
    }

    fn holders(&self, role: Role) -> Option<&[String]> {
        match role {
            Role::Approvers => self.approvers.as_deref(),
            Role::Operators => self.operators.as_deref(),
            Role::Viewers => self.viewers.as_deref(),
        }
    }
}

/// A role: who holds it is a list of user names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Approvers,
    Operators,
    Viewers,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Approvers => "approvers",
            Role::Operators => "operators",
            Role::Viewers => "viewers",
        }
    }
}

/// What a command does to a loop, as far as roles go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Approve,
    Reject,
    Pause,
    Resume,
    Cancel,
    Edit,
    Rm,
    Tick,
    CheckGateApply,
    /// Moving the loop to another store: it is gone from this one.
    Migrate,
    /// Repairing the loop's record (`doctor --fix`), which commits.
    DoctorFix,
    View,
}

impl Action {
    /// The command, as typed.
    pub fn command(self) -> &'static str {
        match self {
            Action::Approve => "approve",
            Action::Reject => "reject",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Cancel => "cancel",
            Action::Edit => "edit",
            Action::Rm => "rm",
            Action::Tick => "tick",
            Action::CheckGateApply => "check-gate --apply",
            Action::Migrate => "migrate",
            Action::DoctorFix => "doctor --fix",
            Action::View => "view",
        }
    }

    /// The role that may do it.
    pub fn role(self) -> Role {
        match self {
            Action::Approve | Action::Reject => Role::Approvers,
            Action::View => Role::Viewers,
            _ => Role::Operators,
        }
    }
}

/// Whether `actor` may do `action` under `access`: the one check.
pub fn check(actor: &Actor, action: Action, access: &Access) -> std::result::Result<(), Denied> {
    let role = action.role();
    match access.holders(role) {
        None => Ok(()),
        Some(holders) if holders.contains(&actor.user) => Ok(()),
        Some(holders) => Err(Denied {
            action,
            role,
            holders: holders.to_vec(),
        }),
    }
}

/// A check that failed: what was asked, the role it needs, who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub action: Action,
    pub role: Role,
    pub holders: Vec<String>,
}

/// The lists that hold for the loop `store` with the root's defaults: its
/// loop.toml's, else (when it does not load) the root's alone.
pub fn rules(store: &dyn LoopStore, defaults: &Access) -> Access {
    match store.config() {
        Ok(config) => rules_of(&config, defaults),
        Err(_) => defaults.clone(),
    }
}

/// The lists that hold for a loop configured as `config`.
pub fn rules_of(config: &LoopConfig, defaults: &Access) -> Access {
    config.access().over(defaults)
}

/// How long a refusal waits for the loop's lock to be recorded when its
/// command sets no bound of its own (`--timeout`): a tick that holds the
/// lock for half an hour does not hold the refusal back with it.
pub const REFUSAL_WAIT: Duration = Duration::from_secs(2);

/// What became of a refusal's record in the loop's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A `refused` event records it.
    Kept,
    /// The loop's lock did not come within the wait: who held it.
    Busy(Option<Holder>),
    /// Writing it failed: why.
    Failed(String),
    /// Not recorded, as nothing was asked to change (a reader refused by
    /// a server).
    Unasked,
}

impl std::fmt::Display for Record {
    /// What the refusal's message says of its record, after a `; `.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Record::Kept => f.write_str("; the attempt is recorded"),
            Record::Busy(Some(h)) => write!(
                f,
                "; the attempt could not be recorded: the loop's lock is held by {}",
                h.describe()
            ),
            Record::Busy(None) => {
                f.write_str("; the attempt could not be recorded: the loop's lock is held by another process")
            }
            Record::Failed(why) => write!(f, "; the attempt could not be recorded: {why}"),
            Record::Unasked => Ok(()),
        }
    }
}

/// The wait for a refusal's record: the command's own bound (its
/// `--timeout` or `--no-wait`), else [`REFUSAL_WAIT`].
pub fn record_wait(bound: Wait) -> Wait {
    match bound {
        Wait::Forever => Wait::For(REFUSAL_WAIT),
        bounded => bounded,
    }
}

/// Checks `actor` against the loop's rules. A refusal is returned as
/// [`Error::NotAllowed`] once it is recorded in the loop's history (a
/// `refused` event in a commit of its own, under the lock), or once the
/// lock did not come within [`record_wait`] of `bound` (the command's own
/// bound on waiting for the lock; `Wait::Forever` when it sets none): the
/// error then says it is not recorded, and who holds the lock.
pub fn require(
    store: &dyn LoopStore,
    actor: &Actor,
    action: Action,
    access: &Access,
    bound: Wait,
) -> Result<()> {
    let Err(denied) = check(actor, action, access) else {
        return Ok(());
    };
    let record = match record(store, actor, &denied, record_wait(bound)) {
        Ok(()) => Record::Kept,
        Err(Error::LockNotObtained { holder, .. }) => Record::Busy(holder),
        Err(e) => Record::Failed(e.to_string()),
    };
    Err(Error::NotAllowed {
        name: store.name().to_string(),
        command: action.command(),
        user: actor.user.clone(),
        role: denied.role.as_str(),
        holders: denied.holders,
        record: Box::new(record),
    })
}

fn record(store: &dyn LoopStore, actor: &Actor, denied: &Denied, wait: Wait) -> Result<()> {
    let mut session = store.lock(Holder::me("refused"), wait)?;
    let mut state = session.load()?.state;
    let event = EventKind::Refused {
        by: actor.user.clone(),
        action: denied.action,
        role: denied.role,
        holders: denied.holders.clone(),
    };
    session.commit(actor, &mut state, vec![event], Durability::Full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::who::identify;

    fn list(names: &[&str]) -> Option<Vec<String>> {
        Some(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn each_command_needs_its_role_and_unset_roles_are_anyones() {
        let access = Access {
            approvers: list(&["lead"]),
            operators: list(&["ops"]),
            viewers: None,
        };
        let ops = identify("ops", None, &[]);
        let lead = identify("lead", None, &[]);
        assert!(check(&ops, Action::Pause, &access).is_ok());
        let no = check(&ops, Action::Reject, &access).unwrap_err();
        assert_eq!(
            (no.role, no.holders.as_slice()),
            (Role::Approvers, &["lead".to_owned()][..])
        );
        assert!(check(&lead, Action::Approve, &access).is_ok());
        assert!(check(&lead, Action::CheckGateApply, &access).is_err());
        for moves in [Action::Migrate, Action::DoctorFix] {
            assert_eq!(check(&lead, moves, &access).unwrap_err().role, Role::Operators);
            assert!(check(&ops, moves, &access).is_ok());
        }
        assert!(check(&lead, Action::View, &access).is_ok());
        assert!(check(&ops, Action::Tick, &Access::default()).is_ok());
    }

    #[test]
    fn a_loops_list_wins_over_the_roots_one_role_at_a_time() {
        let root = Access {
            approvers: list(&["a"]),
            operators: list(&["o"]),
            viewers: None,
        };
        let own = Access {
            approvers: list(&["b"]),
            ..Access::default()
        };
        let both = own.over(&root);
        assert_eq!(both.approvers, list(&["b"]));
        assert_eq!(both.operators, list(&["o"]));
        assert_eq!(both.viewers, None);
    }

    #[test]
    fn a_person_named_by_a_bot_is_not_who_is_checked() {
        let access = Access {
            approvers: list(&["lead"]),
            ..Access::default()
        };
        let spoof = identify("root", Some("lead"), &[]);
        assert!(check(&spoof, Action::Approve, &access).is_err());
        let delegated = identify("root", Some("lead"), &["root".to_owned()]);
        assert!(check(&delegated, Action::Approve, &access).is_ok());
    }
}
