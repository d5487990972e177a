//! Who may do what to a loop (README, "Roles"): the roles, the commands
//! each guards, and the one check every change to a loop makes before it
//! changes anything. What is kept of a refusal, and what the one refused
//! is told, is the core's (`crate::ops::refusal`): nothing here takes a
//! lock or writes.

use serde::{Deserialize, Serialize};

use crate::config::LoopConfig;
use crate::who::Actor;

/// `[access]`, in loop.toml or in the root's automaton.toml (the loop's
/// own lists win, each on its own). A role left unset is held by anyone
/// who may use the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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

    /// Whether it sets no list: anyone holds every role.
    pub fn is_open(&self) -> bool {
        self.approvers.is_none() && self.operators.is_none() && self.viewers.is_none()
    }

    /// How `access show` and the admin record say it: `approvers: ann,
    /// bob; operators: anyone; viewers: anyone`.
    pub fn describe(&self) -> String {
        let list = |l: &Option<Vec<String>>| match l {
            None => "anyone".to_owned(),
            Some(l) if l.is_empty() => "no one".to_owned(),
            Some(l) => l.join(", "),
        };
        format!(
            "approvers: {}; operators: {}; viewers: {}",
            list(&self.approvers),
            list(&self.operators),
            list(&self.viewers)
        )
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
    /// Letting a loop run an older signed build of a gate.
    AllowRollback,
    /// Moving the loop to another store: it is gone from this one.
    Migrate,
    /// Repairing the loop's record (`doctor --fix`), which commits.
    DoctorFix,
    /// Making a shadow gate live (`gate promote`).
    Promote,
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
            Action::AllowRollback => "gate allow-rollback",
            Action::Migrate => "migrate",
            Action::DoctorFix => "doctor --fix",
            Action::Promote => "gate promote",
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
pub(crate) fn check(actor: &Actor, action: Action, access: &Access) -> std::result::Result<(), Denied> {
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
pub(crate) struct Denied {
    pub action: Action,
    pub role: Role,
    pub holders: Vec<String>,
}

/// The lists that hold for a loop configured as `config`.
pub(crate) fn rules_of(config: &LoopConfig, defaults: &Access) -> Access {
    config.access().over(defaults)
}

/// What became of a refusal's record (kept apart from the loop's history,
/// which merges it in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A `refused` event records it.
    Kept,
    /// Writing it failed: why.
    Failed(String),
    /// Not recorded: nothing was asked to change (a reader refused by a
    /// server), or the one refused may not view the loop (logged only).
    Unasked,
    /// Not recorded, counted: one of the same person's on the loop was
    /// recorded within the minute.
    Counted,
}

impl std::fmt::Display for Record {
    /// What the refusal's message says of its record, after a `; `.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Record::Kept => f.write_str("; the attempt is recorded"),
            Record::Failed(why) => write!(f, "; the attempt could not be recorded: {why}"),
            Record::Unasked => Ok(()),
            Record::Counted => {
                f.write_str("; the attempt is counted, not recorded: one was recorded within the minute")
            }
        }
    }
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
