//! `history`: a loop's events, oldest first ([`crate::ops::views::history`]),
//! those from a time on and of some kinds, a line each for the terminal or
//! as JSON; with `--follow`, then each new event as it is committed.

use std::io::Write;
use std::time::Duration;

use super::render::{local, number, quoted, safe};
use crate::cli::HistoryArgs;
use crate::error::{Error, Exit, Result};
use crate::history::Event;
use crate::ops::Ctx;
use crate::ops::views::history::{Field, Line, Query, query};
use crate::root::Root;
use crate::store::Stores;

/// How often `--follow` reads the history again.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

pub fn run(root: &Root, stores: &Stores, args: &HistoryArgs, out: &mut dyn Write) -> Result<Exit> {
    let ctx = Ctx::new(root, stores, crate::who::actor());
    let q = Query {
        limit: args.limit,
        since: args.since,
        kinds: args.kind.clone(),
    };
    let view = query(&ctx, &args.name, &q)?;
    if !args.follow {
        if args.json.json {
            super::emit_json(out, &view)?;
        } else {
            super::emit(out, &text(&view.events))?;
        }
        return Ok(Exit::Ok);
    }
    let seen = last_version(&ctx, &args.name)?.max(view.events.last().map_or(0, |e| e.v));
    print(out, &view.events, args.json.json)?;
    follow(&ctx, &args.name, &q, seen, args.json.json, out)
}

/// The version of the loop's last event, whatever the query admits.
fn last_version(ctx: &Ctx, name: &str) -> Result<u64> {
    let all = query(
        ctx,
        name,
        &Query {
            limit: Some(1),
            ..Query::default()
        },
    )?;
    Ok(all.events.last().map_or(0, |e| e.v))
}

/// Prints the events `q` admits committed after version `seen`, as they
/// come, until the process is interrupted (a commit's events are written
/// together, so a version is printed whole).
fn follow(ctx: &Ctx, name: &str, q: &Query, mut seen: u64, json: bool, out: &mut dyn Write) -> Result<Exit> {
    let q = Query {
        limit: None,
        ..q.clone()
    };
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let newest = last_version(ctx, name)?;
        if newest <= seen {
            continue;
        }
        let view = query(ctx, name, &q)?;
        let new: Vec<Event> = view.events.into_iter().filter(|e| e.v > seen).collect();
        print(out, &new, json)?;
        out.flush().map_err(Error::Output)?;
        seen = newest;
    }
}

/// Events as `--follow` prints them: lines, or one JSON object a line.
fn print(out: &mut dyn Write, events: &[Event], json: bool) -> Result<()> {
    if !json {
        return super::emit(out, &text(events));
    }
    for e in events {
        let mut line = serde_json::to_string(e).expect("an event serialises");
        line.push('\n');
        super::emit(out, &line)?;
    }
    Ok(())
}

/// The events as the terminal shows them, a line each.
fn text(events: &[Event]) -> String {
    let mut text = String::new();
    for e in events {
        let line = Line::of(e);
        let details: Vec<String> = line
            .fields
            .iter()
            .map(|(k, f)| format!("{k}={}", shown(f)))
            .collect();
        text += &format!("{}  {:<18} {}\n", local(line.at), line.kind, details.join(" "));
    }
    text
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
