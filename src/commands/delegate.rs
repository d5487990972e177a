//! `delegate`: the OS users who may act for the person `$AUTOMATON_USER`
//! names. `add` and `remove` are an admin's (src/admin.rs), each recorded
//! in the root's admin record, which is where the delegates honoured are
//! read from; `list` shows them beside automaton.toml's `delegates`.

use std::io::Write;

use crate::admin::{self, Change};
use crate::cli::{DelegateArgs, DelegateCommand};
use crate::error::{Error, Exit, Result};
use crate::root::Root;
use crate::store::Stores;

pub(super) fn run(root: &Root, cmd: &DelegateCommand, out: &mut dyn Write) -> Result<Exit> {
    match cmd {
        DelegateCommand::Add(args) => {
            admin::require(root, admin::Action::DelegateAdd)?;
            change(root, args, true, out)
        }
        DelegateCommand::Remove(args) => {
            admin::require(root, admin::Action::DelegateRemove)?;
            change(root, args, false, out)
        }
        DelegateCommand::List(args) => list(root, args.json.json, out),
    }
}

/// Adds (`add`) or removes `args.name`, recorded; a no-op says so.
fn change(root: &Root, args: &DelegateArgs, add: bool, out: &mut dyn Write) -> Result<Exit> {
    crate::users::check_name(&args.name)?;
    let stores = Stores::open(root)?;
    let by = stores.os_actor();
    let entry = stores.change_delegates(&mut |current| changed(by.clone(), current, &args.name, add))?;
    let delegates = match entry.as_ref().map(|e| &e.change) {
        Some(Change::DelegateAdded { delegates, .. } | Change::DelegateRemoved { delegates, .. }) => {
            delegates.clone()
        }
        Some(_) => Vec::new(),
        None if add => stores.delegates()?,
        None => {
            return Err(Error::NoSuchDelegate {
                name: args.name.clone(),
                store: stores.describe(),
            });
        }
    };
    if args.json.json {
        let value = serde_json::json!({
            "name": args.name,
            "changed": entry.is_some(),
            "delegates": delegates,
        });
        return super::emit_json(out, &value).map(|()| Exit::Ok);
    }
    let name = &args.name;
    let text = match (entry.is_some(), add) {
        (false, _) => format!("{name} is already a delegate; nothing recorded\n"),
        (true, true) => format!("{name} may now act for the person $AUTOMATON_USER names; recorded\n"),
        (true, false) => format!("{name} is no longer a delegate; recorded\n"),
    };
    super::emit(out, &text).map(|()| Exit::Ok)
}

/// The entry, by `by`, that adds (`add`) or removes `name` from the
/// `current` delegates; `None` when it is already in (or out).
fn changed(by: crate::who::Actor, mut current: Vec<String>, name: &str, add: bool) -> Option<admin::Entry> {
    if current.iter().any(|d| d == name) == add {
        return None;
    }
    current.retain(|d| d != name);
    let name = name.to_owned();
    Some(admin::entry(
        by,
        match add {
            true => {
                current.push(name.clone());
                Change::DelegateAdded {
                    name,
                    delegates: current,
                }
            }
            false => Change::DelegateRemoved {
                name,
                delegates: current,
            },
        },
    ))
}

/// `list`: the recorded delegates, and how automaton.toml's list differs.
fn list(root: &Root, json: bool, out: &mut dyn Write) -> Result<Exit> {
    let stores = Stores::open(root)?;
    let recorded = stores.delegates()?;
    let config = &root.settings().delegates;
    let unrecorded: Vec<&String> = config.iter().filter(|d| !recorded.contains(d)).collect();
    if json {
        let value = serde_json::json!({
            "delegates": recorded,
            "config": config,
            "unrecorded": unrecorded,
        });
        return super::emit_json(out, &value).map(|()| Exit::Ok);
    }
    let mut text = match recorded.is_empty() {
        true => "no delegates recorded; `automaton delegate add NAME` records one\n".to_owned(),
        false => format!("delegates: {}\n", recorded.join(", ")),
    };
    if let Some(diff) = admin::difference(config, &recorded) {
        text += &format!("{}: {diff}\n", root.config_file().display());
    }
    super::emit(out, &text).map(|()| Exit::Ok)
}
