//! The tick (docs/ticks.md): take the loop's lock, and while holding it evaluate
//! the before-step gates in-process, run the step and the verifier, evaluate
//! the after-step gates and commit the state with the tick's events. Each
//! step of the pipeline is a small method of `Tick`; what gates see and say
//! is in `gates`, running the processes in `process`. Every change goes
//! through the store's session: one commit marks the step in flight, one
//! records the tick.

pub(crate) mod after;
mod confinement;
pub(crate) mod gates;
mod line;
mod process;
mod report;
mod rules;
pub(crate) mod shadow;

use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;

use crate::config::{LoopConfig, Overlap};
use crate::domain::{Decision, Phase, Verdict};
use crate::error::{Error, Result};
use crate::gate::GateHost;
use crate::history::Dropped;
use crate::history::EventKind;
use crate::lock::{Holder, Wait};
use crate::root::Root;
use crate::state::{Asked, At, GateFailure, Head, InFlight, LastTick, Moment, Outcome, State, Worktree};
use crate::store::{Durability, Loaded, LoopStore, Session};
use crate::who::Actor;
use crate::{metrics, who, worktree};

pub(crate) use line::View;
pub(crate) use process::Cancel;
pub(crate) use report::TickReport;

/// How a tick was asked to run. The command line sets `timeout`; the
/// daemon sets the rest.
#[derive(Clone, Copy, Default)]
pub(crate) struct Options<'a> {
    /// With `overlap = "wait"`: how long to wait for the lock (else forever).
    pub timeout: Option<Duration>,
    /// Answer `busy` at once when the lock is held, whatever `overlap` says.
    pub never_wait: bool,
    /// Where the tick would answer `busy`, first wait this long for the
    /// lock (a command that holds it briefly).
    pub brief_wait: Option<Duration>,
    /// A gate host shared with other ticks; else one is built for this tick
    /// (only when the loop has gates).
    pub host: Option<&'a GateHost>,
    /// Lets another thread stop this tick's step or verifier.
    pub cancel: Option<&'a Cancel>,
    /// For daemons sharing a loop: a tick that started at or after this
    /// time (on any host) ran this firing already, and this tick answers
    /// `busy` without running.
    pub ran_since: Option<Timestamp>,
    /// The process ends after this tick (the `tick` command): a gate host
    /// built for it is left to the operating system rather than torn down
    /// (unmapping the engine's code and freeing its tables is about 2 % of
    /// a CLI tick's CPU, spent after the work is done).
    pub process_exits: bool,
    /// Who runs the tick (the person who asked for it by hand, or through
    /// a console); else the process's own actor the tick is given (a
    /// scheduler, the daemon).
    pub actor: Option<&'a Actor>,
    /// What fired the tick, as its history records.
    pub fired_by: crate::fires::FiredBy,
}

/// Runs one tick of the loop `store` in the process whose own actor is
/// `me` ([`crate::store::Stores::me`]).
pub(crate) fn run_on(
    root: &Root,
    store: &dyn LoopStore,
    me: &Actor,
    opts: &Options<'_>,
) -> Result<TickReport> {
    let config = store.config()?;
    run_configured(root, store, &config, me, opts)
}

/// Runs one tick of the loop `store`, whose config the caller has read:
/// loop.toml is read once per tick, and the state once when the lock is
/// free. `me` is the process's own actor: it records a tick found dead,
/// and runs this one unless `opts.actor` names who does.
pub(crate) fn run_configured(
    root: &Root,
    store: &dyn LoopStore,
    config: &LoopConfig,
    me: &Actor,
    opts: &Options<'_>,
) -> Result<TickReport> {
    // A daemon's clock may have jumped since it started.
    crate::clock::check()?;
    let skip = config.overlap == Overlap::Skip || opts.never_wait;
    let session = match store.lock(Holder::me("tick"), Wait::No) {
        Ok(session) => session,
        Err(Error::LockNotObtained { holder, .. }) if skip => match opts.brief_wait {
            None => return busy(store, holder),
            Some(brief) => match store.lock(Holder::me("tick"), Wait::For(brief)) {
                Ok(session) => session,
                Err(Error::LockNotObtained { holder, .. }) => return busy(store, holder),
                Err(e) => return Err(e),
            },
        },
        Err(Error::LockNotObtained { .. }) => {
            // Read before waiting, so a loop that cannot tick fails fast (a
            // bad state file is reported, not waited for); it is read again
            // under the lock.
            store.load()?;
            let wait = opts.timeout.map_or(Wait::Forever, Wait::For);
            store.lock(Holder::me("tick"), wait)?
        }
        Err(e) => return Err(e),
    };
    let mut tick = Tick {
        root,
        store,
        config,
        shared_host: opts.host,
        own_host: None,
        cancel: opts.cancel,
        ran_since: opts.ran_since,
        fired_by: opts.fired_by,
        number: 0,
        recovered: None,
        me,
        actor: opts.actor.unwrap_or(me).clone(),
        events: Vec::new(),
        verdicts: Vec::new(),
        first_disagreed: Vec::new(),
        current: crate::rules::Current::of(root.path(), config),
        budgets: crate::budget::of_loop(&root.settings().budgets, store.name().as_str(), config),
        held: false,
    };
    let report = tick.run(session);
    if opts.process_exits {
        std::mem::forget(tick.own_host.take());
    }
    report
}

/// The report of a tick that found the loop's lock held and did not wait.
fn busy(store: &dyn LoopStore, holder: Option<Holder>) -> Result<TickReport> {
    let state = store.load()?;
    Ok(TickReport {
        loop_name: store.name().to_string(),
        tick: state.tick + 1,
        outcome: Outcome::Busy,
        reason: Some(match holder {
            Some(h) => format!("held by {}", h.describe()),
            None => "the loop's lock is held".to_owned(),
        }),
        decisions: Vec::new(),
        step: None,
        verifier: None,
        recovered_crash: None,
        crashed_started: None,
        started_waiting: false,
        facts: None,
        first_disagreed: Vec::new(),
    })
}

/// One tick in progress, under the lock: the context its phases share.
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
    ran_since: Option<Timestamp>,
    fired_by: crate::fires::FiredBy,
    /// This tick's number: the one that runs, or would have.
    number: u64,
    /// A tick found dead mid-way and recorded by this one's session: its
    /// number and when it started.
    recovered: Option<(u64, Timestamp)>,
    /// The process's own actor: who records a tick found dead.
    me: &'a Actor,
    /// Who runs it: the records of its commits name them.
    actor: Actor,
    /// The events of the next commit.
    events: Vec<EventKind>,
    verdicts: Vec<Verdict>,
    /// The shadow gates that disagreed for the first time in this tick.
    first_disagreed: Vec<String>,
    /// The config this tick runs with: what the record of the rules
    /// compares and the tick's event names.
    current: crate::rules::Current,
    /// The budgets the loop belongs to.
    budgets: Vec<crate::budget::Member>,
    /// This tick holds a reservation in them.
    held: bool,
}

/// Where the before-step phase leaves the tick.
enum Before {
    /// Run the step, in this worktree if one is configured; the combined
    /// before-step decision is kept in the state's last tick.
    Run(Option<PathBuf>, Decision),
    /// The tick ended without a step.
    Ended(TickReport),
}

/// What the step phase did.
struct Stepped {
    ran: process::Ran,
    worktree_changed: Option<bool>,
    /// The worktree's branch and HEAD around the step.
    head: Option<Head>,
}

/// What the before-step gates let happen.
enum Go {
    Run,
    Stop(Outcome, String),
}

impl Tick<'_> {
    /// The phases, in order, around one commit path: the session's
    /// recovery, before the step, the step, after it, and the commit.
    fn run(&mut self, mut session: Box<dyn Session + '_>) -> Result<TickReport> {
        // Load, recovering: a tick that died mid-way is recorded as crashed
        // by the session, in a commit of its own, before anything else
        // happens (docs/ticks.md lists the phases in order).
        session.use_config(self.config);
        let Loaded { mut state, recovered } = session.load(self.me)?;
        self.recovered = recovered.map(|dead| (dead.tick, dead.started_at));
        self.number = state.tick + 1;
        self.take_in_config(&mut state);
        let was_awaiting = state.status == crate::state::Status::AwaitingApproval;
        if let (Some(since), Some(last)) = (self.ran_since, &state.last_tick)
            && last.started_at >= since
        {
            let host = last.host.as_deref().unwrap_or("another host");
            return Ok(TickReport {
                loop_name: self.store.name().to_string(),
                tick: self.number,
                outcome: Outcome::Busy,
                reason: Some(format!("tick {} ran this firing on {host}", last.number)),
                decisions: Vec::new(),
                step: None,
                verifier: None,
                recovered_crash: self.recovered.map(|(tick, _)| tick),
                crashed_started: self.recovered.map(|(_, at)| at),
                started_waiting: false,
                facts: None,
                first_disagreed: Vec::new(),
            });
        }
        let session = &mut *session;
        let mut report = match self.before_step(session, &mut state)? {
            Before::Run(worktree, decision) => {
                let stepped = self.step(session, &mut state, worktree.as_deref(), decision)?;
                let (outcome, reason) = self.after_step(&mut state, &stepped.ran);
                self.finish(session, &mut state, outcome, reason, stepped)?
            }
            Before::Ended(report) => report,
        };
        report.started_waiting = report.outcome == Outcome::AwaitingApproval && !was_awaiting;
        report.first_disagreed = std::mem::take(&mut self.first_disagreed);
        report.facts = Some(Box::new(crate::notify::Facts::of(&state)));
        Ok(report)
    }

    /// Before the step: an inactive loop ends here; then the worktree and
    /// the before-step gates, whose decision may end the tick.
    fn before_step(&mut self, session: &mut dyn Session, state: &mut State) -> Result<Before> {
        if !state.status.is_runnable() {
            let reason = format!("the loop is {}", state.status);
            return self.end_early(session, state, false, Outcome::Inactive, reason);
        }
        session.set_tick(self.number);
        if let Some((reason, changed)) = self.await_config(state) {
            return self.end_early(session, state, changed, Outcome::AwaitingApproval, reason);
        }
        let worktree = match self.ensure_worktree(state) {
            Ok(w) => w,
            Err(failure) => {
                let reason = failure.reason();
                tracing::debug!("loop {:?}: {reason}", self.store.name().as_str());
                state.consecutive_failures += 1;
                return self.end_early(session, state, true, Outcome::Failed, reason);
            }
        };
        let mut before = self.gates(state, Phase::BeforeStep)?;
        let refused = self.reserve(&mut before)?;
        let was = (
            state.status,
            state.status_reason.clone(),
            state.pending_approvals.len(),
        );
        let go = self.apply_before(state, &before, worktree.as_deref());
        let changed = (
            state.status,
            state.status_reason.clone(),
            state.pending_approvals.len(),
        ) != was;
        if let Go::Stop(outcome, reason) = go {
            if self.held {
                crate::budget::release(self.ledger(), self.store.name().as_str(), self.number)?;
                self.held = false;
                self.events
                    .retain(|e| !matches!(e, EventKind::BudgetReserved { .. }));
            }
            return self.end_early(session, state, changed, outcome, reason);
        }
        if refused {
            // A person approved spending past the cap.
            let members = &self.budgets;
            let amount = self.config.max_per_tick.map_or(0.0, |c| c.0);
            let name = self.store.name().as_str();
            let r = crate::budget::reserve(self.ledger(), members, name, self.number, amount, true)?;
            self.events.extend(r.events);
            self.held = true;
        }
        // Nothing after the step may fail before its result is committed:
        // the after-step gates' host is made now.
        self.host_for(Phase::AfterStep)?;
        Ok(Before::Run(worktree, before.combined))
    }

    /// Where the root's budgets are kept.
    fn ledger(&self) -> crate::budget::Place<'_> {
        crate::budget::Place::of(self.root.path(), self.store.shared_ledger())
    }

    /// Reserves the tick's `max_per_tick` in every budget the loop belongs
    /// to, when the before-step gates let the step run (or await). One it
    /// does not fit in decides as its `on_cap` says, beside the gates:
    /// whether it refused.
    fn reserve(&mut self, before: &mut gates::PhaseResult) -> Result<bool> {
        if self.budgets.is_empty()
            || !matches!(before.combined, Decision::Proceed | Decision::AwaitApproval(_))
        {
            return Ok(false);
        }
        let amount = self.config.max_per_tick.map_or(0.0, |c| c.0);
        let name = self.store.name().as_str();
        let r = crate::budget::reserve(self.ledger(), &self.budgets, name, self.number, amount, false)?;
        self.events.extend(r.events);
        let Some(refusal) = r.refused else {
            self.held = true;
            return Ok(false);
        };
        let reason = refusal.reason();
        let on_cap = self
            .budgets
            .iter()
            .find(|m| m.account == refusal.standing.account)
            .map_or(crate::budget::OnCap::Halt, |m| m.spec.on_cap);
        let decision = match on_cap {
            crate::budget::OnCap::Await => Decision::AwaitApproval(reason),
            crate::budget::OnCap::Halt => Decision::Halt(reason),
            crate::budget::OnCap::Skip => Decision::Skip(reason),
        };
        let verdict = Verdict {
            gate: format!("budget:{}", refusal.standing.name),
            version: None,
            name: None,
            sha256: None,
            phase: Phase::BeforeStep,
            decision,
            micros: 0,
            error: None,
            logs: Vec::new(),
        };
        self.verdicts.push(verdict.clone());
        before.verdicts.push(verdict);
        before.shadows.push(Vec::new());
        before.combined = Decision::combine(before.verdicts.iter().map(|v| &v.decision));
        Ok(true)
    }

    /// Settles the tick's reservation at what the step reported, before
    /// the tick is committed. A ledger that cannot be written leaves the
    /// reservation held: the next tick counts it at its amount.
    fn settle(&mut self, state: &State) {
        if !self.held {
            return;
        }
        let name = self.store.name().as_str();
        match crate::budget::settle(
            self.ledger(),
            &self.budgets,
            name,
            self.number,
            &state.metrics,
            &self.root.settings().pricing,
            self.config.unreported,
        ) {
            Ok(events) => self.events.extend(events),
            Err(e) => tracing::warn!(
                "loop {name:?}: tick {}: its budgets' reservation stays held: {e}",
                self.number
            ),
        }
        self.held = false;
    }

    /// The step: commit it as in flight, run it and the verifier, and
    /// record what they did in the state.
    fn step(
        &mut self,
        session: &mut dyn Session,
        state: &mut State,
        worktree: Option<&std::path::Path>,
        decision: Decision,
    ) -> Result<Stepped> {
        let number = self.number;
        let started_at = crate::clock::now();
        // The step's group is made first, so the record names it and no
        // file has to (if it cannot be made now, the step's start tries
        // again and says why).
        let group = crate::step::Group::new().ok();
        let group_id = group.as_ref().map(crate::step::Group::id);
        state.in_flight = Some(InFlight {
            tick: number,
            pid: std::process::id(),
            host: who::host(),
            started_at,
            group: group_id,
            // What tells `cancel` this group from one that takes its id later.
            group_start: group_id.and_then(crate::procfs::start_of),
        });
        let run_dir = crate::runs::run_path(self.store.base_dir(), number);
        // Made before anything is committed: a tick that cannot make it
        // fails with nothing used (its approvals stay for the next).
        let run = process::make_run_dir(self.config, self.store.base_dir(), number, &run_dir)?;
        let events = std::mem::take(&mut self.events);
        session.commit(&self.actor, state, events, Durability::Relaxed)?;

        let cwd = match worktree {
            Some(w) => w.to_owned(),
            None => self.store.base_dir().join(&self.config.workdir),
        };
        let before_snapshot = worktree.and_then(|w| worktree::snapshot(w).ok());
        let head_before = before_snapshot.as_ref().and_then(|s| s.head.clone());
        let env = process::Env {
            loop_name: self.store.name().as_str(),
            tick: number,
            root: self.root.path(),
            worktree,
            run_dir: &run_dir,
            loop_dir: self.store.base_dir(),
        };
        let lost = session.lock_watch();
        let ran =
            process::run_step_and_verifier(self.config, &cwd, &env, self.cancel, lost.as_ref(), group, run);
        let after_snapshot = worktree.and_then(|w| worktree::snapshot(w).ok());
        let worktree_changed = match (&before_snapshot, &after_snapshot) {
            (Some(before), Some(after)) => Some(after != before),
            _ => None,
        };
        let head = match (worktree, &state.worktree) {
            (Some(_), Some(w)) => Some(Head {
                branch: w.branch.clone(),
                before: head_before,
                after: after_snapshot.and_then(|s| s.head),
            }),
            _ => None,
        };
        let stepped = Stepped {
            ran,
            worktree_changed,
            head,
        };
        self.record_results(state, started_at, decision, &stepped);
        Ok(stepped)
    }

    /// After the step: the after-step gates, which see this tick's result;
    /// a halt or a completion becomes the tick's outcome.
    fn after_step(&mut self, state: &mut State, ran: &process::Ran) -> (Outcome, Option<String>) {
        let after = self
            .gates(state, Phase::AfterStep)
            .expect("the host was made before the step");
        let mut outcome = if ran.failed() {
            Outcome::Failed
        } else {
            Outcome::Ran
        };
        let mut reason = ran.failure.as_ref().map(process::Failure::reason);
        if let Some(stopped) = state.apply(&after.combined, Moment::AfterStep) {
            (outcome, reason) = (stopped, Some(after.combined.reason().to_owned()));
        }
        let head = state
            .last_tick
            .as_ref()
            .and_then(|l| l.head.as_ref())
            .and_then(|h| h.after.clone());
        self.settle_await(state, &after, At::head(head));
        (outcome, reason)
    }

    /// The commit: one of the state and the tick's events. A step that
    /// ran but cannot be recorded is said as such (exit 8), so nothing runs
    /// it again; one recorded whose directory sync failed, or whose
    /// record's answer from the server was lost, as such (exit 9).
    fn finish(
        &mut self,
        session: &mut dyn Session,
        state: &mut State,
        outcome: Outcome,
        reason: Option<String>,
        stepped: Stepped,
    ) -> Result<TickReport> {
        let number = self.number;
        let reason = crate::bounds::opt_text(reason);
        let Stepped {
            ran,
            worktree_changed,
            head,
        } = stepped;
        if let Some(last) = &mut state.last_tick {
            last.outcome = outcome;
        }
        state.in_flight = None;
        self.note_gate_error(state);
        self.settle(state);
        self.events.push(EventKind::Tick {
            tick: number,
            outcome,
            reason: reason.clone(),
            step: ran.step.clone(),
            verifier: ran.verifier.clone(),
            worktree_changed,
            host: Some(crate::who::host()),
            head,
            metrics: state.metrics.clone(),
            config: Some(self.current.hashes.clone()),
            confinement: ran.confinement.clone(),
            fired_by: Some(self.fired_by),
            cancelled: ran.failure.as_ref().and_then(|f| f.cancellation()).cloned(),
        });
        let events = std::mem::take(&mut self.events);
        match session.commit(&self.actor, state, events, Durability::Full) {
            // Recorded; only its durability is in doubt, and it is said so.
            // Or recorded or not, the server's answer lost: the next command
            // on the loop finds the record, or the tick in flight.
            Err(e @ (Error::NotDurable { .. } | Error::MaybeMade { .. })) => return Err(e),
            Err(e) => {
                return Err(Error::Unrecorded {
                    name: self.store.name().to_string(),
                    tick: number,
                    step: ran.describe(),
                    source: Box::new(e),
                });
            }
            Ok(()) => {}
        }
        // The step's run directory was made with `keep - 1` old ones left;
        // with `keep = 0` it goes too, now that the tick is recorded.
        if self.config.runs.keep == 0
            && let Err(e) = crate::runs::prune(self.store.base_dir(), 0)
        {
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
            decisions: std::mem::take(&mut self.verdicts),
            step: ran.step,
            verifier: ran.verifier,
            recovered_crash: self.recovered.map(|(tick, _)| tick),
            crashed_started: self.recovered.map(|(_, at)| at),
            started_waiting: false,
            facts: None,
            first_disagreed: Vec::new(),
        })
    }

    /// The worktree the step runs in, made on first use: before the step,
    /// ahead of the before-step gates (an await they open records its HEAD).
    fn ensure_worktree(
        &mut self,
        state: &mut State,
    ) -> std::result::Result<Option<PathBuf>, process::Failure> {
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
                        created_at: crate::clock::now(),
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
            Err(e) => Err(process::Failure::Worktree(e)),
        }
    }

    /// Whether any gate of the config, live or shadow, runs in `phase`.
    fn runs_gates(&self, phase: Phase) -> bool {
        self.config.gates.iter().any(|g| g.phases.contains(&phase))
    }

    /// The gate host, made when `phase` has gates and no host is there yet.
    fn host_for(&mut self, phase: Phase) -> Result<Option<&GateHost>> {
        if !self.runs_gates(phase) {
            return Ok(None);
        }
        if self.shared_host.is_none() && self.own_host.is_none() {
            self.own_host = Some(GateHost::new(Some(self.root.cache_dir()))?);
        }
        Ok(self.shared_host.or(self.own_host.as_ref()))
    }

    /// Keeps in `state` the last failure of this tick's gates, or clears it
    /// when they all answered (a tick that ran no gate leaves it); a
    /// failure already kept stays as it was, with its `since`. Whether the
    /// state changed.
    fn note_gate_error(&self, state: &mut State) -> bool {
        if self.verdicts.is_empty() {
            return false;
        }
        let failed = self
            .verdicts
            .iter()
            .rev()
            .find_map(|v| v.error.as_ref().map(|e| (&v.gate, e)));
        let kept = state.gate_error.as_ref().map(|f| (&f.gate, &f.error));
        if failed == kept {
            return false;
        }
        state.gate_error = failed.map(|(gate, error)| GateFailure {
            gate: gate.clone(),
            error: error.clone(),
            since: crate::clock::now(),
        });
        true
    }

    /// Evaluates one phase's gates and keeps their verdicts and contexts.
    fn gates(&mut self, state: &mut State, phase: Phase) -> Result<gates::PhaseResult> {
        let store = self.store;
        let name = store.name().as_str();
        let config = self.config;
        let policy = self.root.settings().gates.policy(&config.signing);
        // Where the loop's budgets stand, for the gates to see: read only
        // when a gate runs in this phase.
        let budgets = match self.runs_gates(phase) {
            true => crate::budget::standings_for_gate(self.ledger(), &self.budgets, name),
            false => Vec::new(),
        };
        let result = match self.host_for(phase)? {
            None => return Ok(gates::PhaseResult::empty()),
            Some(host) => gates::evaluate_phase(host, name, store, (config, &policy), state, phase, &budgets),
        };
        gates::raise_floors(state, &result.signed);
        let tick = state.tick + u64::from(phase == Phase::BeforeStep);
        self.events.extend(gates::events(&result, tick));
        let first = shadow::first_disagreed(&result, &mut state.shadows_disagreed);
        self.first_disagreed.extend(first);
        self.verdicts.extend(result.verdicts.iter().cloned());
        Ok(result)
    }

    /// The before-step gates' end: what their combined decision does to
    /// the loop. An await that enough approvals for it release uses them
    /// and proceeds.
    fn apply_before(
        &mut self,
        state: &mut State,
        before: &gates::PhaseResult,
        worktree: Option<&std::path::Path>,
    ) -> Go {
        let asks = matches!(before.combined, Decision::AwaitApproval(_));
        // Where the worktree stands for approvals, read when it matters:
        // its HEAD, and with `bind = "commit"` its whole snapshot.
        let whole = self.config.approval.bind == crate::config::Bind::Commit;
        let (at, snapshot) = match worktree {
            Some(w) if asks || state.awaiting.is_some() => worktree::at(w, whole),
            _ => Default::default(),
        };
        let released = asks && self.use_approvals(state, before, &at, snapshot.as_ref());
        let decision = if released {
            &Decision::Proceed
        } else {
            &before.combined
        };
        let go = match state.apply(decision, Moment::BeforeStep) {
            Some(outcome) => Go::Stop(outcome, decision.reason().to_owned()),
            None => Go::Run,
        };
        self.settle_await(state, before, at);
        go
    }

    /// Opens an await when the loop started awaiting, or ends the open one
    /// when it stopped; records either.
    fn settle_await(&mut self, state: &mut State, phase: &gates::PhaseResult, at: At) {
        let settled = state.settle_await(self.number, || asked(phase), at, crate::clock::now());
        if let Some(opened) = settled.opened {
            self.events.push(EventKind::Awaiting { awaiting: opened });
        }
        if let Some((closed, left)) = settled.closed {
            self.drop_approvals(Some(closed.id), left, Dropped::Ended, None);
        }
    }

    /// Records approvals that no longer count; voided ones with where the
    /// worktree stood that voided them (and, when it changed on the same
    /// commit, what is uncommitted in it).
    fn drop_approvals(
        &mut self,
        await_id: Option<String>,
        dropped: Vec<crate::domain::Approval>,
        why: Dropped,
        voided_at: Option<(&At, Option<&worktree::Snapshot>)>,
    ) {
        if dropped.is_empty() {
            return;
        }
        let (head, snapshot, dirty) = match voided_at {
            Some((at, snapshot)) => (
                at.head.clone(),
                at.snapshot.clone().filter(|_| why == Dropped::WorktreeChanged),
                match snapshot.filter(|_| why == Dropped::WorktreeChanged) {
                    Some(s) => s.dirty().into_iter().take(worktree::MAX_DIRTY_LISTED).collect(),
                    None => Vec::new(),
                },
            ),
            None => (None, None, Vec::new()),
        };
        self.events.push(EventKind::ApprovalsDropped {
            await_id,
            ids: dropped.iter().map(|a| a.id.clone()).collect(),
            by: dropped.into_iter().map(|a| a.by).collect(),
            why,
            head,
            snapshot,
            dirty,
        });
    }

    /// Drops expired approvals, opens the await the gates ask for (the
    /// approvals given ahead become its own), voids those given on another
    /// worktree than `at` (`bind = "commit"`: another commit, or other
    /// uncommitted changes or untracked files), and uses those that
    /// release it, if there are enough; records each.
    fn use_approvals(
        &mut self,
        state: &mut State,
        before: &gates::PhaseResult,
        at: &At,
        snapshot: Option<&worktree::Snapshot>,
    ) -> bool {
        let config = self.config;
        let rules = &config.approval;
        for a in state.drop_expired(crate::clock::now(), rules.expires.map(|d| d.0)) {
            self.events.push(EventKind::ApprovalExpired {
                id: a.id,
                by: a.by,
                approved_at: a.at,
            });
        }
        if let Some(opened) = state.open_await(self.number, asked(before), at.clone(), crate::clock::now()) {
            self.events.push(EventKind::Awaiting { awaiting: opened });
        }
        let open = state.awaiting.as_ref().map(|a| a.id.clone());
        if rules.bind == crate::config::Bind::Commit {
            let void = state.void_other_worktrees(at);
            let voided_at = Some((at, snapshot));
            self.drop_approvals(open.clone(), void.new_commit, Dropped::NewCommit, voided_at);
            self.drop_approvals(
                open.clone(),
                void.worktree_changed,
                Dropped::WorktreeChanged,
                voided_at,
            );
        }
        let Some(used) = state.release(rules.required) else {
            return false;
        };
        self.events.push(EventKind::ApprovalsUsed {
            tick: self.number,
            ids: used.iter().map(|a| a.id.clone()).collect(),
            by: used.into_iter().map(|a| a.by).collect(),
            await_id: open.clone(),
            approved_config: None,
        });
        if let Some((_, left)) = state.close_await() {
            self.drop_approvals(open, left, Dropped::Released, None);
        }
        true
    }

    /// The bookkeeping of what ran, committed with the tick: the tick
    /// count, the last tick, failures, progress and metrics, before the
    /// after-step gates see them.
    fn record_results(
        &mut self,
        state: &mut State,
        started_at: Timestamp,
        decision: Decision,
        stepped: &Stepped,
    ) {
        let (number, ran, worktree_changed) = (self.number, &stepped.ran, stepped.worktree_changed);
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
        let reported = match &ran.run_dir {
            Some(dir) => metrics::read_metrics_in(dir, crate::runs::METRICS),
            None => Ok(Default::default()),
        };
        match reported {
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
                        message: crate::bounds::text(message),
                    });
                }
                state.metrics = m;
            }
            Err(e) => {
                tracing::warn!("loop {:?}: tick {number}: {e}", self.store.name().as_str());
                state.metrics.clear();
                self.events.push(EventKind::MetricsWarning {
                    tick: number,
                    message: crate::bounds::text(e.to_string()),
                });
            }
        }
        state.last_tick = Some(LastTick {
            number,
            started_at,
            ended_at: crate::clock::now(),
            outcome: if ran.failed() {
                Outcome::Failed
            } else {
                Outcome::Ran
            },
            decision,
            step: ran.step.clone(),
            verifier: ran.verifier.clone(),
            worktree_changed,
            host: Some(crate::who::host()),
            head: stepped.head.clone(),
            cancelled: ran.failure.as_ref().and_then(|f| f.cancellation()).cloned(),
        });
    }

    /// Ends a tick whose step did not run: one commit of what changed and
    /// the tick's events; an inactive tick that changed nothing commits
    /// nothing.
    fn end_early(
        &mut self,
        session: &mut dyn Session,
        state: &mut State,
        changed: bool,
        outcome: Outcome,
        reason: String,
    ) -> Result<Before> {
        let reason = crate::bounds::text(reason);
        // Still awaiting approval as at the last firing: the firing that
        // started the wait recorded it, and this one records nothing.
        let repeat_await = outcome == Outcome::AwaitingApproval && !changed;
        if repeat_await {
            self.events
                .retain(|e| !matches!(e, EventKind::Gate { .. } | EventKind::BudgetCapped { .. }));
        }
        if outcome != Outcome::Inactive && !repeat_await {
            self.events.push(EventKind::Tick {
                tick: self.number,
                outcome,
                reason: Some(reason.clone()),
                step: None,
                verifier: None,
                worktree_changed: None,
                host: None,
                head: None,
                metrics: Default::default(),
                config: Some(self.current.hashes.clone()),
                confinement: None,
                fired_by: Some(self.fired_by),
                cancelled: None,
            });
        }
        let noted = self.note_gate_error(state);
        if changed || noted || !self.events.is_empty() {
            let events = std::mem::take(&mut self.events);
            session.commit(&self.actor, state, events, Durability::Full)?;
        }
        Ok(Before::Ended(TickReport {
            loop_name: self.store.name().to_string(),
            tick: self.number,
            outcome,
            reason: Some(reason),
            decisions: std::mem::take(&mut self.verdicts),
            step: None,
            verifier: None,
            recovered_crash: self.recovered.map(|(tick, _)| tick),
            crashed_started: self.recovered.map(|(_, at)| at),
            started_waiting: false,
            facts: None,
            first_disagreed: Vec::new(),
        }))
    }
}

/// The gates of a phase that asked for approval.
fn asked(phase: &gates::PhaseResult) -> Vec<Asked> {
    phase
        .verdicts
        .iter()
        .filter(|v| matches!(v.decision, Decision::AwaitApproval(_)))
        .map(|v| Asked {
            gate: v.gate.clone(),
            version: v.version.clone(),
            reason: v.decision.reason().to_owned(),
        })
        .collect()
}
