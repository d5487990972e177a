//! The stock gates embedded in the binary: each one's decisions over
//! representative contexts, through the library and through `gate test`,
//! and `gate list`.

use assert_cmd::Command;
use automaton::domain::{Context, Decision, GateSource, Limits, RunResult};
use automaton::gate::{GateErrorKind, GateHost, stock_gates};
use serde_json::json;

use crate::common::{Env, shared_cache, warm_stock_gate};

/// A host on the test run's shared cache, every stock gate compiled there.
fn host() -> GateHost {
    for name in NAMES {
        warm_stock_gate(name);
    }
    GateHost::new(Some(shared_cache().to_path_buf())).unwrap()
}

const NAMES: [&str; 8] = [
    "approve-every",
    "max-failures",
    "context-floor",
    "budget",
    "time-window",
    "max-ticks",
    "backoff",
    "no-progress",
];

/// 2026-11-27 (a Friday) at `hh:mm` UTC.
fn at(hh: u32, mm: u32) -> jiff::Timestamp {
    format!("2026-11-27T{hh:02}:{mm:02}:00Z").parse().unwrap()
}

/// (gate, params, context, the decision's name) for each case.
fn cases() -> Vec<(&'static str, serde_json::Value, Context, &'static str)> {
    let base = Context::default;
    let run = |changed: Option<bool>, ended: jiff::Timestamp| RunResult {
        tick: 4,
        exit_code: Some(1),
        duration_ms: 1000,
        timed_out: false,
        verifier_passed: None,
        worktree_changed: changed,
        ended_at: ended,
    };
    vec![
        (
            "approve-every",
            json!({"every": 3}),
            Context { tick: 0, ..base() },
            "proceed",
        ),
        (
            "approve-every",
            json!({"every": 3}),
            Context { tick: 3, ..base() },
            "await-approval",
        ),
        (
            "approve-every",
            json!({"every": 3}),
            Context { tick: 4, ..base() },
            "proceed",
        ),
        (
            "max-failures",
            json!({"max": 3}),
            Context {
                consecutive_failures: 2,
                ..base()
            },
            "proceed",
        ),
        (
            "max-failures",
            json!({"max": 3}),
            Context {
                consecutive_failures: 3,
                ..base()
            },
            "halt",
        ),
        (
            "context-floor",
            json!({"metric": "context_left", "min": 0.2}),
            base(),
            "proceed",
        ),
        (
            "context-floor",
            json!({"metric": "context_left", "min": 0.2}),
            Context {
                metrics: json!({"context_left": 0.1}),
                ..base()
            },
            "halt",
        ),
        (
            "context-floor",
            json!({"metric": "context_left", "min": 0.2}),
            Context {
                metrics: json!({"context_left": 0.5}),
                ..base()
            },
            "proceed",
        ),
        (
            "budget",
            json!({"metric": "cost_usd", "max": 20.0}),
            Context {
                totals: json!({"cost_usd": 5.0}),
                ..base()
            },
            "proceed",
        ),
        (
            "budget",
            json!({"metric": "cost_usd", "max": 20.0}),
            Context {
                totals: json!({"cost_usd": 20.5}),
                ..base()
            },
            "halt",
        ),
        (
            "time-window",
            json!({"start": "09:00", "end": "17:00"}),
            Context {
                now: at(10, 0),
                ..base()
            },
            "proceed",
        ),
        (
            "time-window",
            json!({"start": "09:00", "end": "17:00"}),
            Context {
                now: at(20, 0),
                ..base()
            },
            "skip",
        ),
        (
            "max-ticks",
            json!({"max": 3}),
            Context { tick: 2, ..base() },
            "proceed",
        ),
        (
            "max-ticks",
            json!({"max": 3}),
            Context { tick: 3, ..base() },
            "complete",
        ),
        (
            "backoff",
            json!({"base": "1m", "max": "1h"}),
            Context {
                consecutive_failures: 2,
                last_run: Some(run(None, at(10, 0))),
                now: at(10, 1),
                ..base()
            },
            "skip",
        ),
        (
            "backoff",
            json!({"base": "1m", "max": "1h"}),
            Context {
                consecutive_failures: 2,
                last_run: Some(run(None, at(10, 0))),
                now: at(11, 0),
                ..base()
            },
            "proceed",
        ),
        (
            "no-progress",
            json!({"max": 3}),
            Context {
                unchanged_ticks: 3,
                last_run: Some(run(Some(false), at(10, 0))),
                ..base()
            },
            "halt",
        ),
        (
            "no-progress",
            json!({"max": 3}),
            Context {
                unchanged_ticks: 1,
                last_run: Some(run(Some(false), at(10, 0))),
                ..base()
            },
            "proceed",
        ),
    ]
}

#[test]
fn every_stock_gate_is_embedded_and_describes_itself() {
    let names: Vec<&str> = stock_gates().iter().map(|g| g.name).collect();
    assert_eq!(names, NAMES);
    let host = host();
    for name in NAMES {
        let gate = host.load(&GateSource::Stock(name.into())).unwrap();
        let info = host.describe(&gate).unwrap();
        assert_eq!(info.name, name);
        assert!(!info.version.is_empty() && !info.description.is_empty());
        let schema: serde_json::Value = serde_json::from_str(&info.params_schema).unwrap();
        assert_eq!(schema["type"], "object", "{name}");
        assert_eq!(gate.label(), format!("stock:{name}"));
    }
}

#[test]
fn stock_gate_decisions_through_the_library() {
    let host = host();
    for (name, params, ctx, expected) in cases() {
        let gate = host.load(&GateSource::Stock(name.into())).unwrap();
        host.check_params(&gate, &params).unwrap();
        let ctx = Context { params, ..ctx };
        let e = host.evaluate(&gate, &ctx, &Limits::default()).unwrap();
        assert_eq!(e.decision.name(), expected, "{name}: {:?}", e.decision);
        if e.decision != Decision::Proceed {
            assert!(!e.decision.reason().is_empty(), "{name}");
        }
    }
}

#[test]
fn stock_gates_reject_bad_params() {
    let host = host();
    for name in NAMES {
        let gate = host.load(&GateSource::Stock(name.into())).unwrap();
        host.describe(&gate).unwrap();
        let err = host
            .check_params(&gate, &json!({"no_such_param": 1}))
            .unwrap_err();
        assert!(
            matches!(err.kind(), GateErrorKind::ParamsRejected { .. }),
            "{name}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("gate stock:{name} ({name} ")),
            "{err}"
        );
        // Evaluating with bad params is a refusal, not a crash.
        let ctx = Context {
            params: json!({"no_such_param": 1}),
            ..Context::default()
        };
        let err = host.evaluate(&gate, &ctx, &Limits::default()).unwrap_err();
        assert!(
            matches!(err.kind(), GateErrorKind::Refused { .. }),
            "{name}: {err:?}"
        );
    }
}

#[test]
fn stock_gate_decisions_through_gate_test() {
    let env = Env::new();
    for name in NAMES {
        warm_stock_gate(name);
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, params, ctx, expected) in cases() {
        if !seen.insert(name) {
            continue; // one run of the binary per gate keeps this quick
        }
        let out = Command::from_std(env.cmd())
            .args([
                "gate",
                "test",
                &format!("stock:{name}"),
                "--context",
                "-",
                "--json",
            ])
            .arg("--params")
            .arg(params.to_string())
            .write_stdin(serde_json::to_string(&ctx).unwrap())
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["decision"], expected, "{name}: {v}");
        assert_eq!(v["gate"], format!("stock:{name}"));
    }
}

#[test]
fn gate_list_shows_every_stock_gate() {
    let env = Env::new();
    let out = Command::from_std(env.cmd())
        .args(["gate", "list", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES);
    let table = Command::from_std(env.cmd())
        .args(["gate", "list"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let table = String::from_utf8(table).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME ") && lines[0].contains("VERSION"),
        "{table}"
    );
    assert_eq!(lines.len(), 1 + NAMES.len(), "{table}");
    for (line, name) in lines[1..].iter().zip(NAMES) {
        assert!(line.starts_with(&format!("{name} ")), "{table}");
    }
}

/// The budget gate shows its total as the host shows numbers: 37 ticks of
/// 0.03 add up to 1.1100000000000008 in floating point, which the halt
/// reason (and so `status`) says as 1.11.
#[test]
fn the_budget_gate_says_its_total_as_the_host_shows_numbers() {
    let env = Env::new();
    env.new_loop(
        "spender",
        "step = \"echo cost_usd=0.03 > \\\"$AUTOMATON_METRICS\\\"\"\n\
         [[gate]]\nstock = \"budget\"\nphase = [\"after-step\"]\n\
         params = { metric = \"cost_usd\", max = 1.11 }\n",
    );
    let mut ticks = 0;
    while env.state("spender")["status"] == "active" {
        assert!(ticks < 37, "still active after {ticks} ticks");
        env.run(&["tick", "spender"]);
        ticks += 1;
    }
    assert_eq!(ticks, 37);
    let state = env.state("spender");
    let total = (0..37).fold(0.0, |t: f64, _| t + 0.03);
    assert_eq!(total.to_string(), "1.1100000000000008");
    assert_eq!(state["totals"]["cost_usd"], total);
    assert_eq!(state["status_reason"], "budget spent: cost_usd 1.11 ≥ 1.11");
    let status = env.ok(&["status", "spender"]);
    assert!(
        status.contains("halted (budget spent: cost_usd 1.11 ≥ 1.11)"),
        "{status}"
    );
}
