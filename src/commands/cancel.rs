//! `cancel` on the command line: the core ends the tick in flight
//! ([`crate::ops::cancel`]); this says what it did.

use std::io::Write;

use super::render::safe;
use crate::cli::CancelArgs;
use crate::error::{Exit, Result};
use crate::ops::cancel::{Cancel, Cancelled};
use crate::root::Root;
use crate::store::Stores;

pub(super) use crate::ops::cancel::TIMEOUT;

pub(super) fn run(root: &Root, stores: &Stores, args: &CancelArgs, out: &mut dyn Write) -> Result<Exit> {
    let req = Cancel {
        name: args.name.clone(),
        reason: args.reason.clone(),
        grace: args.grace,
        timeout: args.timeout,
    };
    crate::ops::cancel::cancel(&super::ops::ctx(root, stores), req, &mut |r| {
        finish(r, args.json.json, out)
    })?;
    Ok(Exit::Ok)
}

fn finish(r: &Cancelled, json: bool, out: &mut dyn Write) -> Result<()> {
    if json {
        super::emit_json(out, r)?;
    } else {
        super::emit(out, &format!("{}\n", safe(&line(r))))?;
    }
    out.flush().map_err(crate::Error::Output)
}

fn line(r: &Cancelled) -> String {
    match (r.tick, r.signals.last()) {
        (None, _) => format!("loop {} has no tick in flight; nothing to cancel", r.name),
        (Some(t), Some(_)) => format!(
            "cancelled tick {t} of loop {} ({}); it is recorded as cancelled by {}{}",
            r.name,
            r.signals.join(", then "),
            r.by,
            r.reason
                .as_deref()
                .map(|why| format!(": {why}"))
                .unwrap_or_default()
        ),
        (Some(t), None) => format!(
            "tick {t} of loop {} had no step running; it ended and is recorded",
            r.name
        ),
    }
}
