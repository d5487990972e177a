//! `history`: a loop's events, oldest first ([`crate::ops::views::history`]),
//! a line each for the terminal or as JSON.

use std::io::Write;

use super::render::{local, number, quoted, safe};
use crate::cli::HistoryArgs;
use crate::error::{Exit, Result};
use crate::ops::Ctx;
use crate::ops::views::history::{Field, Line, history};
use crate::root::Root;
use crate::store::Stores;

pub fn run(root: &Root, stores: &Stores, args: &HistoryArgs, out: &mut dyn Write) -> Result<Exit> {
    let ctx = Ctx::new(root, stores, crate::who::actor());
    let view = history(&ctx, &args.name, args.limit)?;
    if args.json.json {
        super::emit_json(out, &view)?;
        return Ok(Exit::Ok);
    }
    let mut text = String::new();
    for e in &view.events {
        let line = Line::of(e);
        let details: Vec<String> = line
            .fields
            .iter()
            .map(|(k, f)| format!("{k}={}", shown(f)))
            .collect();
        text += &format!("{}  {:<18} {}\n", local(line.at), line.kind, details.join(" "));
    }
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}

/// A field as the terminal shows it: a text quoted when it must be,
/// numbers by name in braces (`totals={cost_usd=1.11}`).
fn shown(f: &Field) -> String {
    match f {
        Field::Text(s) => quoted(s),
        Field::Number(n) => n.to_string(),
        Field::Bool(b) => b.to_string(),
        Field::Numbers(m) => {
            let shown: Vec<String> = m
                .iter()
                .map(|(n, v)| format!("{}={}", safe(n), number(*v)))
                .collect();
            format!("{{{}}}", shown.join(" "))
        }
    }
}
