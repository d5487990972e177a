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

pub fn run(root: &Root, cmd: &DelegateCommand, out: &mut dyn Write) -> Result<Exit> {
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
    let name = args.name.clone();
    let entry = stores.change_delegates(&mut |mut current| {
        if current.contains(&name) == add {
            return None;
        }
        current.retain(|d| *d != name);
        if add {
            current.push(name.clone());
        }
        let name = name.clone();
        Some(admin::entry(match add {
            true => Change::DelegateAdded {
                name,
                delegates: current,
            },
            false => Change::DelegateRemoved {
                name,
                delegates: current,
            },
        }))
    })?;
    if entry.is_none() && !add {
        return Err(Error::NoSuchDelegate {
            name: args.name.clone(),
            store: stores.describe(),
        });
    }
    let delegates = match &entry {
        Some(e) => match &e.change {
            Change::DelegateAdded { delegates, .. } | Change::DelegateRemoved { delegates, .. } => {
                delegates.clone()
            }
            _ => Vec::new(),
        },
        None => stores.delegates()?,
    };
    if args.json.json {
        let value = serde_json::json!({
            "name": args.name,
            "changed": entry.is_some(),
            "delegates": delegates,
        });
        return super::emit_json(out, &value).map(|()| Exit::Ok);
    }
    let text = match (entry.is_some(), add) {
        (false, _) => format!("{} is already a delegate; nothing recorded\n", args.name),
        (true, true) => format!(
            "{} may now act for the person $AUTOMATON_USER names; recorded\n",
            args.name
        ),
        (true, false) => format!("{} is no longer a delegate; recorded\n", args.name),
    };
    super::emit(out, &text).map(|()| Exit::Ok)
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
