//! `gate replay`: evaluate a loop's recorded gate contexts again with another
//! gate (a new version, a stricter policy) and say where it would decide
//! differently: by default only the evaluations of the gate it would
//! replace (the recorded gate of the same name, or `--of`), each row's
//! transition, the reason-only changes, and the rows that follow a
//! differing halt or complete (counterfactual: the loop would have stopped
//! before them). Params are checked once, before any row. It exits 0 when
//! no decision differs and [`Exit::Differs`] when one does.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use super::render::table;
use crate::cli::ReplayArgs;
use crate::domain::{Context, Decision, Limits, Phase, Verdict};
use crate::error::{Error, Exit, Result};
use crate::gate::{self, Gate, GateHost};
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
    /// `recorded→replayed` when the decisions differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    transition: Option<String>,
    /// The same decision with another reason.
    reason_changed: bool,
    /// After an earlier row whose replayed halt or complete differs: the
    /// loop would have stopped before this tick.
    counterfactual: bool,
}

/// The rows' counts, as the last lines say them (and `--summary --json`).
#[derive(Default, Serialize)]
struct Summary {
    rows: usize,
    differ: usize,
    #[serde(rename = "reason_only")]
    reasons: usize,
    counterfactual: usize,
    transitions: BTreeMap<String, usize>,
}

/// One recorded evaluation: its tick, verdict and the context it saw.
type Recorded = (u64, Verdict, Box<Context>);

pub(super) fn run(root: &Root, req: &ReplayArgs, out: &mut dyn Write) -> Result<Exit> {
    let dir = crate::store::open(root, &req.name)?;
    let source = super::gate::parse_target(&req.gate);
    let host = GateHost::new(Some(root.cache_dir()))?;
    let gate = host.load(&source)?;
    if let Some(p) = &req.params {
        host.check_params(&gate, p)?;
    }
    let events = dir.history()?.events;
    let all: Vec<Recorded> = events
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Gate {
                tick,
                verdict,
                context,
                ..
            } => Some((tick, verdict, context)),
            _ => None,
        })
        .collect();
    let mut recorded = replaced(&req.name, req.of.as_deref(), &host, &gate, all)?;
    if let Some(n) = req.last {
        recorded.drain(..recorded.len().saturating_sub(n));
    }
    let mut rows = evaluate(&host, &gate, req.params.as_ref(), recorded);
    let summary = mark(&mut rows);
    if req.diff_only {
        rows.retain(|r| r.differs || r.reason_changed);
    }
    if req.summary {
        rows.clear();
    }
    if req.json.json && req.summary {
        super::emit_json(out, &summary)?;
    } else if req.json.json {
        super::emit_json(out, &rows)?;
    } else {
        super::emit(out, &render(&rows, &summary, &source.to_string()))?;
    }
    Ok(if summary.differ == 0 {
        Exit::Ok
    } else {
        Exit::Differs
    })
}

/// The recorded evaluations of the gate the replayed one would replace:
/// those of `--of` when given, else those of the gate of the same name (as
/// the gate says it, or a stock gate's name, or a file's stem). None of
/// that name is an error that lists the gates recorded.
fn replaced(
    name: &str,
    of: Option<&str>,
    host: &GateHost,
    gate: &Gate,
    all: Vec<Recorded>,
) -> Result<Vec<Recorded>> {
    if let Some(of) = of {
        return Ok(all.into_iter().filter(|(_, v, _)| v.gate == of).collect());
    }
    let wanted = host.describe(gate).ok().map(|i| i.name);
    let label = Verdict {
        gate: gate.label().to_owned(),
        version: None,
        name: wanted,
        sha256: None,
        phase: Phase::BeforeStep,
        decision: Decision::Proceed,
        micros: 0,
        error: None,
        logs: Vec::new(),
    };
    let wanted = label.pairing_name();
    if all.is_empty() || all.iter().any(|(_, v, _)| v.pairing_name() == wanted) {
        return Ok(all
            .into_iter()
            .filter(|(_, v, _)| v.pairing_name() == wanted)
            .collect());
    }
    let mut gates: Vec<&str> = all.iter().map(|(_, v, _)| v.gate.as_str()).collect();
    gates.sort_unstable();
    gates.dedup();
    Err(Error::Refused {
        name: name.to_owned(),
        message: format!(
            "no recorded gate is named {wanted:?}, the gate replayed; name the one it replaces with --of (recorded: {})",
            gates.join(", ")
        ),
    })
}

/// Each recorded evaluation evaluated again with `gate` (and `params`
/// instead of the recorded ones, when given).
fn evaluate(
    host: &GateHost,
    gate: &Gate,
    params: Option<&serde_json::Value>,
    recorded: Vec<Recorded>,
) -> Vec<Row> {
    let mut rows = Vec::with_capacity(recorded.len());
    for (tick, verdict, mut context) in recorded {
        if let Some(p) = params {
            context.params = p.clone();
        }
        let (replayed, error) = match host.evaluate(gate, &context, &Limits::default()) {
            Ok(e) => (e.decision, None),
            Err(e) => (gate::decide_on_error(Default::default(), &e), Some(e.to_string())),
        };
        let differs = replayed.name() != verdict.decision.name();
        rows.push(Row {
            tick,
            phase: verdict.phase,
            transition: differs.then(|| format!("{}→{}", verdict.decision.name(), replayed.name())),
            reason_changed: !differs && replayed.reason() != verdict.decision.reason(),
            counterfactual: false,
            differs,
            gate: verdict.gate,
            recorded: verdict.decision,
            replayed,
            error,
        });
    }
    rows
}

/// Marks the rows after the first differing halt or complete as
/// counterfactual, and counts.
fn mark(rows: &mut [Row]) -> Summary {
    let mut summary = Summary {
        rows: rows.len(),
        ..Summary::default()
    };
    let mut stopped_at = None;
    for r in rows.iter_mut() {
        r.counterfactual = stopped_at.is_some_and(|t| r.tick > t);
        let stops = matches!(r.replayed, Decision::Halt(_) | Decision::Complete(_));
        if r.differs && stops && stopped_at.is_none() {
            stopped_at = Some(r.tick);
        }
        summary.differ += usize::from(r.differs);
        summary.reasons += usize::from(r.reason_changed);
        summary.counterfactual += usize::from(r.counterfactual);
        if let Some(t) = &r.transition {
            *summary.transitions.entry(t.clone()).or_default() += 1;
        }
    }
    summary
}

fn render(rows: &[Row], summary: &Summary, with: &str) -> String {
    let mut cells = vec![
        ["TICK", "PHASE", "RECORDED GATE", "RECORDED", "REPLAYED", ""]
            .map(String::from)
            .to_vec(),
    ];
    for r in rows {
        let mark = match (r.differs, r.reason_changed, r.counterfactual) {
            (true, _, false) => "differs",
            (true, _, true) => "differs (counterfactual)",
            (false, true, _) => "reason changed",
            (false, false, true) => "(counterfactual)",
            (false, false, false) => "",
        };
        cells.push(vec![
            r.tick.to_string(),
            r.phase.to_string(),
            r.gate.clone(),
            r.recorded.to_string(),
            r.replayed.to_string(),
            mark.to_owned(),
        ]);
    }
    let mut text = if rows.is_empty() && summary.rows > 0 {
        String::new()
    } else if rows.is_empty() {
        "no recorded gate evaluations to show\n".to_owned()
    } else {
        table(&cells)
    };
    for (transition, n) in &summary.transitions {
        text += &format!("{transition} ×{n}\n");
    }
    text += &format!("reason-only changes: {}\n", summary.reasons);
    if summary.counterfactual > 0 {
        text += &format!(
            "counterfactual (after a differing halt or complete): {}\n",
            summary.counterfactual
        );
    }
    text += &format!(
        "{} of {} decisions would differ with {with}\n",
        summary.differ, summary.rows
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tick: u64, recorded: Decision, replayed: Decision) -> Row {
        let differs = recorded.name() != replayed.name();
        Row {
            tick,
            phase: Phase::BeforeStep,
            gate: "stock:budget".into(),
            transition: differs.then(|| format!("{}→{}", recorded.name(), replayed.name())),
            reason_changed: !differs && recorded.reason() != replayed.reason(),
            counterfactual: false,
            differs,
            recorded,
            replayed,
            error: None,
        }
    }

    #[test]
    fn reasons_alone_are_counted_and_rows_after_a_differing_stop_are_counterfactual() {
        let halt = |r: &str| Decision::Halt(r.into());
        let mut rows = [
            row(1, halt("a"), halt("b")),
            row(2, Decision::Proceed, Decision::AwaitApproval("ask".into())),
            row(3, Decision::Proceed, halt("spent")),
            row(4, Decision::Proceed, Decision::Proceed),
        ];
        let s = mark(&mut rows);
        assert_eq!((s.rows, s.differ, s.reasons, s.counterfactual), (4, 2, 1, 1));
        assert_eq!(
            s.transitions.into_iter().collect::<Vec<_>>(),
            [
                ("proceed→await-approval".to_owned(), 1),
                ("proceed→halt".to_owned(), 1)
            ]
        );
        let marked: Vec<bool> = rows.iter().map(|r| r.counterfactual).collect();
        assert_eq!(
            marked,
            [false, false, false, true],
            "a differing halt at 1 would be a reason change"
        );
    }
}
