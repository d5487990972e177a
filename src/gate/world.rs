//! The worlds of `automaton:gate` this host links, one for each minor
//! version it accepts: `wit/gate.wit` (0.3.0), `wit/0.2.0/gate.wit` and
//! `wit/0.1.0/gate.wit`. A
//! gate is called in the world it was built against, which its imports
//! name (`automaton:gate/types@0.1.0`), so a gate built against 0.1.0 keeps
//! running unchanged and sees what 0.1.0 carries; the mapping of a
//! [`Context`] onto each version's types is here.

use wasmtime::Store;
use wasmtime::component::{HasSelf, InstancePre, Linker};

use super::sandbox::{HostState, LogLevel, millis};
use crate::domain::{Context, Decision, HistoryRequest, Phase};

/// Bindings generated from `wit/0.1.0/gate.wit`.
pub(crate) mod v0_1 {
    wasmtime::component::bindgen!({
        path: "wit/0.1.0",
        world: "gate",
    });
}

/// Bindings generated from `wit/0.2.0/gate.wit`.
pub(crate) mod v0_2 {
    wasmtime::component::bindgen!({
        path: "wit/0.2.0",
        world: "gate",
    });
}

/// Bindings generated from `wit/gate.wit`.
pub(crate) mod v0_3 {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "gate",
    });
}

/// The `automaton:gate` versions this host offers, oldest first; the last
/// is wit/gate.wit's.
pub(super) const VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0"];

/// What a gate says about itself, in any version.
pub(crate) struct Info {
    pub name: String,
    pub version: String,
    pub description: String,
    pub params_schema: String,
    /// What of the history it asks for (nothing before 0.3.0).
    pub history: HistoryRequest,
}

/// A component pre-instantiated for the world it was built against.
#[derive(Clone)]
pub(crate) enum Pre {
    V0_1(v0_1::GatePre<HostState>),
    V0_2(v0_2::GatePre<HostState>),
    V0_3(v0_3::GatePre<HostState>),
}

/// An instance of a gate, in its world.
pub(crate) enum World {
    V0_1(v0_1::Gate),
    V0_2(v0_2::Gate),
    V0_3(v0_3::Gate),
}

/// A context in one version's shape, made before the call.
pub(crate) enum WitContext {
    V0_1(v0_1::automaton::gate::types::Context),
    V0_2(v0_2::automaton::gate::types::Context),
    V0_3(v0_3::automaton::gate::types::Context),
}

/// Links the host's imports of every version.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    v0_1::Gate::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    v0_2::Gate::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    v0_3::Gate::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
}

impl Pre {
    /// `pre` checked against the world of `version`, the one the
    /// component's imports name; when they name none, the newest world it
    /// fits (the newest's error when it fits none).
    pub(crate) fn new(pre: InstancePre<HostState>, version: Option<&str>) -> wasmtime::Result<Pre> {
        let minor = version
            .and_then(|v| v.strip_prefix("0."))
            .and_then(|v| v.split('.').next());
        match minor {
            Some("1") => Ok(Pre::V0_1(v0_1::GatePre::new(pre)?)),
            Some("2") => Ok(Pre::V0_2(v0_2::GatePre::new(pre)?)),
            Some("3") => Ok(Pre::V0_3(v0_3::GatePre::new(pre)?)),
            _ => match v0_3::GatePre::new(pre.clone()) {
                Ok(p) => Ok(Pre::V0_3(p)),
                Err(newest) => v0_2::GatePre::new(pre.clone())
                    .map(Pre::V0_2)
                    .or_else(|_| v0_1::GatePre::new(pre).map(Pre::V0_1))
                    .map_err(|_| newest),
            },
        }
    }

    /// The version of the world the gate is called in.
    pub(crate) fn version(&self) -> &'static str {
        match self {
            Pre::V0_1(_) => VERSIONS[0],
            Pre::V0_2(_) => VERSIONS[1],
            Pre::V0_3(_) => VERSIONS[2],
        }
    }

    pub(crate) fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<World> {
        Ok(match self {
            Pre::V0_1(p) => World::V0_1(p.instantiate(store)?),
            Pre::V0_2(p) => World::V0_2(p.instantiate(store)?),
            Pre::V0_3(p) => World::V0_3(p.instantiate(store)?),
        })
    }

    /// `ctx` in the shape of this gate's version.
    pub(crate) fn context(&self, ctx: &Context) -> WitContext {
        match self {
            Pre::V0_1(_) => WitContext::V0_1(to_v0_1(ctx)),
            Pre::V0_2(_) => WitContext::V0_2(to_v0_2(ctx)),
            Pre::V0_3(_) => WitContext::V0_3(to_v0_3(ctx)),
        }
    }
}

impl World {
    pub(crate) fn call_describe(&self, store: &mut Store<HostState>) -> wasmtime::Result<Info> {
        macro_rules! info {
            ($i:expr, $history:expr) => {{
                let i = $i;
                Info {
                    history: $history(&i),
                    name: i.name,
                    version: i.version,
                    description: i.description,
                    params_schema: i.params_schema,
                }
            }};
        }
        Ok(match self {
            World::V0_1(g) => info!(g.call_describe(store)?, |_| HistoryRequest::default()),
            World::V0_2(g) => info!(g.call_describe(store)?, |_| HistoryRequest::default()),
            World::V0_3(g) => info!(
                g.call_describe(store)?,
                |i: &v0_3::automaton::gate::types::GateInfo| {
                    HistoryRequest {
                        runs: i.history.runs,
                        windows_ms: i.history.windows_ms.clone(),
                    }
                }
            ),
        })
    }

    pub(crate) fn call_check_params(
        &self,
        store: &mut Store<HostState>,
        params: &str,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            World::V0_1(g) => g.call_check_params(store, params),
            World::V0_2(g) => g.call_check_params(store, params),
            World::V0_3(g) => g.call_check_params(store, params),
        }
    }

    pub(crate) fn call_evaluate(
        &self,
        store: &mut Store<HostState>,
        ctx: &WitContext,
    ) -> wasmtime::Result<Result<Decision, String>> {
        Ok(match (self, ctx) {
            (World::V0_1(g), WitContext::V0_1(c)) => g.call_evaluate(store, c)?.map(Decision::from),
            (World::V0_2(g), WitContext::V0_2(c)) => g.call_evaluate(store, c)?.map(Decision::from),
            (World::V0_3(g), WitContext::V0_3(c)) => g.call_evaluate(store, c)?.map(Decision::from),
            _ => {
                return Err(wasmtime::Error::msg(
                    "a context of another version than the gate's",
                ));
            }
        })
    }
}

/// The parts of each version's WIT that are the same in all of them: the
/// host's `log`, the decision, and the context's fields up to `totals`
/// (`$extra` adds a later version's).
macro_rules! version {
    ($m:ident, $to_wit:ident, $($extra:ident: $value:expr),*) => {
        impl $m::automaton::gate::types::Host for HostState {}

        impl From<$m::automaton::gate::types::Level> for LogLevel {
            fn from(level: $m::automaton::gate::types::Level) -> LogLevel {
                use $m::automaton::gate::types::Level as L;
                match level {
                    L::Trace => LogLevel::Trace,
                    L::Debug => LogLevel::Debug,
                    L::Info => LogLevel::Info,
                    L::Warn => LogLevel::Warn,
                    L::Error => LogLevel::Error,
                }
            }
        }

        impl From<$m::automaton::gate::types::Decision> for Decision {
            fn from(d: $m::automaton::gate::types::Decision) -> Decision {
                use $m::automaton::gate::types::Decision as D;
                match d {
                    D::Proceed => Decision::Proceed,
                    D::Skip(r) => Decision::Skip(r),
                    D::AwaitApproval(r) => Decision::AwaitApproval(r),
                    D::Halt(r) => Decision::Halt(r),
                    D::Complete(r) => Decision::Complete(r),
                }
            }
        }

        /// The WIT `context` of this version for a [`Context`].
        fn $to_wit(ctx: &Context) -> $m::automaton::gate::types::Context {
            use $m::automaton::gate::types as wit;
            wit::Context {
                loop_name: ctx.loop_name.clone(),
                phase: match ctx.phase {
                    Phase::BeforeStep => wit::Phase::BeforeStep,
                    Phase::AfterStep => wit::Phase::AfterStep,
                },
                tick: ctx.tick,
                now_ms: millis(ctx.now),
                last_run: ctx.last_run.as_ref().map(|r| wit::RunResult {
                    tick: r.tick,
                    exit_code: r.exit_code,
                    duration_ms: r.duration_ms,
                    timed_out: r.timed_out,
                    verifier_passed: r.verifier_passed,
                    worktree_changed: r.worktree_changed,
                    ended_at_ms: millis(r.ended_at),
                }),
                consecutive_failures: ctx.consecutive_failures,
                unchanged_ticks: ctx.unchanged_ticks,
                pending_approvals: ctx.pending_approvals.iter().map(|a| approval!(wit, a)).collect(),
                params: ctx.params.to_string(),
                state: ctx.state.to_string(),
                metrics: ctx.metrics.to_string(),
                totals: ctx.totals.to_string(),
                $($extra: $value(ctx),)*
            }
        }
    };
}

macro_rules! approval {
    ($wit:ident, $a:expr) => {{
        let a = $a;
        $wit::Approval {
            id: a.id.clone(),
            by: a.by.clone(),
            at_ms: millis(a.at),
            note: a.note.clone(),
        }
    }};
}

/// The host's `log`, the one import of the versions before 0.3.0.
macro_rules! log_only {
    ($m:ident) => {
        impl $m::automaton::gate::host::Host for HostState {
            fn log(&mut self, level: $m::automaton::gate::types::Level, message: String) {
                self.log_line(level.into(), message);
            }
        }
    };
}

/// The 0.2.0 parts of a version's context (`$m`: 0.2.0 on).
macro_rules! since_v0_2 {
    ($m:ident, $commits:ident, $await:ident) => {
        fn $commits(ctx: &Context) -> Option<$m::automaton::gate::types::Commits> {
            let c = ctx.commits.as_ref()?;
            Some($m::automaton::gate::types::Commits {
                branch: c.branch.clone(),
                head_before: c.head_before.clone(),
                head_after: c.head_after.clone(),
            })
        }

        fn $await(ctx: &Context) -> Option<$m::automaton::gate::types::PendingAwait> {
            use $m::automaton::gate::types as wit;
            let a = ctx.pending_await.as_ref()?;
            Some(wit::PendingAwait {
                id: a.id.clone(),
                tick: a.tick,
                asked: a
                    .asked
                    .iter()
                    .map(|g| wit::Asked {
                        gate: g.gate.clone(),
                        version: g.version.clone(),
                        reason: g.reason.clone(),
                    })
                    .collect(),
                since_ms: millis(a.since),
                head: a.head.clone(),
                approvals: a.approvals.iter().map(|x| approval!(wit, x)).collect(),
            })
        }
    };
}

version!(v0_1, to_v0_1,);
log_only!(v0_1);
version!(v0_2, to_v0_2, commits: commits_v0_2, pending_await: await_v0_2);
log_only!(v0_2);
since_v0_2!(v0_2, commits_v0_2, await_v0_2);
version!(
    v0_3,
    to_v0_3,
    commits: commits_v0_3,
    pending_await: await_v0_3,
    history: history_v0_3,
    budgets: budgets_v0_3
);
since_v0_2!(v0_3, commits_v0_3, await_v0_3);

impl v0_3::automaton::gate::host::Host for HostState {
    fn log(&mut self, level: v0_3::automaton::gate::types::Level, message: String) {
        self.log_line(level.into(), message);
    }

    fn in_zone(
        &mut self,
        at_ms: i64,
        zone: String,
    ) -> Result<v0_3::automaton::gate::types::LocalTime, String> {
        let t = super::zone::in_zone(at_ms, &zone)?;
        Ok(v0_3::automaton::gate::types::LocalTime {
            year: t.year,
            month: t.month,
            day: t.day,
            hour: t.hour,
            minute: t.minute,
            second: t.second,
            millisecond: t.millisecond,
            weekday: t.weekday,
            offset_seconds: t.offset_seconds,
            dst: t.dst,
            abbreviation: t.abbreviation,
        })
    }
}

fn history_v0_3(ctx: &Context) -> v0_3::automaton::gate::types::History {
    use v0_3::automaton::gate::types as wit;
    let json =
        |m: &std::collections::BTreeMap<String, f64>| serde_json::to_string(m).expect("numbers serialise");
    wit::History {
        runs: ctx
            .history
            .runs
            .iter()
            .map(|r| wit::PastRun {
                tick: r.tick,
                ended_at_ms: r.ended_at_ms,
                outcome: if r.ok {
                    wit::RunOutcome::Ran
                } else {
                    wit::RunOutcome::Failed
                },
                metrics: json(&r.metrics),
            })
            .collect(),
        windows: ctx
            .history
            .windows
            .iter()
            .map(|w| wit::WindowSums {
                window_ms: w.window_ms,
                runs: w.runs,
                failures: w.failures,
                sums: json(&w.sums),
            })
            .collect(),
    }
}

fn budgets_v0_3(ctx: &Context) -> Vec<v0_3::automaton::gate::types::Budget> {
    ctx.budgets
        .iter()
        .map(|b| v0_3::automaton::gate::types::Budget {
            name: b.name.clone(),
            metric: b.metric.clone(),
            window: b.window.clone(),
            spent: b.spent,
            reserved: b.reserved,
            cap: b.cap,
            window_end_ms: b.window_end_ms,
        })
        .collect()
}
