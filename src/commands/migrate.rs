//! `migrate`: move loops between stores — a root's directory and a
//! PostgreSQL database, either way — with their config, state and history,
//! refusing a loop whose lock is held, and one the mover is not an
//! operator of (the refusal is recorded where the loop stays). Step output
//! and gate files stay in the root's `loops/<name>/` on this host, where
//! both stores look for them.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use crate::access::Action;
use crate::cli::MigrateArgs;
use crate::error::{Error, Exit, Result};
use crate::root::{Flags, Root, StoreChoice};
use crate::store::Stores;
use crate::who::Actor;

/// One side of a move.
enum Side {
    Dir(PathBuf),
    Url(String),
}

impl Side {
    fn parse(value: &str) -> Result<Side> {
        if let Ok(StoreChoice::Postgres(url)) = StoreChoice::parse(value, "the command line") {
            Ok(Side::Url(url))
        } else {
            let cwd = std::env::current_dir().map_err(Error::io("reading the working directory", "."))?;
            Ok(Side::Dir(cwd.join(value)))
        }
    }
}

#[derive(Serialize)]
#[allow(
    clippy::struct_field_names,
    reason = "the field names are the --json output's keys"
)]
struct Moved {
    name: String,
    moved: bool,
    events: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(super) fn run(root_flag: Flags<'_>, args: &MigrateArgs, out: &mut dyn Write) -> Result<Exit> {
    let (from, to) = (Side::parse(&args.from)?, Side::parse(&args.to)?);
    // The root whose loops/<name>/ directories hold the loops' files
    // here, and whose automaton.toml says who may move them.
    let local = match (&from, &to) {
        (Side::Dir(d), _) | (_, Side::Dir(d)) => Root::at_with_people(d)?,
        _ => Root::open(root_flag)?,
    };
    let open = |side: &Side| -> Result<Stores> {
        match side {
            Side::Dir(d) => {
                // With its automaton.toml's people: its root-wide access
                // is what a move out of it is checked against.
                let root = Root::at_with_people(d)?;
                if !root.loops_dir().is_dir() {
                    return Err(Error::NoRoot { path: d.clone() });
                }
                Stores::open(&root)
            }
            Side::Url(u) => Stores::open(&local.clone().with_store(StoreChoice::Postgres(u.clone()))),
        }
    };
    let (source, target) = (open(&from)?, open(&to)?);
    // The stores say whom a delegate may act for (the target's record, as
    // it is opened last) and the role of the one on a server.
    let mut actor = target.me().clone();
    if actor.db_role.is_none() {
        actor.db_role = source.db_role().map(str::to_owned);
    }
    let names: Vec<String> = match args.names.is_empty() {
        true => source.list()?.iter().map(|l| l.name().to_string()).collect(),
        false => args.names.clone(),
    };
    let mut report = Vec::new();
    let mut errors = Vec::new();
    for name in names {
        let moved =
            may_move(&source, &local, &actor, &name).and_then(|()| source.move_loop(&target, &name, &actor));
        match moved {
            Ok(events) => {
                tracing::info!("moved loop {name} ({events} events)");
                report.push(Moved {
                    name,
                    moved: true,
                    events,
                    error: None,
                });
            }
            Err(e) => {
                report.push(Moved {
                    name,
                    moved: false,
                    events: 0,
                    error: Some(e.to_string()),
                });
                errors.push(e);
            }
        }
    }
    match args.json.json {
        true => super::emit_json(out, &report)?,
        false => super::emit(out, &human(&report, &source, &target))?,
    }
    say_users_left(&source, &target);
    // Every loop was tried; each that could not move is named once, and
    // the first one's is the exit status.
    match errors.len() {
        0 => Ok(Exit::Ok),
        1 => Err(errors.remove(0)),
        _ => Err(Error::SomeNotMoved {
            total: report.len(),
            errors,
        }),
    }
}

/// One line a loop moved. A loop that did not move is said once, on
/// stderr, as the command's error.
fn human(report: &[Moved], source: &Stores, target: &Stores) -> String {
    let mut text = String::new();
    for m in report.iter().filter(|m| m.error.is_none()) {
        text += &format!(
            "moved loop {} ({} events) from {} to {}\n",
            m.name,
            m.events,
            source.describe(),
            target.describe()
        );
    }
    if report.is_empty() {
        text += &format!("no loops in {}\n", source.describe());
    }
    text
}

/// Says which console users of the source the target lacks: `migrate`
/// moves loops, never users (their tokens are the source's), so a move
/// to a new store leaves the console's sign-ins behind unless they are
/// added there.
fn say_users_left(source: &Stores, target: &Stores) {
    let (Ok(theirs), Ok(ours)) = (source.users(), target.users()) else {
        return;
    };
    let left: Vec<&str> = theirs
        .iter()
        .filter(|u| !ours.iter().any(|o| o.name == u.name))
        .map(|u| u.name.as_str())
        .collect();
    if left.is_empty() {
        return;
    }
    tracing::warn!(
        "console users are not moved: {} stay in {} only; add them in {} with `automaton user add NAME` (each gets a new token)",
        left.join(", "),
        source.describe(),
        target.describe()
    );
}

/// The one check: `actor` must be one of loop `name`'s operators (its
/// loop.toml's, else the root's); a refusal is recorded in the loop,
/// which stays where it is.
fn may_move(source: &Stores, root: &Root, actor: &Actor, name: &str) -> Result<()> {
    let dir = source.get(name)?;
    let ctx = crate::ops::Ctx::new(root, source, actor.clone());
    ctx.allowed_on(dir.as_ref(), Action::Migrate)
}
