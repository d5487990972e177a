//! [`export_gate!`](crate::export_gate): the component glue every stock gate
//! crate expands, so each gate crate is one line and the WIT mapping is
//! written once.

/// Exports a [`Gate`](crate::Gate) as a component of the world `gate`.
///
/// Expand it at the root of a `cdylib` crate that sits two folders below the
/// repository root (`gates/NAME/`) and depends on `wit-bindgen` (features
/// `macros`, `realloc`): the bindings are generated from `../../wit/0.1.0`,
/// the first version of the interface: the stock gates read nothing newer,
/// and so prove with every tick that gates built against it keep running.
/// The reported version is that crate's `CARGO_PKG_VERSION`.
///
/// `export_gate!(G, v0_3)` builds against `../../wit` (0.3.0) instead, for
/// a gate that uses the host's `in-zone`; it asks for no history.
#[macro_export]
macro_rules! export_gate {
    ($gate:ty) => {
        mod bindings {
            ::wit_bindgen::generate!({
                world: "gate",
                path: "../../wit/0.1.0",
            });
        }

        $crate::export_gate!(@glue $gate, None, {});
    };
    ($gate:ty, v0_3) => {
        mod bindings {
            ::wit_bindgen::generate!({
                world: "gate",
                path: "../../wit",
            });
        }

        fn in_zone(at_ms: i64, zone: &str) -> Result<$crate::LocalTime, String> {
            bindings::automaton::gate::host::in_zone(at_ms, zone).map(|t| $crate::LocalTime {
                offset_seconds: t.offset_seconds,
            })
        }

        $crate::export_gate!(@glue $gate, Some(in_zone), {
            history: wit::HistoryRequest {
                runs: 0,
                windows_ms: Vec::new(),
            },
        });
    };
    (@glue $gate:ty, $in_zone:expr, { $($info:tt)* }) => {
        use bindings::automaton::gate::types as wit;

        struct Component;

        impl bindings::Guest for Component {
            fn describe() -> wit::GateInfo {
                wit::GateInfo {
                    name: <$gate as $crate::Gate>::NAME.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    description: <$gate as $crate::Gate>::DESCRIPTION.into(),
                    params_schema: <$gate as $crate::Gate>::PARAMS_SCHEMA.into(),
                    $($info)*
                }
            }

            fn check_params(params: String) -> Result<(), String> {
                $crate::check_params::<$gate>(&params).map(|_| ())
            }

            fn evaluate(ctx: wit::Context) -> Result<wit::Decision, String> {
                let ctx = $crate::Context {
                    loop_name: ctx.loop_name,
                    phase: match ctx.phase {
                        wit::Phase::BeforeStep => $crate::Phase::BeforeStep,
                        wit::Phase::AfterStep => $crate::Phase::AfterStep,
                    },
                    tick: ctx.tick,
                    now_ms: ctx.now_ms,
                    last_run: ctx.last_run.map(|r| $crate::RunResult {
                        tick: r.tick,
                        exit_code: r.exit_code,
                        duration_ms: r.duration_ms,
                        timed_out: r.timed_out,
                        verifier_passed: r.verifier_passed,
                        worktree_changed: r.worktree_changed,
                        ended_at_ms: r.ended_at_ms,
                    }),
                    consecutive_failures: ctx.consecutive_failures,
                    unchanged_ticks: ctx.unchanged_ticks,
                    pending_approvals: ctx
                        .pending_approvals
                        .into_iter()
                        .map(|a| $crate::Approval {
                            id: a.id,
                            by: a.by,
                            at_ms: a.at_ms,
                            note: a.note,
                        })
                        .collect(),
                    params: ctx.params,
                    state: ctx.state,
                    metrics: ctx.metrics,
                    totals: ctx.totals,
                    in_zone: $in_zone,
                };
                let mut log = $crate::Log::default();
                let decision = $crate::evaluate::<$gate>(&ctx, &mut log);
                for (level, message) in &log.lines {
                    let level = match level {
                        $crate::Level::Trace => wit::Level::Trace,
                        $crate::Level::Debug => wit::Level::Debug,
                        $crate::Level::Info => wit::Level::Info,
                        $crate::Level::Warn => wit::Level::Warn,
                        $crate::Level::Error => wit::Level::Error,
                    };
                    bindings::automaton::gate::host::log(level, message);
                }
                decision.map(|d| match d {
                    $crate::Decision::Proceed => wit::Decision::Proceed,
                    $crate::Decision::Skip(r) => wit::Decision::Skip(r),
                    $crate::Decision::AwaitApproval(r) => wit::Decision::AwaitApproval(r),
                    $crate::Decision::Halt(r) => wit::Decision::Halt(r),
                    $crate::Decision::Complete(r) => wit::Decision::Complete(r),
                })
            }
        }

        bindings::export!(Component with_types_in bindings);
    };
}
