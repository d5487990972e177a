//! `resume`: a paused, halted or completed loop ticks again; with
//! `reset_budget`, its totals start over.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Answer, Ctx, Looked};
use crate::access::Action;
use crate::domain::{Decision, Phase};
use crate::error::Result;
use crate::gate::GateHost;
use crate::history::EventKind;
use crate::lock::Wait;
use crate::state::{State, Status};
use crate::store::LoopStore;
use crate::tick::after::Change;
use crate::tick::gates;

/// Resume loop `name`.
pub(crate) struct Resume {
    pub name: String,
    /// Its totals (what budgets count) start over.
    pub reset_budget: bool,
    /// How long to wait for the loop's lock.
    pub wait: Wait,
}

/// The loop, resumed: its view is the answer.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct Resumed {
    pub view: Looked,
    /// What it was before (`active`: it was active already).
    #[serde(skip)]
    pub from: Status,
    /// The totals that started over, as they were.
    #[serde(skip)]
    pub dropped: BTreeMap<String, f64>,
    /// The loop's own budgets whose window's spend started over, with what
    /// each had spent.
    #[serde(skip)]
    pub budgets_reset: BTreeMap<String, f64>,
}

pub(crate) fn resume(ctx: &Ctx<'_>, req: Resume, answer: Answer<'_, Resumed>) -> Result<Resumed> {
    let dir = ctx.allowed(&req.name, Action::Resume)?;
    let by = ctx.actor.user.clone();
    let mut from = Status::Active;
    let mut dropped = BTreeMap::new();
    let mut budgets_reset = BTreeMap::new();
    let members = if req.reset_budget {
        let config = dir.config()?;
        crate::budget::of_loop(&ctx.root.settings().budgets, dir.name().as_str(), &config)
    } else {
        Vec::new()
    };
    let state = ctx.update(&*dir, "resume", req.wait, |s| {
        let mut events = Vec::new();
        // Active already: nothing changes (not even the failure count) and
        // nothing is recorded, unless the totals are to start over.
        if s.status != Status::Active {
            from = s.resume();
            events.push(EventKind::Resumed { by: by.clone(), from });
        }
        if req.reset_budget && !s.totals.is_empty() {
            dropped = s.reset_totals();
            events.push(EventKind::TotalsReset {
                by: by.clone(),
                totals: dropped.clone(),
            });
        }
        // Under the loop's lock, as a tick takes the ledger's.
        if !members.is_empty() {
            budgets_reset = crate::budget::reset_own(
                crate::budget::Place::of(ctx.root.path(), dir.shared_ledger()),
                &members,
                dir.name().as_str(),
            )?;
            if !budgets_reset.is_empty() {
                events.push(EventKind::BudgetReset {
                    by: by.clone(),
                    budgets: budgets_reset.clone(),
                });
            }
        }
        Ok(events)
    })?;
    // Outside the lock: a schedule a halt or completion disabled runs again.
    ctx.follow(Change::Resumed(dir.name()));
    // A gate that would halt or complete it again, and what clears it.
    let warning = (from != Status::Active)
        .then(|| stops_again(ctx, &*dir, &state))
        .flatten();
    if let Some(warning) = &warning {
        tracing::warn!("{warning}");
    }
    let changed = from != Status::Active || !dropped.is_empty() || !budgets_reset.is_empty();
    let notice = changed.then(|| ctx.operated(&*dir, &state, "resume"));
    let resumed = Resumed {
        view: Looked { dir, state },
        from,
        dropped,
        budgets_reset,
    };
    let said = answer(&resumed);
    if let Some(notice) = notice {
        ctx.follow(Change::Operated(&*resumed.view.dir, Box::new(notice)));
    }
    said.map(|()| resumed)
}

/// What a resumed loop's gates would do to it at its next tick, evaluated
/// now on its resumed state: a warning when one would halt or complete it
/// again (a budget still spent, say), with what clears it.
fn stops_again(ctx: &Ctx<'_>, dir: &dyn LoopStore, state: &State) -> Option<String> {
    let config = dir.config().ok()?;
    if config.gates.is_empty() {
        return None;
    }
    let host = GateHost::new(Some(ctx.root.cache_dir())).ok()?;
    let name = dir.name().as_str();
    let policy = ctx.root.settings().gates.policy(&config.signing);
    let budgets = crate::budget::for_gate(ctx.root, dir.shared_ledger(), name, &config);
    let verdict = [Phase::BeforeStep, Phase::AfterStep]
        .into_iter()
        .find_map(|phase| {
            gates::evaluate_phase(&host, name, dir, (&config, &policy), state, phase, &budgets)
                .verdicts
                .into_iter()
                .find(|v| matches!(v.decision, Decision::Halt(_) | Decision::Complete(_)))
        })?;
    let when = match verdict.phase {
        Phase::BeforeStep => "at its next tick",
        Phase::AfterStep => "after its next step",
    };
    Some(format!(
        "loop {name:?} is active, but gate {} would {} it again {when}: {}; {}",
        verdict.gate,
        verdict.decision.name(),
        verdict.decision.reason(),
        crate::ops::views::status::clears(name, &verdict.gate)
    ))
}
