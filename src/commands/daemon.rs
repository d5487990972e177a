//! `daemon`: run the embedded scheduler in the foreground until SIGTERM or
//! SIGINT; it logs one line a tick on stderr. `daemon --status` says
//! whether a daemon serves the root and how far behind it is.

use std::io::Write;

use crate::cli::DaemonArgs;
use crate::daemon::{self, Options, daemon_status};
use crate::error::{Exit, Result};
use crate::root::Root;

pub(super) fn run(root: &Root, args: &DaemonArgs, out: &mut dyn Write) -> Result<Exit> {
    if args.status {
        return status(root, args.json.json, out);
    }
    daemon::run(
        root,
        &Options {
            max_concurrent: usize::from(args.max_concurrent),
            grace: args.grace,
            metrics: args.metrics.clone(),
            ..Options::default()
        },
    )?;
    Ok(Exit::Ok)
}

/// Exit 0 when a daemon serves the root, 1 when none does.
fn status(root: &Root, json: bool, out: &mut dyn Write) -> Result<Exit> {
    let status = daemon_status(root)?;
    let serving = status.as_ref().is_some_and(|s| s.serving);
    if json {
        super::emit_json(out, &status)?;
    } else {
        let line = match &status {
            Some(s) => s.describe(),
            None => "no daemon serves this root".to_owned(),
        };
        super::emit(out, &format!("{}\n", super::render::safe(&line)))?;
    }
    Ok(if serving { Exit::Ok } else { Exit::Wanting })
}
