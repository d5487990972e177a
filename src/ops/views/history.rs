//! The view of a loop's history (`history`): its events, oldest first,
//! those a [`Query`] admits (from a time on, of some kinds, the last N),
//! each also as a line of its kind and the fields it says (what the
//! terminal and the console's page show).

use jiff::Timestamp;
use serde::Serialize;

use crate::error::Result;
use crate::history::{self, Event};
use crate::ops::Ctx;

/// A loop's events, oldest first: `history --json` prints them as they
/// are recorded.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct History {
    pub events: Vec<Event>,
}

/// Which events a history shows: those from `since` on, of `kinds` (every
/// kind when empty), the last `limit` of them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Query {
    pub limit: Option<usize>,
    pub since: Option<Timestamp>,
    pub kinds: Vec<String>,
}

impl Query {
    /// Whether event `e` is one of those asked for (`limit` aside).
    pub(crate) fn admits(&self, e: &Event) -> bool {
        self.since.is_none_or(|t| e.at >= t)
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == e.kind.name()))
    }
}

/// `history NAME`: its events, the last `limit` of them when one is given.
pub(crate) fn history(ctx: &Ctx, name: &str, limit: Option<usize>) -> Result<History> {
    query(
        ctx,
        name,
        &Query {
            limit,
            ..Query::default()
        },
    )
}

/// `history NAME` with `q`: the events it admits, the last `q.limit` of
/// them (read from the end, holding no more than they are). A line that
/// cannot be read is passed over, with a warning naming it.
pub(crate) fn query(ctx: &Ctx, name: &str, q: &Query) -> Result<History> {
    let dir = ctx.stores.get(name)?;
    super::may_view(ctx, dir.as_ref())?;
    let history::History { mut events, bad } = match q.limit {
        Some(n) => dir.history_last(n, &|e| q.admits(e))?,
        None => dir.history()?,
    };
    for b in &bad {
        tracing::warn!(
            "{}:{}: passed over an unreadable line: {}",
            b.path.display(),
            b.line,
            b.reason
        );
    }
    events.retain(|e| q.admits(e));
    let skip = q.limit.map_or(0, |n| events.len().saturating_sub(n));
    events.drain(..skip);
    Ok(History { events })
}

/// An event in short: when, its kind, the tick it is of, and what else it
/// says, field by field (a text, a number, or numbers by name).
pub(crate) struct Line {
    pub at: Timestamp,
    pub kind: String,
    pub tick: Option<u64>,
    pub fields: Vec<(String, Field)>,
}

/// One field of an event's [`Line`].
pub(crate) enum Field {
    Text(String),
    Number(serde_json::Number),
    Bool(bool),
    /// Numbers by name (the totals a reset dropped).
    Numbers(Vec<(String, f64)>),
}

impl Line {
    /// The line of event `e`: the fields of its kind that are a text, a
    /// number or numbers by name (objects and lists are left out).
    pub(crate) fn of(e: &Event) -> Line {
        use serde_json::Value;
        let mut fields = match serde_json::to_value(&e.kind) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let kind = match fields.remove("kind") {
            Some(Value::String(k)) => k,
            _ => String::new(),
        };
        let tick = fields.get("tick").and_then(Value::as_u64);
        let fields = fields
            .into_iter()
            .filter_map(|(k, v)| {
                let field = match v {
                    Value::String(s) => Field::Text(s),
                    Value::Number(n) => Field::Number(n),
                    Value::Bool(b) => Field::Bool(b),
                    Value::Object(m) if !m.is_empty() && m.values().all(|v| v.as_f64().is_some()) => {
                        Field::Numbers(
                            m.into_iter()
                                .map(|(n, v)| (n, v.as_f64().unwrap_or_default()))
                                .collect(),
                        )
                    }
                    Value::Null | Value::Object(_) | Value::Array(_) => return None,
                };
                Some((k, field))
            })
            .collect();
        Line {
            at: e.at,
            kind,
            tick,
            fields,
        }
    }
}
