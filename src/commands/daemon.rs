//! `daemon`: run the embedded scheduler in the foreground until SIGTERM or
//! SIGINT; it logs one line a tick on stderr.

use crate::cli::DaemonArgs;
use crate::error::Result;
use crate::root::Root;
use crate::schedule::daemon::{self, Options};

pub fn run(root: &Root, args: &DaemonArgs) -> Result<u8> {
    daemon::run(
        root,
        &Options {
            max_concurrent: usize::from(args.max_concurrent),
            grace: args.grace,
            ..Options::default()
        },
    )?;
    Ok(0)
}
