//! `status` and `list`: read without the lock (every write is an atomic
//! replace, so a reader never sees a torn state).

use std::io::Write;

use serde::Serialize;

use super::render::{ago, local, table};
use crate::error::{Error, Result};
use crate::lock::{self, Holder};
use crate::root::Root;
use crate::state::State;
use crate::store::{self, LoopDir};

/// A loop as `status --json` shows it: its state, its name and who holds
/// its lock right now.
#[derive(Serialize)]
pub struct LoopView<'a> {
    pub name: &'a str,
    #[serde(flatten)]
    pub state: &'a State,
    pub lock: Option<Holder>,
}

pub fn view<'a>(dir: &'a LoopDir, state: &'a State) -> LoopView<'a> {
    LoopView {
        name: dir.name().as_str(),
        state,
        lock: lock::read_holder(dir),
    }
}

pub fn one(root: &Root, name: &str, json: bool, out: &mut dyn Write) -> Result<u8> {
    let dir = LoopDir::open(root, name)?;
    let state = dir.read_state()?;
    let v = view(&dir, &state);
    if json {
        super::emit_json(out, &v)?;
    } else {
        super::emit(out, &detail(&v))?;
    }
    Ok(0)
}

pub fn all(root: &Root, json: bool, out: &mut dyn Write) -> Result<u8> {
    let dirs = store::list_loops(root)?;
    let mut loaded = Vec::with_capacity(dirs.len());
    let mut first_error: Option<Error> = None;
    for dir in &dirs {
        match dir.read_state() {
            Ok(state) => loaded.push((dir, Ok(state))),
            Err(e) => {
                loaded.push((dir, Err(e.to_string())));
                first_error.get_or_insert(e);
            }
        }
    }
    if json {
        let views: Vec<serde_json::Value> = loaded
            .iter()
            .map(|(dir, s)| match s {
                Ok(state) => serde_json::to_value(view(dir, state)).expect("views serialise"),
                Err(e) => serde_json::json!({ "name": dir.name().as_str(), "error": e }),
            })
            .collect();
        super::emit_json(out, &views)?;
    } else if loaded.is_empty() {
        super::emit(out, &format!("no loops in {}\n", root.path().display()))?;
    } else {
        let mut rows = vec![
            ["LOOP", "STATUS", "TICK", "LAST TICK", "APPROVALS", "LOCK"]
                .map(String::from)
                .to_vec(),
        ];
        for (dir, s) in &loaded {
            rows.push(match s {
                Ok(state) => summary_row(dir, state),
                Err(_) => vec![dir.name().to_string(), "unreadable".into()],
            });
        }
        super::emit(out, &table(&rows))?;
        if let Some(line) = crate::schedule::daemon_line(root) {
            super::emit(out, &format!("{line}\n"))?;
        }
    }
    // Every readable loop was shown; an unreadable one is the exit status.
    match first_error {
        Some(e) => Err(e),
        None => Ok(0),
    }
}

fn summary_row(dir: &LoopDir, s: &State) -> Vec<String> {
    let last = match &s.last_tick {
        Some(t) => format!("{} {}", t.outcome, ago(t.ended_at)),
        None => "never".into(),
    };
    let lock = lock::read_holder(dir).map_or_else(String::new, |h| h.describe());
    vec![
        dir.name().to_string(),
        s.status.to_string(),
        s.tick.to_string(),
        last,
        s.pending_approvals.len().to_string(),
        lock,
    ]
}

fn detail(v: &LoopView<'_>) -> String {
    let s = v.state;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |k: &str, val: String| rows.push(vec![k.to_owned(), val]);
    row("loop", v.name.to_owned());
    row(
        "status",
        match &s.status_reason {
            Some(r) => format!("{} ({r})", s.status),
            None => s.status.to_string(),
        },
    );
    row("ticks", format!("{} (state version {})", s.tick, s.version));
    match &s.last_tick {
        Some(t) => {
            let mut text = format!("#{} {} {}", t.number, t.outcome, ago(t.ended_at));
            if let Some(step) = &t.step {
                match step.exit_code {
                    Some(c) => text += &format!(", step exit {c}"),
                    None if step.timed_out => text += ", step timed out",
                    None => text += ", step killed",
                }
                text += &format!(" in {}ms", step.duration_ms);
            }
            if let Some(v) = &t.verifier {
                text += if v.success() {
                    ", verifier passed"
                } else {
                    ", verifier failed"
                };
            }
            row("last tick", text);
        }
        None => row("last tick", "never".into()),
    }
    row("failures", format!("{} in a row", s.consecutive_failures));
    if s.pending_approvals.is_empty() {
        row("approvals", "none pending".into());
    } else {
        for (i, a) in s.pending_approvals.iter().enumerate() {
            let mut text = format!("{} by {} {}", a.id, a.by, ago(a.at));
            if let Some(n) = &a.note {
                text += &format!(": {n}");
            }
            row(if i == 0 { "approvals" } else { "" }, text);
        }
    }
    if !s.totals.is_empty() {
        let totals: Vec<String> = s.totals.iter().map(|(k, v)| format!("{k}={v}")).collect();
        row("totals", totals.join(" "));
    }
    if let Some(w) = &s.worktree {
        row("worktree", format!("{} ({})", w.path.display(), w.branch));
    }
    if let Some(f) = &s.in_flight {
        row(
            "in flight",
            format!(
                "tick {} by pid {} on {} since {}",
                f.tick,
                f.pid,
                f.host,
                local(f.started_at)
            ),
        );
    }
    row(
        "lock",
        v.lock
            .as_ref()
            .map_or_else(|| "free".to_owned(), |h| format!("held by {}", h.describe())),
    );
    row("created", local(s.created_at));
    row(
        "updated",
        format!("{} ({})", local(s.updated_at), ago(s.updated_at)),
    );
    table(&rows)
}
