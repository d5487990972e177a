//! `fires`: what became of each firing a loop's schedule called for (the
//! ledger of firings, [`crate::fires`]), oldest first.

use std::io::Write;

use crate::cli::FiresArgs;
use crate::error::{Exit, Result};
use crate::root::Root;

pub fn run(root: &Root, args: &FiresArgs, out: &mut dyn Write) -> Result<Exit> {
    let since = args.since;
    let dir = crate::store::open(root, &args.name)?;
    let mut records = dir.fires(since)?;
    if let Some(n) = args.limit {
        records.drain(..records.len().saturating_sub(n));
    }
    if args.json.json {
        super::emit_json(out, &records)?;
        return Ok(Exit::Ok);
    }
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
