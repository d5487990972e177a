//! Shadow gates (`mode = "shadow"`): evaluated in a phase where live gates
//! run, with the same state and time, each under its own limits, and
//! recorded beside the live verdict it is compared with. A shadow's
//! decision never joins the phase's, its error never applies its
//! `on_error` to the loop, and a shadow that times out is recorded, not
//! tried again.

use jiff::Timestamp;

use super::gates::{Said, context, evaluate_gate};
use crate::config::LoopConfig;
use crate::domain::{Decision, Mode, Phase, ShadowVerdict, Verdict};
use crate::gate::GateHost;
use crate::state::State;

/// Where and when a phase's gates are evaluated.
pub(crate) struct At<'a> {
    pub name: &'a str,
    /// The loop's store, whose history a gate may ask to see.
    pub store: &'a dyn crate::store::LoopStore,
    pub state: &'a State,
    pub phase: Phase,
    pub now: Timestamp,
    /// The signatures a gate needs to be loaded, shadow or live.
    pub policy: &'a crate::gate::trust::Policy,
    /// The spend budgets the loop belongs to, as live gates see them.
    pub budgets: &'a [crate::domain::GateBudget],
}

/// The shadow gates of `at.phase`, each beside the live verdict it is
/// recorded with (one list for each of `live`). None is evaluated in a
/// phase no live gate runs in.
pub(crate) fn evaluate(
    host: &GateHost,
    at: &At<'_>,
    config: &LoopConfig,
    live: &[Verdict],
) -> Vec<Vec<ShadowVerdict>> {
    let mut beside = vec![Vec::new(); live.len()];
    if live.is_empty() {
        return beside;
    }
    let shadows = config
        .gates
        .iter()
        .filter(|g| g.mode == Mode::Shadow && g.phases.contains(&at.phase));
    for g in shadows {
        let mut ctx = context(at.name, at.state, g, at.phase, at.now);
        ctx.budgets = at.budgets.to_vec();
        // A shadow's signed build raises no floor: it did not decide.
        let (verdict, _) = evaluate_gate(
            host,
            at.name,
            at.store,
            g,
            &mut ctx,
            Said::Debug,
            (at.policy, at.state),
        );
        let (index, agrees) = compare(live, &verdict);
        beside[index].push(ShadowVerdict { verdict, agrees });
    }
    beside
}

/// Which live verdict a shadow's is recorded with, and whether they agree:
/// the live gate of the same name (the one it would replace), decision
/// against decision; else the phase's last, the phase's combined decision
/// against the one it would be with the shadow live too.
pub(crate) fn compare(live: &[Verdict], shadow: &Verdict) -> (usize, bool) {
    if let Some(i) = live
        .iter()
        .position(|l| l.pairing_name() == shadow.pairing_name())
    {
        return (i, same(&live[i].decision, &shadow.decision));
    }
    let combined = Decision::combine(live.iter().map(|v| &v.decision));
    let with = Decision::combine([&combined, &shadow.decision]);
    (live.len() - 1, same(&combined, &with))
}

/// The shadow gates of `result` that disagreed and are not in `disagreed`
/// yet (the ones that have since they were added or promoted): added
/// there, and returned, so their first disagreement is notified.
pub(crate) fn first_disagreed(
    result: &super::gates::PhaseResult,
    disagreed: &mut Vec<String>,
) -> Vec<String> {
    let mut first = Vec::new();
    for s in result.shadows.iter().flatten().filter(|s| !s.agrees) {
        if !disagreed.contains(&s.verdict.gate) {
            disagreed.push(s.verdict.gate.clone());
            first.push(s.verdict.gate.clone());
        }
    }
    first
}

/// Two decisions agree when they are the same decision; their reasons may
/// differ.
fn same(a: &Decision, b: &Decision) -> bool {
    a.name() == b.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(gate: &str, name: Option<&str>, decision: Decision) -> Verdict {
        Verdict {
            gate: gate.into(),
            version: None,
            name: name.map(str::to_owned),
            sha256: None,
            phase: Phase::BeforeStep,
            decision,
            micros: 1,
            error: None,
            logs: Vec::new(),
        }
    }

    #[test]
    fn a_shadow_is_compared_with_the_live_gate_of_its_name_else_the_phase() {
        let live = [
            verdict(
                "stock:approve-every",
                None,
                Decision::AwaitApproval("every 2".into()),
            ),
            verdict("gates/budget.wasm", Some("budget"), Decision::Proceed),
        ];
        let halts = verdict(
            "gates/budget-2.wasm",
            Some("budget"),
            Decision::Halt("spent".into()),
        );
        assert_eq!(
            compare(&live, &halts),
            (1, false),
            "paired by name, halt is not proceed"
        );
        let proceeds = verdict("gates/budget-2.wasm", Some("budget"), Decision::Proceed);
        assert_eq!(compare(&live, &proceeds), (1, true));
        let new = verdict("stock:max-ticks", None, Decision::Skip("later".into()));
        assert_eq!(
            compare(&live, &new),
            (1, true),
            "a new gate's skip changes nothing under an await"
        );
        let new = verdict("stock:max-ticks", None, Decision::Halt("done".into()));
        assert_eq!(compare(&live, &new), (1, false));
        let same_stock = verdict(
            "stock:approve-every",
            None,
            Decision::AwaitApproval("every 3".into()),
        );
        assert_eq!(
            compare(&live, &same_stock),
            (0, true),
            "a reason alone is agreement"
        );
    }
}
