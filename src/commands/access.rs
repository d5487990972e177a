//! `access`: the root-wide `[access]` lists on a shared store. `import`
//! records this host's automaton.toml lists in the store's admin record
//! (an admin's act; on PostgreSQL with `attribution` set, only an
//! approver's role may write it), from where every host reads them;
//! `show` says which lists are in force and how the file differs.

use std::io::Write;

use crate::admin::{self, Change};
use crate::cli::{AccessCommand, UserListArgs};
use crate::error::{Error, Exit, Result};
use crate::root::{Root, StoreChoice};
use crate::store::Stores;

pub(super) fn run(root: &Root, cmd: &AccessCommand, out: &mut dyn Write) -> Result<Exit> {
    match cmd {
        AccessCommand::Import(args) => {
            if *root.store() == StoreChoice::File {
                return Err(Error::AccessInFile {
                    config: root.config_file(),
                });
            }
            admin::require(root, admin::Action::AccessImport)?;
            import(root, args, out)
        }
        AccessCommand::Show(args) => show(root, args, out),
    }
}

/// Records automaton.toml's lists, unless the store holds them already.
fn import(root: &Root, args: &UserListArgs, out: &mut dyn Write) -> Result<Exit> {
    let stores = Stores::open(root)?;
    let access = root.settings().access.clone();
    let changed = stores.root_access()?.as_ref() != Some(&access);
    if changed {
        let entry = admin::entry(
            stores.os_actor(),
            Change::AccessSet {
                access: access.clone(),
            },
        );
        stores.record_admin(&entry)?;
    }
    if args.json.json {
        let value = serde_json::json!({ "access": access, "changed": changed });
        return super::emit_json(out, &value).map(|()| Exit::Ok);
    }
    let text = match changed {
        true => format!(
            "root-wide access recorded in {}: {}; every host reads it from there (a daemon or console already running, once restarted), whatever its own {} says\n",
            stores.describe(),
            access.describe(),
            crate::root::ROOT_CONFIG
        ),
        false => format!(
            "the store already holds this root-wide access ({}); nothing recorded\n",
            access.describe()
        ),
    };
    super::emit(out, &text).map(|()| Exit::Ok)
}

/// The lists in force, where they come from, and the file's if it differs.
fn show(root: &Root, args: &UserListArgs, out: &mut dyn Write) -> Result<Exit> {
    let stores = Stores::open(root)?;
    let recorded = stores.root_access()?;
    let config = &root.settings().access;
    let from = match recorded {
        Some(_) => "store",
        None => "file",
    };
    if args.json.json {
        let value = serde_json::json!({
            "access": stores.access(),
            "from": from,
            "recorded": recorded,
            "config": config,
        });
        return super::emit_json(out, &value).map(|()| Exit::Ok);
    }
    let file = root.config_file();
    let mut text = match &recorded {
        Some(a) => format!(
            "root-wide access (recorded in {}): {}\n",
            stores.describe(),
            a.describe()
        ),
        None => format!(
            "root-wide access (from {}): {}\n",
            file.display(),
            config.describe()
        ),
    };
    match &recorded {
        Some(a) if !config.is_open() && a != config => {
            text += &format!(
                "{}: its [access] ({}) is ignored\n",
                file.display(),
                config.describe()
            );
        }
        None if stores.is_shared() => {
            text += "not recorded in the store: each host reads its own file; `automaton access import` records it\n";
        }
        _ => {}
    }
    super::emit(out, &text).map(|()| Exit::Ok)
}
