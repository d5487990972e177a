//! `init`: create a root.

use std::io::Write;

use crate::error::{Exit, Result};
use crate::root::{self, Flags, Origin, Root, StoreChoice};
use crate::store;

pub fn run(flags: Flags<'_>, out: &mut dyn Write) -> Result<Exit> {
    let (located, origin) = Root::locate(flags)?;
    let located_store = located.store().clone();
    // Without --root or $AUTOMATON_ROOT, init makes ./.automaton, as `git
    // init` makes ./.git: the nearest-parent and per-user defaults are for
    // finding a root, not for choosing where to make one.
    let root = match origin {
        Origin::Flag | Origin::Env => located,
        Origin::Discovered | Origin::Default => {
            let cwd =
                std::env::current_dir().map_err(crate::Error::io("reading the working directory", "."))?;
            Root::at(cwd.join(".automaton"))
        }
    };
    let root = root.with_store(located_store);
    let fresh = store::init_root(&root)?;
    let verb = if fresh {
        "initialised"
    } else {
        "already initialised:"
    };
    let mut line = format!("{verb} {}", root.path().display());
    if let StoreChoice::Postgres(_) = root.store() {
        // Connecting brings the database's schema up to date.
        let stores = store::Stores::open(&root)?;
        line += &format!(" (loops in {})", stores.describe());
        // A store named on the command line is the root's from now on,
        // for every command and schedule that uses the root.
        if let Some(flag) = flags.store {
            let file = root.path().join(root::ROOT_CONFIG);
            let text = format!(
                "# Where this root's loops live (docs/postgres.md).\nstore = {}\n",
                toml::Value::String(flag.to_owned())
            );
            crate::fsx::write_file(root.path(), &file, text.as_bytes())?;
            line += &format!("; recorded in {}", file.display());
        }
    }
    super::emit(out, &format!("{line}\n"))?;
    Ok(Exit::Ok)
}
