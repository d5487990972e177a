//! Evaluating one phase's gates: the context each gate sees, its decision
//! (or its error turned into a decision by its `on_error` policy), and the
//! record kept in history so `gate replay` can evaluate it again, naming
//! the build that decided (name, version, sha256); what a gate logs is
//! said once, and again when it changes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use jiff::Timestamp;
use serde::Serialize;

use crate::config::{GateConfig, LoopConfig};
use crate::domain::{
    Asker, Commits, Context, Decision, GateBudget, GateHistory, Mode, PastRun, PendingAwait, Phase,
    RunResult, ShadowVerdict, Verdict,
};
use crate::gate::trust::{self, Policy, Signed};
use crate::gate::{self, GateError, GateErrorKind, GateHost};
use crate::history::EventKind;
use crate::state::{LastTick, State};
use crate::store::LoopStore;

/// A phase's verdicts, their combination, and the contexts they saw.
pub(crate) struct PhaseResult {
    pub verdicts: Vec<Verdict>,
    pub contexts: Vec<Context>,
    /// Beside each live verdict, the shadow gates recorded with it.
    pub shadows: Vec<Vec<ShadowVerdict>>,
    pub combined: Decision,
    /// The signed gates that passed their signatures and rollback floor:
    /// a tick raises each one's floor to its version.
    pub signed: Vec<Signed>,
}

/// The result of a run, as gates see it.
pub(crate) fn run_result(last: &LastTick) -> Option<RunResult> {
    let step = last.step.as_ref()?;
    Some(RunResult {
        tick: last.number,
        exit_code: step.exit_code,
        duration_ms: step.duration_ms,
        timed_out: step.timed_out,
        verifier_passed: last
            .verifier
            .as_ref()
            .map(super::super::state::ProcessOutcome::success),
        worktree_changed: last.worktree_changed,
        ended_at: last.ended_at,
    })
}

/// What a gate of `phase` sees of `state`.
pub(crate) fn context(name: &str, state: &State, gate: &GateConfig, phase: Phase, now: Timestamp) -> Context {
    Context {
        loop_name: name.to_owned(),
        phase,
        tick: state.tick,
        now,
        last_run: state.last_tick.as_ref().and_then(run_result),
        consecutive_failures: state.consecutive_failures,
        unchanged_ticks: state.unchanged_ticks,
        pending_approvals: state.pending_approvals.clone(),
        params: gate.params.clone(),
        state: to_json(state),
        metrics: to_json(&state.metrics),
        totals: to_json(&state.totals),
        commits: commits(state),
        pending_await: pending_await(state),
        // Filled for a gate that asks, once it is loaded.
        history: GateHistory::default(),
        budgets: Vec::new(),
    }
}

/// The worktree's branch and HEAD around the last tick's step, as state
/// records them.
fn commits(state: &State) -> Option<Commits> {
    let head = state.last_tick.as_ref()?.head.as_ref()?;
    Some(Commits {
        branch: head.branch.clone(),
        head_before: head.before.clone(),
        head_after: head.after.clone(),
    })
}

/// The await pending now, with the approvals given for it.
fn pending_await(state: &State) -> Option<PendingAwait> {
    let a = state.awaiting.as_ref()?;
    Some(PendingAwait {
        id: a.id.clone(),
        tick: a.tick,
        asked: a
            .gates
            .iter()
            .map(|g| Asker {
                gate: g.gate.clone(),
                version: g.version.clone(),
                reason: g.reason.clone(),
            })
            .collect(),
        since: a.since,
        head: a.head.clone(),
        approvals: state
            .pending_approvals
            .iter()
            .filter(|p| p.await_id.as_deref() == Some(a.id.as_str()))
            .cloned()
            .collect(),
    })
}

/// The lines each loop's gate logged at its last evaluation in this
/// process, so a daemon firing an awaiting loop again and again says its
/// gates' `cost_usd 2.9 of 3 spent` once, and again only when it changes.
/// One entry a loop's gate: it grows with the loops, not with the ticks.
static LOGGED: Mutex<Option<Logged>> = Mutex::new(None);

/// Each loop's gate (loop name, gate label): the lines it logged last.
type Logged = HashMap<(String, String), Vec<String>>;

/// Whether `lines`, which gate `label` of loop `name` logged now, differ
/// from what it logged last (kept for the next time).
fn said_anew(name: &str, label: &str, lines: &[&str]) -> bool {
    let mut logged = LOGGED.lock().unwrap_or_else(PoisonError::into_inner);
    let last = logged
        .get_or_insert_with(HashMap::new)
        .entry((name.to_owned(), label.to_owned()))
        .or_default();
    if !lines.is_empty() && last.len() == lines.len() && last.iter().zip(lines).all(|(a, b)| a == b) {
        return false;
    }
    *last = lines.iter().map(|l| (*l).to_owned()).collect();
    true
}

fn to_json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("state serialises")
}

/// Evaluates the gates of `config` that run in `phase`, in config order.
/// A live gate that fails (it cannot load, traps, times out, refuses)
/// decides by its `on_error` policy; the error is kept in its verdict. The
/// shadow gates of the phase are evaluated after them, when any live gate
/// runs in it, and recorded beside them (`super::shadow`).
/// A gate the trust `policy` refuses (unsigned, badly signed, rolled
/// back) halts, whatever its `on_error`. Each gate sees `budgets`, the
/// spend budgets the loop belongs to as they stand now.
pub(crate) fn evaluate_phase(
    host: &GateHost,
    name: &str,
    store: &dyn LoopStore,
    (config, policy): (&LoopConfig, &Policy),
    state: &State,
    phase: Phase,
    budgets: &[GateBudget],
) -> PhaseResult {
    let now = crate::clock::now();
    let mut verdicts = Vec::new();
    let mut contexts = Vec::new();
    let live = config
        .gates
        .iter()
        .filter(|g| g.mode == Mode::Enforce && g.phases.contains(&phase));
    let mut signed = Vec::new();
    for g in live {
        let mut ctx = context(name, state, g, phase, now);
        ctx.budgets = budgets.to_vec();
        let (verdict, s) = evaluate_gate(host, name, store, g, &mut ctx, Said::Info, (policy, state));
        signed.extend(s);
        verdicts.push(verdict);
        contexts.push(ctx);
    }
    let combined = Decision::combine(verdicts.iter().map(|v| &v.decision));
    let at = super::shadow::At {
        name,
        store,
        state,
        phase,
        now,
        policy,
        budgets,
    };
    let shadows = super::shadow::evaluate(host, &at, config, &verdicts);
    PhaseResult {
        verdicts,
        contexts,
        shadows,
        combined,
        signed,
    }
}

/// How loudly a gate's logs are said: a live gate's at `info` (when they
/// change), a shadow gate's at `debug`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Said {
    Info,
    Debug,
}

/// One gate's verdict against `ctx`: its decision, or its error turned into
/// one by its `on_error` policy, with the name, version and sha256 of the
/// build that decided.
pub(crate) fn evaluate_gate(
    host: &GateHost,
    name: &str,
    store: &dyn LoopStore,
    g: &GateConfig,
    ctx: &mut Context,
    said: Said,
    (policy, floors): (&Policy, &State),
) -> (Verdict, Option<Signed>) {
    let source = g.resolved_source(store.base_dir());
    let label = g.source.to_string();
    let started = std::time::Instant::now();
    let mut build = Build::default();
    let mut took = None;
    let mut signed = None;
    // Errors name the gate as loop.toml writes it, not its resolved path.
    let result = load_trusted(host, &source, policy, floors)
        .and_then(|(gate, s)| {
            signed = s;
            ctx.history = gate_history(host, &gate, store, floors, ctx)?;
            let eval = host
                .evaluate(&gate, ctx, &g.limits)
                .map_err(|e| explain_refusal(host, &gate, g, e));
            took = Some(started.elapsed());
            build = Build::of(host, &gate);
            eval
        })
        .map_err(|e| e.labelled(label.clone()));
    let took = took.unwrap_or_else(|| started.elapsed());
    let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    let (decision, error, logs) = said.outcome(name, &label, g, result);
    let verdict = Verdict {
        gate: crate::bounds::text(label),
        version: build.version,
        name: build.name,
        sha256: build.sha256,
        phase: ctx.phase,
        decision: bounded(decision),
        micros,
        error: crate::bounds::opt_text(error),
        logs,
    };
    (verdict, signed)
}

impl Said {
    /// A gate's evaluation as a verdict's decision, error and kept logs:
    /// its logs said (a live gate's at `info` when they change), its error
    /// turned into a decision by its `on_error` policy.
    fn outcome(
        self,
        name: &str,
        label: &str,
        g: &GateConfig,
        result: Result<gate::Evaluation, GateError>,
    ) -> (Decision, Option<String>, Vec<String>) {
        match result {
            Ok(eval) => {
                let lines: Vec<&str> = eval.logs.iter().map(|l| l.message.as_str()).collect();
                let new = self == Said::Info && said_anew(name, label, &lines);
                for line in lines {
                    if new {
                        tracing::info!("loop {name:?}: gate {label}: {line}");
                    } else {
                        tracing::debug!("loop {name:?}: gate {label}: {line}");
                    }
                }
                (eval.decision, None, gate::kept_logs(&eval.logs))
            }
            Err(err) => {
                // The tick reports it (and records it); the daemon logs it.
                if self == Said::Info {
                    tracing::info!("loop {name:?}: {err}");
                } else {
                    tracing::debug!("loop {name:?}: shadow {err}");
                }
                let logs = gate::kept_logs(err.logs());
                (
                    gate::decide_on_error(g.on_error, &err),
                    Some(err.to_string()),
                    logs,
                )
            }
        }
    }
}

/// What of the loop's runs `gate` asks to see in its `describe` (gates of
/// 0.3.0 on), at the context's time and phase: after the step, this
/// tick's run is the newest.
fn gate_history(
    host: &GateHost,
    gate: &gate::Gate,
    store: &dyn LoopStore,
    state: &State,
    ctx: &Context,
) -> Result<GateHistory, GateError> {
    if matches!(gate.wit_version(), "0.1.0" | "0.2.0") {
        return Ok(GateHistory::default());
    }
    let request = host.describe(gate)?.history;
    if request.is_empty() {
        return Ok(GateHistory::default());
    }
    let current = match ctx.phase {
        Phase::AfterStep => state
            .last_tick
            .as_ref()
            .filter(|t| t.number == state.tick)
            .and_then(|t| {
                let run = run_result(t)?;
                Some(PastRun {
                    tick: run.tick,
                    ended_at_ms: u64::try_from(run.ended_at.as_millisecond()).unwrap_or(0),
                    ok: t.step.as_ref().is_some_and(crate::state::ProcessOutcome::success)
                        && run.verifier_passed != Some(false),
                    metrics: state.metrics.clone(),
                })
            }),
        Phase::BeforeStep => None,
    };
    let committed = state.tick - u64::from(current.is_some());
    store
        .gate_history(committed, &request, ctx.now, current.as_ref())
        .map_err(|e| {
            GateError::new(
                gate.label(),
                GateErrorKind::Host {
                    message: format!(
                        "cannot give the history it asks for: {}",
                        crate::error::with_causes(&e)
                    ),
                },
            )
        })
}

/// Which build of a gate decided: the name and version it says (asked
/// once per process and component), and its component's sha256.
#[derive(Default)]
struct Build {
    name: Option<String>,
    version: Option<String>,
    sha256: Option<String>,
}

impl Build {
    fn of(host: &GateHost, gate: &gate::Gate) -> Build {
        let info = host.describe(gate).ok();
        Build {
            name: info.as_ref().map(|i| crate::bounds::name(i.name.clone())),
            version: info.map(|i| crate::bounds::name(i.version)),
            sha256: Some(gate.sha256().to_owned()),
        }
    }
}

/// Loads a gate and, when the policy requires signatures, checks them and
/// that the build is not older than the highest signed one the loop ran.
fn load_trusted(
    host: &GateHost,
    source: &crate::domain::GateSource,
    policy: &Policy,
    state: &State,
) -> Result<(gate::Gate, Option<Signed>), GateError> {
    let gate = host.load(source)?;
    let Some(signed) = host.verify(&gate, source, policy)? else {
        return Ok((gate, None));
    };
    let highest = state.signed_versions.get(&signed.name).map(String::as_str);
    trust::check_floor(&signed, highest)
        .map_err(|refusal| GateError::new(gate.label(), GateErrorKind::Untrusted { refusal }))?;
    Ok((gate, Some(signed)))
}

/// Raises each signed gate's floor in `state` to the version that ran.
pub(crate) fn raise_floors(state: &mut State, signed: &[Signed]) {
    for s in signed {
        let highest = state.signed_versions.get(&s.name).map(String::as_str);
        if trust::raises(&s.version, highest) {
            state.signed_versions.insert(s.name.clone(), s.version.clone());
        }
    }
}

/// A gate that refused to decide may have refused its params: asked then
/// (an error path only, so good params cost a tick nothing), the error says
/// so and names the line of loop.toml that sets them. Any other error is
/// returned as it was.
fn explain_refusal(host: &GateHost, gate: &gate::Gate, g: &GateConfig, err: GateError) -> GateError {
    if !matches!(err.kind(), GateErrorKind::Refused { .. }) {
        return err;
    }
    match host.check_params(gate, &g.params) {
        Err(rejected) => match rejected.kind() {
            GateErrorKind::ParamsRejected { message, .. } => err.with_kind(GateErrorKind::ParamsRejected {
                message: message.clone(),
                line: g.params_line,
            }),
            _ => err,
        },
        Ok(()) => err,
    }
}

/// A decision whose reason is kept to [`crate::bounds::MAX_TEXT`]: a gate
/// may return a reason of any size, and it lands in the state and history.
fn bounded(decision: Decision) -> Decision {
    use crate::bounds::text;
    match decision {
        Decision::Proceed => Decision::Proceed,
        Decision::Skip(r) => Decision::Skip(text(r)),
        Decision::AwaitApproval(r) => Decision::AwaitApproval(text(r)),
        Decision::Halt(r) => Decision::Halt(text(r)),
        Decision::Complete(r) => Decision::Complete(text(r)),
    }
}

/// The phase's gate events for history: one a live gate, with the context
/// it saw and the shadow gates recorded beside it.
pub(crate) fn events(result: &PhaseResult, tick: u64) -> Vec<EventKind> {
    let no_shadows = Vec::new();
    result
        .verdicts
        .iter()
        .zip(&result.contexts)
        .enumerate()
        .map(|(i, (verdict, context))| EventKind::Gate {
            tick,
            verdict: verdict.clone(),
            context: Box::new(context.clone()),
            shadow: result.shadows.get(i).unwrap_or(&no_shadows).clone(),
        })
        .collect()
}

impl PhaseResult {
    /// The result of a phase no gate runs in.
    pub(crate) fn empty() -> PhaseResult {
        PhaseResult {
            verdicts: Vec::new(),
            contexts: Vec::new(),
            shadows: Vec::new(),
            combined: Decision::Proceed,
            signed: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Asked, Await, Head};

    #[test]
    fn the_context_carries_the_commits_and_the_pending_await_with_its_approvals() {
        let now = crate::clock::now();
        let mut state = State::new(now);
        assert_eq!((commits(&state), pending_await(&state)), (None, None));
        state.last_tick = Some(LastTick {
            number: 3,
            started_at: now,
            ended_at: now,
            outcome: crate::state::Outcome::Ran,
            decision: Decision::Proceed,
            step: None,
            verifier: None,
            worktree_changed: None,
            host: None,
            head: Some(Head {
                branch: "loop/x".into(),
                before: Some("aaa".into()),
                after: Some("bbb".into()),
            }),
            cancelled: None,
        });
        state.awaiting = Some(Await {
            id: "aw-5".into(),
            since: now,
            tick: 3,
            gates: vec![Asked {
                gate: "stock:approve-every".into(),
                version: None,
                reason: "every 3".into(),
            }],
            head: Some("bbb".into()),
            snapshot: None,
        });
        let approval = |id: &str, for_await: Option<&str>| crate::domain::Approval {
            id: id.into(),
            by: "ann".into(),
            at: now,
            note: None,
            await_id: for_await.map(str::to_owned),
            head: None,
            snapshot: None,
        };
        state.pending_approvals = vec![approval("ap-1", Some("aw-5")), approval("ap-2", None)];
        let c = commits(&state).unwrap();
        assert_eq!(
            (
                c.branch.as_str(),
                c.head_before.as_deref(),
                c.head_after.as_deref()
            ),
            ("loop/x", Some("aaa"), Some("bbb"))
        );
        let a = pending_await(&state).unwrap();
        assert_eq!(
            (a.id.as_str(), a.tick, a.asked[0].reason.as_str()),
            ("aw-5", 3, "every 3")
        );
        let ids: Vec<&str> = a.approvals.iter().map(|x| x.id.as_str()).collect();
        assert_eq!(ids, ["ap-1"], "only the approvals given for this await");
    }
}
