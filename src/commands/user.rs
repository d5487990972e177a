//! `user`: the console's users. `add`, `rotate` and `remove` are an
//! admin's (src/admin.rs), each recorded in the root's admin record with
//! its change; `log` shows that record. `add` and `rotate` print the new
//! token once, on standard output; only its hash is kept (src/users.rs).

use std::io::Write;

use crate::admin::{self, Change};
use crate::cli::{UserArgs, UserCommand};
use crate::error::{Error, Exit, Result};
use crate::root::Root;
use crate::store::Stores;
use crate::users::{self, User};

pub(super) fn run(root: &Root, cmd: &UserCommand, out: &mut dyn Write) -> Result<Exit> {
    let needs = match cmd {
        UserCommand::Add(_) => Some(admin::Action::UserAdd),
        UserCommand::Rotate(_) => Some(admin::Action::UserRotate),
        UserCommand::Remove(_) => Some(admin::Action::UserRemove),
        UserCommand::List(_) | UserCommand::Log(_) => None,
    };
    // Checked before the store is touched: a refusal changes nothing.
    if let Some(action) = needs {
        admin::require(root, action)?;
    }
    let stores = Stores::open(root)?;
    match cmd {
        UserCommand::Add(args) => add(&stores, args, false, out),
        UserCommand::Rotate(args) => add(&stores, args, true, out),
        UserCommand::Remove(args) => remove(&stores, args, out),
        UserCommand::Log(args) => log(&stores, args.json.json, out),
        UserCommand::List(args) => {
            let all = stores.users()?;
            if args.json.json {
                let listed: Vec<_> = all.iter().map(User::listed).collect();
                return super::emit_json(out, &listed).map(|()| Exit::Ok);
            }
            let mut text = String::new();
            for u in &all {
                let rotated = u
                    .rotated_at
                    .map(|t| format!(", token rotated {}", super::render::local(t)))
                    .unwrap_or_default();
                text += &format!(
                    "{}  (added {}{rotated})\n",
                    u.name,
                    super::render::local(u.created_at)
                );
            }
            if all.is_empty() {
                text = "no users; `automaton user add NAME` makes one\n".to_owned();
            }
            super::emit(out, &text).map(|()| Exit::Ok)
        }
    }
}

/// `add` (the user must be new) or `rotate` (it must exist): a new token,
/// its hash saved, the token printed.
fn add(stores: &Stores, args: &UserArgs, rotate: bool, out: &mut dyn Write) -> Result<Exit> {
    users::check_name(&args.name)?;
    let existing = stores.users()?.into_iter().find(|u| u.name == args.name);
    let token = users::new_token()?;
    let now = crate::clock::now();
    let user = match (existing, rotate) {
        (Some(_), false) => {
            return Err(Error::UserExists {
                name: args.name.clone(),
                store: stores.describe(),
            });
        }
        (None, true) => return Err(no_such(stores, &args.name)),
        (Some(old), true) => User {
            token_sha256: users::hash(&token),
            rotated_at: Some(now),
            ..old
        },
        (None, false) => User {
            name: args.name.clone(),
            token_sha256: users::hash(&token),
            created_at: now,
            rotated_at: None,
        },
    };
    let os_user = admin::is_os_user(&user.name);
    let name = user.name.clone();
    let change = match rotate {
        true => Change::UserRotated { name, os_user },
        false => Change::UserAdded { name, os_user },
    };
    stores.put_user(&user, &admin::entry(stores.os_actor(), change))?;
    if args.json.json {
        super::emit_json(out, &serde_json::json!({ "name": user.name, "token": token }))?;
    } else {
        let what = if rotate { "new token" } else { "token" };
        super::emit(
            out,
            &format!(
                "{what} for {}: {token}\nit is shown only now; sign in to `automaton serve` with it, \
                 or send it as `Authorization: Bearer TOKEN`\n",
                user.name
            ),
        )?;
    }
    Ok(Exit::Ok)
}

fn remove(stores: &Stores, args: &UserArgs, out: &mut dyn Write) -> Result<Exit> {
    let entry = admin::entry(
        stores.os_actor(),
        Change::UserRemoved {
            name: args.name.clone(),
        },
    );
    if !stores.remove_user(&args.name, &entry)? {
        return Err(no_such(stores, &args.name));
    }
    if args.json.json {
        super::emit_json(out, &serde_json::json!({ "name": args.name, "removed": true }))?;
    } else {
        super::emit(
            out,
            &format!("removed user {}; its sessions have ended\n", args.name),
        )?;
    }
    Ok(Exit::Ok)
}

/// `log`: the admin record, oldest first.
fn log(stores: &Stores, json: bool, out: &mut dyn Write) -> Result<Exit> {
    let entries = stores.admin_log()?;
    if json {
        return super::emit_json(out, &entries).map(|()| Exit::Ok);
    }
    let mut text: String = entries
        .iter()
        .map(|e| {
            format!(
                "{}  {}  {}\n",
                super::render::local(e.at),
                e.by.describe(),
                e.change.describe()
            )
        })
        .collect();
    if entries.is_empty() {
        text = "no admin acts recorded yet\n".to_owned();
    }
    super::emit(out, &text).map(|()| Exit::Ok)
}

fn no_such(stores: &Stores, name: &str) -> Error {
    Error::NoSuchUser {
        name: name.to_owned(),
        store: stores.describe(),
    }
}
