//! `gate test --cases` expecting more than a decision: an error of a kind,
//! a refusal, a rejected param, a reason pattern, a log line; each case's
//! time, `--bench`, and `--json` in plain shapes.

use std::path::{Path, PathBuf};

use crate::common::Env;
use crate::gate_fixtures as fx;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Runs `gate test GATE --cases` on `cases` (a JSON array), expecting
/// `code`: stdout, or stderr for an exit past 1.
fn cases(env: &Env, gate: &str, cases: &serde_json::Value, code: i32, extra: &[&str]) -> String {
    let file = write(&env.scratch(), "cases.json", cases.to_string().as_bytes());
    let mut args = vec!["gate", "test", gate, "--cases", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    // A failing case is a result (stdout); a bad cases file is an error.
    match code {
        0 => env.ok(&args),
        1 => {
            let out = env.run(&args);
            assert_eq!(out.status.code(), Some(1), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        }
        _ => env.fails(code, &args),
    }
}

fn gates(env: &Env) -> (String, String, String) {
    let dir = env.scratch();
    let path = |name: &str, bytes: Vec<u8>| write(&dir, name, &bytes).to_str().unwrap().to_owned();
    (
        path("good.wasm", fx::good()),
        path("panics.wasm", fx::panics()),
        path("refuses.wasm", fx::refuses()),
    )
}

#[test]
fn cases_expect_errors_refusals_rejected_params_patterns_and_logs() {
    let env = Env::new();
    let (good, panics, refuses) = gates(&env);
    let logs = serde_json::json!([
        {"name": "says hello", "expect": {"decision": "proceed", "log": "^info: hello"}},
        {"name": "done", "context": {"tick": 3}, "expect": {"decision": "complete", "reason_matches": "^all \\w+!$"}},
    ]);
    let out = cases(&env, &good, &logs, 0, &[]);
    assert!(out.contains("ok    says hello: proceed ("), "{out}");
    assert!(out.ends_with("2 passed, 0 failed\n"), "{out}");

    let trap = serde_json::json!([
        {"name": "traps", "expect": {"error": "trap", "reason_matches": "boom", "log": "panicked"}},
    ]);
    let out = cases(&env, &panics, &trap, 0, &[]);
    assert!(out.ends_with("1 passed, 0 failed\n"), "{out}");

    let spins = write(&env.scratch(), "spins.wasm", &fx::infinite_loop());
    let timeout = serde_json::json!([{"name": "spins", "expect": {"error": "timeout"}}]);
    let out = cases(&env, spins.to_str().unwrap(), &timeout, 0, &["--timeout", "50ms"]);
    assert!(out.contains("ok    spins: a timeout error: "), "{out}");

    let refusal = serde_json::json!([
        {"name": "refuses", "expect": {"error": "refused", "reason": "cannot read the state"}},
    ]);
    let out = cases(&env, &refuses, &refusal, 0, &[]);
    assert!(
        out.contains("ok    refuses: a refused error: cannot read the state ("),
        "{out}"
    );

    let rejected = serde_json::json!([
        {"name": "zero", "params": {"max": 0}, "expect": {"rejected_param": "max"}},
        {"name": "one", "params": {"max": 1}, "context": {"consecutive_failures": 1}, "expect": {"decision": "halt"}},
    ]);
    let out = cases(&env, "stock:max-failures", &rejected, 0, &[]);
    assert!(out.ends_with("2 passed, 0 failed\n"), "{out}");
}

/// A case that fails says which of its expectations failed, and the run
/// exits non-zero.
#[test]
fn a_failing_expectation_is_named_and_fails_the_run() {
    let env = Env::new();
    let (good, panics, refuses) = gates(&env);
    let out = cases(
        &env,
        &good,
        &serde_json::json!([{"name": "quiet", "expect": {"decision": "proceed", "log": "goodbye"}}]),
        1,
        &[],
    );
    assert!(
        out.contains("FAIL  quiet: no log line matches /goodbye/ (the gate logged 1 line)"),
        "{out}"
    );
    let out = cases(
        &env,
        &good,
        &serde_json::json!([{"name": "done", "context": {"tick": 3}, "expect": {"decision": "complete", "reason_matches": "^nothing"}}]),
        1,
        &[],
    );
    assert!(
        out.contains("FAIL  done: the reason \"all done!\" does not match /^nothing/"),
        "{out}"
    );
    let out = cases(
        &env,
        &good,
        &serde_json::json!([{"name": "fine", "expect": {"error": "trap"}}]),
        1,
        &[],
    );
    assert!(
        out.contains("FAIL  fine: expected a trap error, got proceed"),
        "{out}"
    );
    let out = cases(
        &env,
        &panics,
        &serde_json::json!([{"name": "boom", "expect": {"error": "timeout"}}]),
        1,
        &[],
    );
    assert!(
        out.contains("FAIL  boom: expected a timeout error, got a trap error"),
        "{out}"
    );
    let out = cases(
        &env,
        &refuses,
        &serde_json::json!([{"name": "no", "expect": {"error": "refused", "reason": "busy"}}]),
        1,
        &[],
    );
    assert!(
        out.contains("FAIL  no: expected the reason \"busy\", got \"cannot read the state\""),
        "{out}"
    );
    let out = cases(
        &env,
        "stock:max-failures",
        &serde_json::json!([{"name": "zero", "params": {"max": 0}, "expect": {"rejected_param": "min"}}]),
        1,
        &[],
    );
    assert!(
        out.contains(
            "FAIL  zero: expected \"min\" rejected, but the rejection names it not: max: must be at least 1"
        ),
        "{out}"
    );
    assert!(out.ends_with("0 passed, 1 failed\n"), "{out}");
}

#[test]
fn an_expectation_of_an_unknown_kind_or_a_bad_pattern_names_its_case() {
    let env = Env::new();
    let (good, _, _) = gates(&env);
    let err = cases(
        &env,
        &good,
        &serde_json::json!([{"name": "x", "expect": {"error": "crash"}}]),
        2,
        &[],
    );
    assert!(
        err.contains("invalid case 1 (\"x\")") && err.contains("unknown variant `crash`"),
        "{err}"
    );
    let err = cases(
        &env,
        &good,
        &serde_json::json!([{"expect": {"decision": "skip", "reason_matches": "("}}]),
        2,
        &[],
    );
    assert!(
        err.contains("invalid case 1") && err.contains("invalid pattern \"(\""),
        "{err}"
    );
    let err = cases(
        &env,
        &good,
        &serde_json::json!([{"expect": {"decision": "skip", "error": "trap"}}]),
        2,
        &[],
    );
    assert!(err.contains("a decision and an error"), "{err}");
}

/// `--json` shows what the gate answered as plain objects, each case's
/// time, the failed expectation and the logs; `--bench` adds runs, median
/// and p99.
#[test]
fn cases_json_is_plain_and_bench_times_each_case() {
    let env = Env::new();
    let (good, panics, _) = gates(&env);
    let table = serde_json::json!([{"name": "hello", "expect": {"decision": "proceed"}}]);
    let v: serde_json::Value = serde_json::from_str(&cases(&env, &good, &table, 0, &["--json"])).unwrap();
    let case = &v["cases"][0];
    assert_eq!(case["got"], serde_json::json!({"decision": "proceed"}), "{v}");
    assert_eq!(case["logs"], serde_json::json!(["info: hello, host"]), "{v}");
    assert!(case["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{v}");
    assert!(case.get("failed").is_none() && case.get("bench").is_none(), "{v}");

    let table = serde_json::json!([{"name": "boom", "expect": {"decision": "proceed"}}]);
    let v: serde_json::Value = serde_json::from_str(&cases(&env, &panics, &table, 1, &["--json"])).unwrap();
    let case = &v["cases"][0];
    assert_eq!(case["got"]["error"], "trap", "{v}");
    assert!(case["got"]["message"].as_str().unwrap().contains("boom"), "{v}");
    assert_eq!(
        case["failed"],
        "expected proceed, got a trap error: ".to_owned() + case["got"]["message"].as_str().unwrap(),
        "{v}"
    );

    let table = serde_json::json!([{"name": "hello", "expect": {"decision": "proceed"}}]);
    let out = cases(&env, &good, &table, 0, &["--bench", "20"]);
    assert!(
        out.contains("ok    hello: proceed (median ") && out.contains(" over 20 runs)"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&cases(&env, &good, &table, 0, &["--bench", "--json"])).unwrap();
    let bench = &v["cases"][0]["bench"];
    assert_eq!(bench["runs"], 100, "{v}");
    assert!(
        bench["median_ms"].as_f64().unwrap() <= bench["p99_ms"].as_f64().unwrap(),
        "{v}"
    );
}

/// Takes any object in `check-params`, but describes its params as
/// `start_hour`, a whole hour of the day.
fn schema_gate() -> Vec<u8> {
    fx::WatGate::new("(call $decide (i32.const 0) (i32.const 0) (i32.const 0))")
        .schema(
            r#"{"type":"object","properties":{"start_hour":{"type":"integer","minimum":0,"maximum":23}},"additionalProperties":false}"#,
        )
        .build()
}

/// The host holds params to the gate's own `params-schema`, whatever its
/// `check-params` lets through, in `gate test`, `validate` and `new`,
/// naming the param and the rule.
#[test]
fn params_are_held_to_the_gates_schema_naming_the_param() {
    let env = Env::new();
    let gate = write(&env.scratch(), "hours.wasm", &schema_gate());
    let gate = gate.to_str().unwrap();

    env.ok(&["gate", "test", gate, "--params", r#"{"start_hour": 9}"#]);
    let err = env.fails(1, &["gate", "test", gate, "--params", r#"{"start_hour": 25}"#]);
    assert!(
        err.contains("start_hour: 25 is greater than the maximum of 23 (params-schema: maximum)"),
        "{err}"
    );

    let table = serde_json::json!([
        {"name": "late", "params": {"start_hour": 25}, "expect": {"rejected_param": "start_hour", "reason_matches": "maximum"}},
        {"name": "typo", "params": {"start_hour": 9, "evry": 1}, "expect": {"error": "bad-params", "reason_matches": "evry"}},
        {"name": "fine", "params": {"start_hour": 9}, "expect": {"decision": "proceed"}},
    ]);
    let out = cases(&env, gate, &table, 0, &[]);
    assert!(out.ends_with("3 passed, 0 failed\n"), "{out}");

    let toml = |hour: u32| {
        format!("step = \"true\"\n[[gate]]\npath = \"{gate}\"\nparams = {{ start_hour = {hour} }}\n")
    };
    let file = write(&env.scratch(), "late.toml", toml(25).as_bytes());
    let err = env.fails(5, &["new", "late", "--from", file.to_str().unwrap()]);
    assert!(
        err.contains("start_hour: 25 is greater than the maximum of 23"),
        "{err}"
    );

    env.new_loop("hours", &toml(9));
    // loop.toml replaced behind automaton's back, where its store keeps it.
    match &env.pg {
        Some(pg) => {
            pg.client()
                .execute("UPDATE loops SET config = $1 WHERE name = 'hours'", &[&toml(24)])
                .unwrap();
        }
        None => std::fs::write(env.loop_dir("hours").join("loop.toml"), toml(24)).unwrap(),
    }
    let err = env.fails(5, &["validate", "hours"]);
    assert!(err.contains("loop.toml:4:"), "{err}");
    assert!(
        err.contains("start_hour: 24 is greater than the maximum of 23"),
        "{err}"
    );
}
