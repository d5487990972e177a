//! `history`: a loop's events, oldest first.

use std::io::Write;

use super::render::{local, number, quoted, safe};
use crate::cli::HistoryArgs;
use crate::error::{Exit, Result};
use crate::history;
use crate::store::Stores;

pub fn run(stores: &Stores, args: &HistoryArgs, out: &mut dyn Write) -> Result<Exit> {
    let dir = stores.get(&args.name)?;
    let history::History { events, bad } = dir.history()?;
    for b in &bad {
        tracing::warn!(
            "{}:{}: passed over an unreadable line: {}",
            b.path.display(),
            b.line,
            b.reason
        );
    }
    let skip = args.limit.map_or(0, |n| events.len().saturating_sub(n));
    let events = &events[skip..];
    if args.json.json {
        super::emit_json(out, &events)?;
        return Ok(Exit::Ok);
    }
    let mut text = String::new();
    for e in events {
        let mut fields = match serde_json::to_value(&e.kind) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let kind = fields
            .remove("kind")
            .and_then(|k| k.as_str().map(str::to_owned))
            .unwrap_or_default();
        let details: Vec<String> = fields
            .into_iter()
            .filter_map(|(k, v)| match v {
                serde_json::Value::String(s) => Some(format!("{k}={}", quoted(&s))),
                // Numbers by name (the totals a reset dropped): `totals={cost_usd=1.11}`.
                serde_json::Value::Object(m) if !m.is_empty() && m.values().all(|v| v.as_f64().is_some()) => {
                    let shown: Vec<String> = m
                        .iter()
                        .map(|(n, v)| format!("{}={}", safe(n), number(v.as_f64().unwrap_or_default())))
                        .collect();
                    Some(format!("{k}={{{}}}", shown.join(" ")))
                }
                serde_json::Value::Null | serde_json::Value::Object(_) | serde_json::Value::Array(_) => None,
                other => Some(format!("{k}={other}")),
            })
            .collect();
        text += &format!("{}  {kind:<18} {}\n", local(e.at), details.join(" "));
    }
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}
