//! `gate replay` as a gate author and CI use it: on a loop with two gates
//! it replays only the gate being replaced, sums its answer up by
//! transition, marks what follows a differing stop as counterfactual,
//! checks params before any row, and says by its exit status whether
//! anything differs.

use crate::common::Env;

/// A loop with two gates and four ticks that all ran.
fn two_gates() -> Env {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"echo cost_usd=1 > \\\"$AUTOMATON_METRICS\\\"\"\n\
         [[gate]]\nstock = \"max-ticks\"\nparams = { max = 100 }\n\
         [[gate]]\nstock = \"budget\"\nparams = { metric = \"cost_usd\", max = 100.0 }\n",
    );
    for _ in 0..4 {
        env.ok(&["tick", "demo"]);
    }
    env
}

fn replay(env: &Env, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["gate", "replay", "demo"];
    all.extend(args);
    let out = env.run(&all);
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn replay_on_a_two_gate_loop_replays_only_the_gate_it_replaces_and_exits_11_when_a_decision_differs() {
    let env = two_gates();
    let (code, out, err) = replay(
        &env,
        &["--gate", "stock:max-ticks", "--params", "{\"max\": 2}", "--json"],
    );
    assert_eq!(code, 11, "a decision differs: {err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 4, "only max-ticks's evaluations, not budget's: {out}");
    assert!(rows.iter().all(|r| r["gate"] == "stock:max-ticks"));
    let marks: Vec<(u64, bool, bool)> = rows
        .iter()
        .map(|r| {
            (
                r["tick"].as_u64().unwrap(),
                r["differs"].as_bool().unwrap(),
                r["counterfactual"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        marks,
        [
            (1, false, false),
            (2, false, false),
            (3, true, false),
            (4, true, true)
        ],
        "tick 4 follows the complete tick 3 would have been"
    );
    assert_eq!(rows[2]["transition"], "proceed→complete");
    let (code, human, _) = replay(
        &env,
        &[
            "--gate",
            "stock:max-ticks",
            "--params",
            "{\"max\": 2}",
            "--diff-only",
        ],
    );
    assert_eq!(code, 11);
    assert!(human.contains("proceed→complete ×2"), "{human}");
    assert!(human.contains("reason-only changes: 0"), "{human}");
    assert!(
        human.contains("counterfactual (after a differing halt or complete): 1"),
        "{human}"
    );
    assert!(human.contains("2 of 4 decisions would differ"), "{human}");
    let shown = human.lines().filter(|l| l.contains("before-step")).count();
    assert_eq!(shown, 2, "--diff-only: {human}");
    let (code, out, _) = replay(
        &env,
        &[
            "--gate",
            "stock:max-ticks",
            "--params",
            "{\"max\": 2}",
            "--summary",
            "--json",
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(code, 11);
    assert_eq!(
        summary,
        serde_json::json!({"rows": 4, "differ": 2, "reason_only": 0, "counterfactual": 1,
                           "transitions": {"proceed→complete": 2}})
    );
    let (code, out, _) = replay(&env, &["--gate", "stock:max-ticks", "--params", "{\"max\": 50}"]);
    assert_eq!(code, 0, "nothing differs: {out}");
    assert!(out.contains("0 of 4 decisions would differ"), "{out}");
    let (code, out, _) = replay(
        &env,
        &["--gate", "stock:max-ticks", "--of", "stock:budget", "--json"],
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!((code, rows.len()), (11, 4), "--of names the gate replaced");
}

#[test]
fn replay_checks_its_params_once_before_any_row() {
    let env = two_gates();
    let (code, out, err) = replay(&env, &["--gate", "stock:max-ticks", "--params", "{\"max\": 0}"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "no row: {out}");
    assert!(err.contains("stock:max-ticks") && err.contains("params"), "{err}");
    let (code, _, err) = replay(
        &env,
        &["--gate", "stock:approve-every", "--params", "{\"every\": 2}"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no recorded gate is named \"approve-every\"") && err.contains("--of"),
        "{err}"
    );
}
