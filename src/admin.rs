//! Who may administer a root, and the record of what admins did
//! (docs/access.md, "Admins").
//!
//! An admin changes who may sign in and who may act for whom: `user add`,
//! `user rotate`, `user remove` (a console user named as an OS user counts
//! as that person in every role check) and `delegate add`, `delegate
//! remove`. The admins are the root's `[access] admins` in automaton.toml,
//! else the OS user who owns the root directory. The check is of the OS
//! user of the process: `$AUTOMATON_USER` makes no one an admin, delegate
//! or not.
//!
//! Every admin act is one [`Entry`] added to the root's admin record with
//! its change (and every refused one, where the one refused may write it) (the file store's `<root>/admin.jsonl`, the PostgreSQL
//! store's `admin_log` table); no entry is ever rewritten. The delegates
//! honoured are the list the last delegate entry left: automaton.toml's
//! `delegates` count only as far as an admin recorded them, and a command
//! that would act through one that is not recorded says so.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::root::Root;
use crate::store::{Store, Stores};
use crate::who::{self, Actor};

/// What an admin does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    UserAdd,
    UserRotate,
    UserRemove,
    DelegateAdd,
    DelegateRemove,
    AccessImport,
}

impl Action {
    /// The command, as typed.
    pub(crate) fn command(self) -> &'static str {
        match self {
            Action::UserAdd => "user add",
            Action::UserRotate => "user rotate",
            Action::UserRemove => "user remove",
            Action::DelegateAdd => "delegate add",
            Action::DelegateRemove => "delegate remove",
            Action::AccessImport => "access import",
        }
    }
}

/// One entry of the admin record: when, by whom, what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub at: Timestamp,
    /// The admin: the OS user of the process, and whom `$AUTOMATON_USER`
    /// named, for the record only.
    pub by: Actor,
    #[serde(flatten)]
    pub change: Change,
}

/// What an admin changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Change {
    /// A console user made; `os_user`: its name is an OS user's, so it
    /// counts as that person.
    UserAdded {
        name: String,
        os_user: bool,
    },
    /// A console user given a new token; the old one and its sessions end.
    UserRotated {
        name: String,
        os_user: bool,
    },
    UserRemoved {
        name: String,
    },
    /// `name` may act for the person `$AUTOMATON_USER` names; `delegates`
    /// is the whole list after the change.
    DelegateAdded {
        name: String,
        delegates: Vec<String>,
    },
    DelegateRemoved {
        name: String,
        delegates: Vec<String>,
    },
    /// The root-wide `[access]` lists every host reads from a shared
    /// store, as they are from now on (`access import`).
    AccessSet {
        access: crate::access::Access,
    },
    /// Someone who is not an admin asked for `command`; nothing changed.
    Refused {
        command: String,
        holders: Vec<String>,
    },
}

impl Change {
    /// How `user log` says it.
    pub fn describe(&self) -> String {
        let person = |os: &bool| if *os { " (an OS user's name)" } else { "" };
        match self {
            Change::UserAdded { name, os_user } => format!("added user {name}{}", person(os_user)),
            Change::UserRotated { name, os_user } => {
                format!("rotated the token of user {name}{}", person(os_user))
            }
            Change::UserRemoved { name } => format!("removed user {name}"),
            Change::DelegateAdded { name, delegates } => {
                format!("added delegate {name} (delegates: {})", list(delegates))
            }
            Change::DelegateRemoved { name, delegates } => {
                format!("removed delegate {name} (delegates: {})", list(delegates))
            }
            Change::AccessSet { access } => format!("recorded the root-wide access ({})", access.describe()),
            Change::Refused { command, holders } => {
                format!("was refused `{command}` (admins: {})", list(holders))
            }
        }
    }
}

fn list(names: &[String]) -> String {
    match names.is_empty() {
        true => "none".to_owned(),
        false => names.join(", "),
    }
}

/// A new entry: now, by `by` (the process's OS user,
/// [`crate::store::Stores::os_actor`]).
pub(crate) fn entry(by: Actor, change: Change) -> Entry {
    Entry {
        at: crate::clock::now(),
        by,
        change,
    }
}

/// The delegates the record holds: the list its last delegate entry left.
pub(crate) fn recorded_delegates(log: &[Entry]) -> Vec<String> {
    log.iter()
        .rev()
        .find_map(|e| match &e.change {
            Change::DelegateAdded { delegates, .. } | Change::DelegateRemoved { delegates, .. } => {
                Some(delegates.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// The root-wide access the record holds: its last `access-set` entry's.
pub(crate) fn recorded_access(log: &[Entry]) -> Option<crate::access::Access> {
    log.iter().rev().find_map(|e| match &e.change {
        Change::AccessSet { access } => Some(access.clone()),
        _ => None,
    })
}

/// The root-wide access this process holds every loop to: on a shared
/// store, the one an admin recorded there (`access import`), whatever
/// this host's automaton.toml says, which is ignored with a warning
/// naming the file when it differs; until one is recorded, and on the
/// file store, automaton.toml's.
pub(crate) fn resolved_access(root: &Root, recorded: Option<crate::access::Access>) -> crate::access::Access {
    let file = &root.settings().access;
    let Some(recorded) = recorded else {
        if !file.is_open() && matches!(root.store(), crate::root::StoreChoice::Postgres(_)) {
            tracing::warn!(
                "{}: its [access] is not recorded in the store, so each host reads its own file; `automaton access import` records it for every host",
                root.config_file().display()
            );
        }
        return file.clone();
    };
    if !file.is_open() && *file != recorded {
        tracing::warn!(
            "{}: its [access] ({}) is ignored: the root-wide access is the one recorded in the store ({}); `automaton access import` records this file's",
            root.config_file().display(),
            file.describe(),
            recorded.describe()
        );
    }
    recorded
}

/// Whether `name` is an OS user's name on this host.
pub(crate) fn is_os_user(name: &str) -> bool {
    crate::os::is_os_user(name)
}

/// Who holds the admin role, and where that is said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admins {
    pub holders: Vec<String>,
    /// True when automaton.toml names them; false: the root's owner.
    pub named: bool,
}

/// The root's admins: its `[access] admins`, else the owner of the root
/// directory.
pub(crate) fn admins(root: &Root) -> Result<Admins> {
    if let Some(named) = &root.settings().admins {
        return Ok(Admins {
            holders: named.clone(),
            named: true,
        });
    }
    let meta = std::fs::metadata(root.path()).map_err(Error::io("reading the owner of", root.path()))?;
    let owner = crate::os::owner_name(&meta);
    Ok(Admins {
        holders: vec![owner],
        named: false,
    })
}

/// Checks that this process's OS user is one of the root's admins before
/// `action`, before the store is opened. A refusal changes nothing but the
/// admin record, where it is kept as a `refused` entry when the one
/// refused may write it (the message says whether it is), and exits 10.
pub(crate) fn require(root: &Root, action: Action) -> Result<()> {
    let admins = admins(root)?;
    // Checked before any store is open: no database role to record yet.
    let me = who::os_actor(None);
    if admins.holders.contains(&me.user) {
        return Ok(());
    }
    let refused = entry(
        me.clone(),
        Change::Refused {
            command: action.command().to_owned(),
            holders: admins.holders.clone(),
        },
    );
    let record = match Stores::open(root).and_then(|s| s.record_admin(&refused)) {
        Ok(()) => crate::access::Record::Kept,
        Err(e) => crate::access::Record::Failed(e.to_string()),
    };
    Err(Error::NotAdmin {
        record: Box::new(record),
        root: root.path().to_path_buf(),
        command: action.command(),
        user: me.user,
        holders: admins.holders,
        whence: match admins.named {
            true => format!("`[access] admins` in {}", root.config_file().display()),
            false => format!(
                "the owner of the root, as {} sets no `[access] admins`",
                root.config_file().display()
            ),
        },
    })
}

/// The delegates this process honours: those the store's record holds,
/// read when they matter (`$AUTOMATON_USER` names someone else; else
/// none); says so when automaton.toml lists others.
pub(crate) fn honoured_delegates(root: &Root, store: &dyn Store) -> Result<Vec<String>> {
    if !who::wants_delegation() {
        return Ok(Vec::new());
    }
    let recorded = store.delegates()?;
    if let Some(diff) = difference(&root.settings().delegates, &recorded) {
        tracing::warn!(
            "{}: {diff}; only the delegates an admin recorded are honoured (`automaton delegate list`)",
            root.config_file().display()
        );
    }
    Ok(recorded)
}

/// How automaton.toml's `delegates` differ from the recorded ones, if they
/// list any and do.
pub(crate) fn difference(config: &[String], recorded: &[String]) -> Option<String> {
    let unrecorded: Vec<&str> = config
        .iter()
        .filter(|d| !recorded.contains(d))
        .map(String::as_str)
        .collect();
    let unlisted: Vec<&str> = recorded
        .iter()
        .filter(|d| !config.contains(d))
        .map(String::as_str)
        .collect();
    let mut parts = Vec::new();
    if !unrecorded.is_empty() {
        parts.push(format!(
            "delegates {} not recorded by an admin (`automaton delegate add NAME` records one)",
            unrecorded.join(", ")
        ));
    }
    if !config.is_empty() && !unlisted.is_empty() {
        parts.push(format!("recorded delegates {} not listed", unlisted.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_last_delegate_entry_says_who_is_honoured() {
        let by = who::identify("root", None, &[]);
        let at = Timestamp::UNIX_EPOCH;
        let mut log = vec![Entry {
            at,
            by: by.clone(),
            change: Change::UserAdded {
                name: "ann".into(),
                os_user: false,
            },
        }];
        assert!(recorded_delegates(&log).is_empty());
        log.push(Entry {
            at,
            by: by.clone(),
            change: Change::DelegateAdded {
                name: "ci".into(),
                delegates: names(&["ci", "bot"]),
            },
        });
        log.push(Entry {
            at,
            by,
            change: Change::DelegateRemoved {
                name: "bot".into(),
                delegates: names(&["ci"]),
            },
        });
        assert_eq!(recorded_delegates(&log), names(&["ci"]));
        let text = serde_json::to_string(&log[2]).unwrap();
        assert!(
            text.contains(r#""kind":"delegate-removed","name":"bot","delegates":["ci"]"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), log[2]);
    }

    #[test]
    fn a_config_list_that_differs_from_the_record_is_said() {
        assert_eq!(difference(&[], &names(&["ci"])), None);
        assert_eq!(difference(&names(&["ci"]), &names(&["ci"])), None);
        let d = difference(&names(&["ci", "agent"]), &names(&["ci"])).unwrap();
        assert!(d.starts_with("delegates agent not recorded"), "{d}");
        let d = difference(&names(&["agent"]), &names(&["ci"])).unwrap();
        assert!(d.contains("recorded delegates ci not listed"), "{d}");
    }
}
