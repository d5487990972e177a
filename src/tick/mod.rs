//! The tick (SPEC §7): take the loop's lock, and while holding it evaluate
//! the before-step gates in-process, run the step and the verifier, evaluate
//! the after-step gates and commit the state with the tick's events. Each
//! step of the pipeline is a small method of `Tick`; what gates see and say
//! is in `gates`, running the processes in `process`. Every change goes
//! through the store's session: one commit marks the step in flight, one
//! records the tick.

pub mod gates;
mod process;

use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::config::{LoopConfig, Overlap};
use crate::error::{Error, Result};
use crate::gate::{Decision, GateHost, Phase};
use crate::history::EventKind;
use crate::lock::{Holder, Wait};
use crate::root::Root;
use crate::state::{InFlight, LastTick, Outcome, ProcessOutcome, State, Status, Worktree};
use crate::store::{Durability, Loaded, LoopDir, LoopStore, Session};
use crate::{metrics, schedule, who, worktree};

pub use gates::Verdict;
pub use process::Cancel;

/// How a tick was asked to run. The command line sets `timeout`; the
/// daemon sets the rest.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// With `overlap = "wait"`: how long to wait for the lock (else forever).
    pub timeout: Option<Duration>,
    /// Answer `busy` at once when the lock is held, whatever `overlap` says.
    pub never_wait: bool,
    /// A gate host shared with other ticks; else one is built for this tick
    /// (only when the loop has gates).
    pub host: Option<&'a GateHost>,
    /// Lets another thread stop this tick's step or verifier.
    pub cancel: Option<&'a Cancel>,
}

/// What a tick did; `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct TickReport {
    #[serde(rename = "loop")]
    pub loop_name: String,
    /// The tick's number: the one that ran, or the one that would have.
    pub tick: u64,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub decisions: Vec<Verdict>,
    pub step: Option<ProcessOutcome>,
    pub verifier: Option<ProcessOutcome>,
    /// A tick found dead mid-way (and recorded as crashed) by this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered_crash: Option<u64>,
}

impl TickReport {
    /// The exit code of SPEC §7's outcomes.
    pub fn exit_code(&self) -> u8 {
        match self.outcome {
            Outcome::Failed => 6,
            Outcome::Halted => 7,
            _ => 0,
        }
    }
}

/// Runs one tick of loop `name`.
pub fn run(root: &Root, name: &str, opts: &Options<'_>) -> Result<TickReport> {
    let dir = LoopDir::open(root, name)?;
    run_on(root, &dir, opts)
}

/// Runs one tick of the loop `store`.
pub fn run_on(root: &Root, store: &dyn LoopStore, opts: &Options<'_>) -> Result<TickReport> {
    let name = store.name().as_str();
    // Read before locking, so a loop that cannot tick fails fast (and a bad
    // state file is reported, not waited for); it is read again under the lock.
    let peek = store.load()?;
    let config = store.config()?;
    let skip = config.overlap == Overlap::Skip || opts.never_wait;
    let wait = match skip {
        true => Wait::No,
        false => opts.timeout.map_or(Wait::Forever, Wait::For),
    };
    let tick = Tick {
        root,
        store,
        config: &config,
        shared_host: opts.host,
        own_host: None,
        cancel: opts.cancel,
        events: Vec::new(),
        verdicts: Vec::new(),
    };
    let report = match store
        .lock(Holder::me("tick"), wait)
        .and_then(|session| tick.run(session))
    {
        Err(Error::LockNotObtained { holder, .. }) if skip => TickReport {
            loop_name: name.to_owned(),
            tick: peek.tick + 1,
            outcome: Outcome::Busy,
            reason: Some(match holder {
                Some(h) => format!("held by {}", h.describe()),
                None => "the loop's lock is held".to_owned(),
            }),
            decisions: Vec::new(),
            step: None,
            verifier: None,
            recovered_crash: None,
        },
        other => other?,
    };
    if matches!(report.outcome, Outcome::Halted | Outcome::Completed) {
        schedule::loop_stopped(root, store.name());
    }
    Ok(report)
}

/// One tick in progress, under the lock.
struct Tick<'a> {
    root: &'a Root,
    store: &'a dyn LoopStore,
    config: &'a LoopConfig,
    /// The daemon's host, shared by its ticks.
    shared_host: Option<&'a GateHost>,
    /// Built on the first phase that evaluates a gate, so ticks that end
    /// before any gate runs (inactive, a crash recorded) never build one.
    own_host: Option<GateHost>,
    cancel: Option<&'a Cancel>,
    events: Vec<EventKind>,
    verdicts: Vec<Verdict>,
}

/// What the before-step gates let happen.
enum Go {
    Run,
    Stop(Outcome, String),
}

impl Tick<'_> {
    fn run(mut self, mut session: Box<dyn Session + '_>) -> Result<TickReport> {
        // Step 3: a tick that died mid-way is recorded as crashed by the
        // session, in a commit of its own, before anything else happens.
        let Loaded { mut state, recovered } = session.load()?;
        let recovered = recovered.map(|dead| dead.tick);
        let number = state.tick + 1;
        if !state.status.is_runnable() {
            let reason = format!("the loop is {}", state.status);
            return self.end_early(
                &mut *session,
                state,
                false,
                number,
                Outcome::Inactive,
                reason,
                recovered,
            );
        }
        session.set_tick(number);
        let worktree = match self.ensure_worktree(&mut state) {
            Ok(w) => w,
            Err(reason) => return self.fail_before_step(&mut *session, state, number, reason, recovered),
        };
        let before = self.gates(&state, Phase::BeforeStep)?;
        let was = (
            state.status,
            state.status_reason.clone(),
            state.pending_approvals.len(),
        );
        let go = self.apply_before(&mut state, number, &before);
        let changed = (
            state.status,
            state.status_reason.clone(),
            state.pending_approvals.len(),
        ) != was;
        if let Go::Stop(outcome, reason) = go {
            return self.end_early(&mut *session, state, changed, number, outcome, reason, recovered);
        }
        // Nothing after the step may fail before its result is committed:
        // the after-step gates' host is made now.
        self.host_for(Phase::AfterStep)?;

        let started_at = Timestamp::now();
        state.in_flight = Some(InFlight {
            tick: number,
            pid: std::process::id(),
            host: who::host(),
            started_at,
        });
        let events = std::mem::take(&mut self.events);
        session.commit(&mut state, events, Durability::Relaxed)?;

        let run_dir = self.store.runs_dir().join(number.to_string());
        let cwd = match &worktree {
            Some(w) => w.clone(),
            None => self.store.base_dir().join(&self.config.workdir),
        };
        let before_snapshot = worktree.as_deref().and_then(|w| worktree::snapshot(w).ok());
        let env = process::Env {
            loop_name: self.store.name().as_str(),
            tick: number,
            root: self.root.path(),
            worktree: worktree.as_deref(),
            run_dir: &run_dir,
        };
        let ran = process::run_step_and_verifier(self.config, &cwd, &env, self.cancel);
        let worktree_changed = match (&worktree, before_snapshot) {
            (Some(w), Some(before)) => worktree::snapshot(w).ok().map(|after| after != before),
            _ => None,
        };
        self.record_results(
            &mut state,
            number,
            started_at,
            before.combined,
            &ran,
            worktree_changed,
            &run_dir,
        );

        let after = self
            .gates(&state, Phase::AfterStep)
            .expect("the host was made before the step");
        let mut outcome = if ran.failed() {
            Outcome::Failed
        } else {
            Outcome::Ran
        };
        let mut reason = ran.failure.clone();
        match &after.combined {
            Decision::Halt(r) => {
                state.set_status(Status::Halted, Some(r.clone()));
                (outcome, reason) = (Outcome::Halted, Some(r.clone()));
            }
            Decision::Complete(r) => {
                state.set_status(Status::Completed, Some(r.clone()));
                (outcome, reason) = (Outcome::Completed, Some(r.clone()));
            }
            Decision::AwaitApproval(r) => state.set_status(Status::AwaitingApproval, Some(r.clone())),
            Decision::Skip(_) | Decision::Proceed => {}
        }
        if let Some(last) = &mut state.last_tick {
            last.outcome = outcome;
        }
        state.in_flight = None;
        self.events.push(EventKind::Tick {
            tick: number,
            outcome,
            reason: reason.clone(),
            step: ran.step.clone(),
            verifier: ran.verifier.clone(),
            worktree_changed,
        });
        let events = std::mem::take(&mut self.events);
        if let Err(e) = session.commit(&mut state, events, Durability::Full) {
            return Err(Error::Unrecorded {
                name: self.store.name().to_string(),
                tick: number,
                step: ran.describe(),
                source: Box::new(e),
            });
        }
        if let Err(e) = crate::step::prune_runs(&self.store.runs_dir(), self.config.runs.keep) {
            tracing::warn!(
                "loop {:?}: could not prune old runs: {e}",
                self.store.name().as_str()
            );
        }
        Ok(TickReport {
            loop_name: self.store.name().to_string(),
            tick: number,
            outcome,
            reason,
            decisions: self.verdicts,
            step: ran.step,
            verifier: ran.verifier,
            recovered_crash: recovered,
        })
    }

    /// Step 5: the worktree the step runs in, made on first use.
    fn ensure_worktree(&mut self, state: &mut State) -> std::result::Result<Option<PathBuf>, String> {
        let Some(w) = &self.config.worktree else {
            return Ok(None);
        };
        let repo = self.store.base_dir().join(&w.repo);
        let path = self
            .store
            .base_dir()
            .join(w.path.as_deref().unwrap_or("worktree".as_ref()));
        match worktree::ensure(&repo, &w.branch, &path) {
            Ok(created) => {
                if state
                    .worktree
                    .as_ref()
                    .is_none_or(|s| s.path != path || s.branch != w.branch)
                {
                    state.worktree = Some(Worktree {
                        repo,
                        branch: w.branch.clone(),
                        path: path.clone(),
                        created_at: Timestamp::now(),
                    });
                    if matches!(created, worktree::Ensured::Created) {
                        self.events.push(EventKind::WorktreeCreated {
                            path: path.clone(),
                            branch: w.branch.clone(),
                        });
                    }
                }
                Ok(Some(path))
            }
            Err(e) => Err(format!("worktree: {e}")),
        }
    }

    /// The gate host, made when `phase` has gates and no host is there yet.
    fn host_for(&mut self, phase: Phase) -> Result<Option<&GateHost>> {
        if !self.config.gates.iter().any(|g| g.phases.contains(&phase)) {
            return Ok(None);
        }
        if self.shared_host.is_none() && self.own_host.is_none() {
            self.own_host = Some(GateHost::new(Some(self.root.cache_dir()))?);
        }
        Ok(self.shared_host.or(self.own_host.as_ref()))
    }

    /// Evaluates one phase's gates and keeps their verdicts and contexts.
    fn gates(&mut self, state: &State, phase: Phase) -> Result<gates::PhaseResult> {
        let (name, base) = (self.store.name().as_str(), self.store.base_dir());
        let config = self.config;
        let result = match self.host_for(phase)? {
            None => return Ok(gates::PhaseResult::empty()),
            Some(host) => gates::evaluate_phase(host, name, base, config, state, phase),
        };
        for (v, ctx) in result.verdicts.iter().zip(&result.contexts) {
            self.events.push(EventKind::Gate {
                tick: state.tick + u64::from(phase == Phase::BeforeStep),
                verdict: v.clone(),
                context: Box::new(ctx.clone()),
            });
        }
        self.verdicts.extend(result.verdicts.iter().cloned());
        Ok(result)
    }

    /// Step 6: what the combined before-step decision does to the loop.
    fn apply_before(&mut self, state: &mut State, number: u64, before: &gates::PhaseResult) -> Go {
        match &before.combined {
            Decision::Halt(r) => {
                state.set_status(Status::Halted, Some(r.clone()));
                Go::Stop(Outcome::Halted, r.clone())
            }
            Decision::Complete(r) => {
                state.set_status(Status::Completed, Some(r.clone()));
                Go::Stop(Outcome::Completed, r.clone())
            }
            Decision::AwaitApproval(r) => {
                let rules = &self.config.approval;
                for a in state.drop_expired(Timestamp::now(), rules.expires.map(|d| d.0)) {
                    self.events.push(EventKind::ApprovalExpired {
                        id: a.id,
                        by: a.by,
                        approved_at: a.at,
                    });
                }
                match state.consume_approvals(rules.required) {
                    Some(used) => {
                        state.set_status(Status::Active, None);
                        self.events.push(EventKind::ApprovalsUsed {
                            tick: number,
                            ids: used.iter().map(|a| a.id.clone()).collect(),
                            by: used.into_iter().map(|a| a.by).collect(),
                        });
                        Go::Run
                    }
                    None => {
                        state.set_status(Status::AwaitingApproval, Some(r.clone()));
                        Go::Stop(Outcome::AwaitingApproval, r.clone())
                    }
                }
            }
            Decision::Skip(r) => {
                if state.status == Status::AwaitingApproval {
                    state.set_status(Status::Active, None);
                }
                Go::Stop(Outcome::Skipped, r.clone())
            }
            Decision::Proceed => {
                if state.status == Status::AwaitingApproval {
                    state.set_status(Status::Active, None);
                }
                Go::Run
            }
        }
    }

    /// Step 10's bookkeeping of what ran: the tick count, the last tick,
    /// failures, progress and metrics, before the after-step gates see them.
    #[allow(clippy::too_many_arguments)]
    fn record_results(
        &mut self,
        state: &mut State,
        number: u64,
        started_at: Timestamp,
        decision: Decision,
        ran: &process::Ran,
        worktree_changed: Option<bool>,
        run_dir: &std::path::Path,
    ) {
        state.tick = number;
        state.consecutive_failures = if ran.failed() {
            state.consecutive_failures + 1
        } else {
            0
        };
        match worktree_changed {
            Some(true) => state.unchanged_ticks = 0,
            Some(false) => state.unchanged_ticks += 1,
            None => {}
        }
        match metrics::read_metrics(&run_dir.join(process::METRICS_FILE)) {
            Ok(m) => {
                let left_out = metrics::add_totals(&mut state.totals, &m);
                if !left_out.is_empty() {
                    let message = format!(
                        "not added to the totals (the sum would not be finite, or past {} totals): {}",
                        metrics::MAX_KEYS,
                        left_out.join(", ")
                    );
                    tracing::warn!("loop {:?}: tick {number}: {message}", self.store.name().as_str());
                    self.events.push(EventKind::MetricsWarning {
                        tick: number,
                        message,
                    });
                }
                state.metrics = m;
            }
            Err(e) => {
                tracing::warn!("loop {:?}: tick {number}: {e}", self.store.name().as_str());
                state.metrics.clear();
                self.events.push(EventKind::MetricsWarning {
                    tick: number,
                    message: e.to_string(),
                });
            }
        }
        state.last_tick = Some(LastTick {
            number,
            started_at,
            ended_at: Timestamp::now(),
            outcome: if ran.failed() {
                Outcome::Failed
            } else {
                Outcome::Ran
            },
            decision,
            step: ran.step.clone(),
            verifier: ran.verifier.clone(),
            worktree_changed,
        });
    }

    /// A failure before the step could start (the worktree could not be made):
    /// it counts as a failure and is recorded like a failed tick.
    fn fail_before_step(
        self,
        session: &mut dyn Session,
        mut state: State,
        number: u64,
        reason: String,
        recovered: Option<u64>,
    ) -> Result<TickReport> {
        tracing::error!("loop {:?}: {reason}", self.store.name().as_str());
        state.consecutive_failures += 1;
        self.end_early(session, state, true, number, Outcome::Failed, reason, recovered)
    }

    /// Ends a tick whose step did not run: one commit of what changed and
    /// the tick's events; an inactive tick that changed nothing commits
    /// nothing.
    #[allow(clippy::too_many_arguments)]
    fn end_early(
        mut self,
        session: &mut dyn Session,
        mut state: State,
        changed: bool,
        number: u64,
        outcome: Outcome,
        reason: String,
        recovered: Option<u64>,
    ) -> Result<TickReport> {
        if outcome != Outcome::Inactive {
            self.events.push(EventKind::Tick {
                tick: number,
                outcome,
                reason: Some(reason.clone()),
                step: None,
                verifier: None,
                worktree_changed: None,
            });
        }
        if changed || !self.events.is_empty() {
            let events = std::mem::take(&mut self.events);
            session.commit(&mut state, events, Durability::Full)?;
        }
        Ok(TickReport {
            loop_name: self.store.name().to_string(),
            tick: number,
            outcome,
            reason: Some(reason),
            decisions: self.verdicts,
            step: None,
            verifier: None,
            recovered_crash: recovered,
        })
    }
}
