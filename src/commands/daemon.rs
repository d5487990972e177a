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
    let opts = Options {
        max_concurrent: usize::from(args.max_concurrent),
        grace: args.grace,
        metrics: args.metrics.clone(),
        ..Options::default()
    };
    if args.service {
        service(root, &opts)?;
    } else {
        daemon::run(root, &opts)?;
    }
    Ok(Exit::Ok)
}

/// `--service`: the daemon under the Service Control Manager.
#[cfg(windows)]
fn service(root: &Root, opts: &Options) -> Result<()> {
    daemon::service::run(root, opts)
}

#[cfg(unix)]
fn service(_: &Root, _: &Options) -> Result<()> {
    Err(crate::error::Error::Service {
        reason: "a Windows service needs Windows; on Unix run `automaton daemon` under the \
                 service manager (systemd, launchd)"
            .to_owned(),
    })
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
