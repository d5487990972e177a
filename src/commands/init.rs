//! `init`: create a root.

use std::io::Write;
use std::path::Path;

use crate::error::Result;
use crate::root::{Origin, Root};
use crate::store;

pub fn run(flag: Option<&Path>, out: &mut dyn Write) -> Result<u8> {
    let (located, origin) = Root::locate(flag)?;
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
    let fresh = store::init_root(&root)?;
    let verb = if fresh {
        "initialised"
    } else {
        "already initialised:"
    };
    super::emit(out, &format!("{verb} {}\n", root.path().display()))?;
    Ok(0)
}
