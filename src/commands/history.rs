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
use crate::store::{Changes, Stores};

/// How long `--follow` waits on the change feed at a time.
const FOLLOW_WAIT: Duration = Duration::from_mins(1);

pub(crate) fn run(root: &Root, stores: &Stores, args: &HistoryArgs, out: &mut dyn Write) -> Result<Exit> {
    let ctx = Ctx::own(root, stores);
    let q = Query {
        limit: args.limit,
        since: args.since,
        kinds: args.kind.clone(),
    };
    // A follower listens before it reads, so no commit falls between.
    let changes = match args.follow {
        true => Some(stores.watch()?),
        false => None,
    };
    let view = query(&ctx, &args.name, &q)?;
    let Some(changes) = changes else {
        if args.json.json {
            super::emit_json(out, &view)?;
        } else {
            super::emit(out, &text(&view.events))?;
        }
        return Ok(Exit::Ok);
    };
    print(out, &view.events, args.json.json)?;
    out.flush().map_err(Error::Output)?;
    let seen = view.events.last().map(place);
    follow(&ctx, &args.name, &q, seen, changes, args.json.json, out)
}

/// Where an event falls in the history: its version, then when it came
/// (a refusal moves no version, and comes after its version's events).
fn place(e: &Event) -> (u64, jiff::Timestamp) {
    (e.v, e.at)
}

/// Prints the events `q` admits that fall after `seen`, as the store's
/// change feed tells of the loop's commits and refusals, until the
/// process is interrupted (a commit's events are written together, so a
/// version is printed whole).
fn follow(
    ctx: &Ctx,
    name: &str,
    q: &Query,
    mut seen: Option<(u64, jiff::Timestamp)>,
    mut changes: Box<dyn Changes>,
    json: bool,
    out: &mut dyn Write,
) -> Result<Exit> {
    let q = Query {
        limit: None,
        ..q.clone()
    };
    loop {
        if !changes.wait(FOLLOW_WAIT)?.iter().any(|c| c.name == name) {
            continue;
        }
        let view = query(ctx, name, &q)?;
        let new: Vec<Event> = view
            .events
            .into_iter()
            .filter(|e| seen.is_none_or(|s| place(e) > s))
            .collect();
        print(out, &new, json)?;
        out.flush().map_err(Error::Output)?;
        seen = new.last().map(place).or(seen);
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
