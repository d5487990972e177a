//! `fires`: what became of each firing a loop's schedule called for (the
//! ledger of firings, [`crate::ops::views::fires`]), oldest first, a line
//! each or as JSON.

use std::io::Write;

use crate::cli::FiresArgs;
use crate::error::{Exit, Result};
use crate::ops::Ctx;
use crate::ops::views::fires::fires;
use crate::root::Root;
use crate::store::Stores;

pub(super) fn run(root: &Root, stores: &Stores, args: &FiresArgs, out: &mut dyn Write) -> Result<Exit> {
    let since = args.since;
    let ctx = Ctx::own(root, stores);
    let view = fires(&ctx, &args.name, since, args.limit)?;
    if args.json.json {
        super::emit_json(out, &view)?;
        return Ok(Exit::Ok);
    }
    let records = view.records;
    if records.is_empty() {
        let when = match since {
            Some(s) => format!(" since {}", crate::clock::local(s)),
            None => String::new(),
        };
        super::emit(
            out,
            &format!(
                "no firings of loop {:?} recorded{when}: the daemon records each firing of a \
                 scheduled loop as it fills it\n",
                args.name
            ),
        )?;
        return Ok(Exit::Ok);
    }
    let mut text = String::new();
    for r in &records {
        text += &r.line();
        text.push('\n');
    }
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}
