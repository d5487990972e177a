//! `check-gate`: evaluate the before-step gates as the next tick would,
//! under the loop's lock; `--apply` records the combined decision without
//! running the step.

use std::io::Write;

use serde::Serialize;

use super::render::safe;
use crate::cli::CheckGateArgs;
use crate::domain::{Decision, Phase, Verdict};
use crate::error::{Exit, Result};
use crate::gate::GateHost;
use crate::history::EventKind;
use crate::lock::Holder;
use crate::ops::Ctx;
use crate::root::Root;
use crate::state::{Moment, Status};
use crate::store::Durability;
use crate::store::Stores;
use crate::tick::gates::{self, PhaseResult};

#[derive(Serialize)]
struct Report {
    #[serde(rename = "loop")]
    loop_name: String,
    status: Status,
    decisions: Vec<Verdict>,
    #[serde(flatten)]
    combined: Decision,
    applied: bool,
}

pub(super) fn run(root: &Root, args: &CheckGateArgs, out: &mut dyn Write) -> Result<Exit> {
    let t = &args.target;
    let stores = Stores::open(root)?;
    let dir = stores.get(&t.name)?;
    let ctx = Ctx::own(root, &stores);
    if args.apply {
        ctx.allowed_on(dir.as_ref(), crate::access::Action::CheckGateApply)?;
    }
    let by = ctx.actor.user.clone();
    let config = dir.config()?;
    let host = match config.gates.is_empty() {
        true => None,
        false => Some(GateHost::new(Some(root.cache_dir()))?),
    };
    let report = {
        let mut session = dir.lock(Holder::me("check-gate"), t.wait.wait())?;
        let mut state = session.load(stores.me())?.state;
        let result = match &host {
            Some(h) => gates::evaluate_phase(
                h,
                dir.name().as_str(),
                dir.as_ref(),
                (&config, &root.settings().gates.policy(&config.signing)),
                &state,
                Phase::BeforeStep,
                &crate::budget::for_gate(root, dir.shared_ledger(), dir.name().as_str(), &config),
            ),
            None => PhaseResult::empty(),
        };
        if args.apply {
            let events = applied(&result, &mut state, &by);
            session.commit(&ctx.actor, &mut state, events, Durability::Full)?;
        }
        Report {
            loop_name: dir.name().to_string(),
            status: state.status,
            decisions: result.verdicts,
            combined: result.combined,
            applied: args.apply,
        }
    };
    if args.apply && matches!(report.combined, Decision::Halt(_) | Decision::Complete(_)) {
        crate::tick::after::follow(root, crate::tick::after::Change::Stopped(dir.name()));
    }
    if t.json.json {
        super::emit_json(out, &report)?;
    } else {
        super::emit(out, &human(&report))?;
    }
    // Recording a halt halts the loop, as a tick's would.
    Ok(match (args.apply, &report.combined) {
        (true, Decision::Halt(_)) => Exit::Halted,
        _ => Exit::Ok,
    })
}

/// Records the combined decision as a tick would: the gate events, the
/// await it opens or the approvals it ends, and the check-gate event.
fn applied(result: &PhaseResult, state: &mut crate::state::State, by: &str) -> Vec<EventKind> {
    state.apply(&result.combined, Moment::Recorded);
    let mut events = gates::events(result, state.tick + 1);
    let head = state
        .worktree
        .as_ref()
        .and_then(|w| crate::worktree::head(&w.path).ok().flatten());
    let asked = || {
        result
            .verdicts
            .iter()
            .filter(|v| matches!(v.decision, Decision::AwaitApproval(_)))
            .map(|v| crate::state::Asked {
                gate: v.gate.clone(),
                version: v.version.clone(),
                reason: v.decision.reason().to_owned(),
            })
            .collect()
    };
    let settled = state.settle_await(
        state.tick + 1,
        asked,
        crate::state::At::head(head),
        crate::clock::now(),
    );
    if let Some(opened) = settled.opened {
        events.push(EventKind::Awaiting { awaiting: opened });
    }
    if let Some((closed, left)) = settled.closed
        && !left.is_empty()
    {
        events.push(EventKind::ApprovalsDropped {
            await_id: Some(closed.id),
            ids: left.iter().map(|a| a.id.clone()).collect(),
            by: left.into_iter().map(|a| a.by).collect(),
            why: crate::history::Dropped::Ended,
            head: None,
            snapshot: None,
            dirty: Vec::new(),
        });
    }
    events.push(EventKind::CheckGate {
        by: by.to_owned(),
        decision: result.combined.clone(),
    });
    events
}

fn human(r: &Report) -> String {
    let mut text = String::new();
    if r.decisions.is_empty() {
        text += "no before-step gates\n";
    }
    for v in &r.decisions {
        text += &format!(
            "{:<28} {:<15} {}",
            safe(&v.gate),
            v.decision.name(),
            safe(v.decision.reason())
        );
        if let Some(e) = &v.error {
            text += &format!(" (gate error: {})", safe(e));
        }
        text += &format!("  [{}µs]\n", v.micros);
    }
    let verb = if r.applied {
        "recorded"
    } else {
        "the next tick would"
    };
    text += &format!("{verb}: {}\n", safe(&r.combined.to_string()));
    if !r.status.is_runnable() {
        text += &format!("note: the loop is {}; a tick would do nothing\n", r.status);
    }
    text
}
