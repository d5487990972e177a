//! `init`: create a root; with `--group`, one shared by an OS group.

use std::io::Write;
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;

use crate::cli::InitArgs;
use crate::error::{Error, Exit, Result};
use crate::root::{self, Flags, Origin, Root, StoreChoice};
use crate::store;

pub(super) fn run(flags: Flags<'_>, args: &InitArgs, out: &mut dyn Write) -> Result<Exit> {
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
    // A database is reached first (which brings its schema up to date):
    // one that cannot be reached leaves nothing made on this host.
    let shared = match root.store() {
        StoreChoice::Postgres(_) => Some(store::Stores::open(&root)?),
        StoreChoice::File => None,
    };
    if let Some(group) = &args.group {
        share(&root, group)?;
    }
    let fresh = store::init_root(&root)?;
    let verb = if fresh {
        "initialised"
    } else {
        "already initialised:"
    };
    let mut line = format!("{verb} {}", root.path().display());
    if let Some(group) = &args.group {
        // What was there before (a root made private, then shared) is
        // given the group's modes too, where it is ours.
        let walked = super::doctor::modes::walk(root.path(), true);
        line += &format!(", shared with group {group}");
        if walked.left() > 0 {
            line += &format!(
                " ({} paths of other users keep their modes: `automaton doctor` names them)",
                walked.left()
            );
        }
    }
    if let Some(stores) = shared {
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

/// Makes the root's directory its group's: the group `group`, mode 02770
/// (set-group-ID, so what is made in it is the group's too, see
/// [`crate::fsx::mode`]).
#[cfg(unix)]
fn share(root: &Root, group: &str) -> Result<()> {
    let gid = match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => g.gid.as_raw(),
        _ => {
            return Err(Error::NoSuchGroup {
                name: group.to_owned(),
            });
        }
    };
    let path = root.path();
    crate::fsx::create_dirs(path)?;
    let refused = |source| Error::NotShared {
        path: path.to_owned(),
        group: group.to_owned(),
        source,
    };
    std::os::unix::fs::chown(path, None, Some(gid)).map_err(refused)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o2770)).map_err(refused)
}

/// A root shared by an OS group is a Unix arrangement (set-group-ID
/// directories): Windows roots are their user's.
#[cfg(windows)]
fn share(root: &Root, group: &str) -> Result<()> {
    Err(Error::NotShared {
        path: root.path().to_owned(),
        group: group.to_owned(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a root shared by a group needs Unix set-group-ID directories",
        ),
    })
}
