//! `gate replay`: evaluate a loop's recorded gate contexts again with another
//! gate (a new version, a stricter policy) and show where it would decide
//! differently.

use std::io::Write;

use serde::Serialize;

use super::render::table;
use crate::cli::ReplayArgs;
use crate::domain::{Decision, Limits, Phase};
use crate::error::{Exit, Result};
use crate::gate::{self, GateHost};
use crate::history::EventKind;
use crate::root::Root;

#[derive(Serialize)]
struct Row {
    tick: u64,
    phase: Phase,
    gate: String,
    recorded: Decision,
    replayed: Decision,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    differs: bool,
}

pub fn run(root: &Root, req: &ReplayArgs, out: &mut dyn Write) -> Result<Exit> {
    let dir = crate::store::open(root, &req.name)?;
    let source = super::gate::parse_target(&req.gate);
    let events = dir.history()?.events;
    let mut recorded: Vec<_> = events
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Gate {
                tick,
                verdict,
                context,
            } => Some((tick, verdict, context)),
            _ => None,
        })
        .filter(|(_, v, _)| req.of.as_ref().is_none_or(|of| &v.gate == of))
        .collect();
    if let Some(n) = req.last {
        recorded.drain(..recorded.len().saturating_sub(n));
    }
    let host = GateHost::new(Some(root.cache_dir()))?;
    let gate = host.load(&source)?;
    let mut rows = Vec::with_capacity(recorded.len());
    for (tick, verdict, mut context) in recorded {
        if let Some(p) = &req.params {
            context.params = p.clone();
        }
        let (replayed, error) = match host.evaluate(&gate, &context, &Limits::default()) {
            Ok(e) => (e.decision, None),
            Err(e) => (gate::decide_on_error(Default::default(), &e), Some(e.to_string())),
        };
        rows.push(Row {
            tick,
            phase: verdict.phase,
            differs: replayed.name() != verdict.decision.name(),
            gate: verdict.gate,
            recorded: verdict.decision,
            replayed,
            error,
        });
    }
    if req.json.json {
        super::emit_json(out, &rows)?;
        return Ok(Exit::Ok);
    }
    let differ = rows.iter().filter(|r| r.differs).count();
    let mut cells = vec![
        ["TICK", "PHASE", "RECORDED GATE", "RECORDED", "REPLAYED", ""]
            .map(String::from)
            .to_vec(),
    ];
    for r in &rows {
        cells.push(vec![
            r.tick.to_string(),
            r.phase.to_string(),
            r.gate.clone(),
            r.recorded.to_string(),
            r.replayed.to_string(),
            if r.differs {
                "differs".into()
            } else {
                String::new()
            },
        ]);
    }
    let mut text = if rows.is_empty() {
        "no recorded gate evaluations to replay\n".to_owned()
    } else {
        table(&cells)
    };
    text += &format!(
        "{differ} of {} decisions would differ with {}\n",
        rows.len(),
        source
    );
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}
