//! `resume` after a gate stopped the loop: what `status` says stopped it
//! and what clears it, a warning when the resumed loop would stop again,
//! `--reset-budget`, and the counts a resume starts over.

use std::fs;

use crate::common::Env;

/// A step that spends 0.37 of `cost_usd` a tick, under a budget of 1.
const BUDGETED: &str = "step = \"echo cost_usd=0.37 > \\\"$AUTOMATON_METRICS\\\"\"\n\
    [[gate]]\nstock = \"budget\"\nparams = { metric = \"cost_usd\", max = 1.0 }\n";

fn tick_outcome(env: &Env, name: &str) -> String {
    let out = env.run(&["tick", name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["outcome"].as_str().unwrap().to_owned()
}

#[test]
fn status_names_the_gate_that_halted_a_loop_and_what_clears_it() {
    let env = Env::new();
    env.new_loop("spender", BUDGETED);
    for _ in 0..3 {
        assert_eq!(tick_outcome(&env, "spender"), "ran");
    }
    assert_eq!(tick_outcome(&env, "spender"), "halted");
    let status = env.ok(&["status", "spender"]);
    let row = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} row:\n{status}"))
            .to_owned()
    };
    assert!(
        row("stopped by").contains("gate stock:budget (before-step, tick 4)"),
        "{status}"
    );
    assert!(
        row("to clear").contains("automaton resume spender --reset-budget"),
        "{status}"
    );
    // Three ticks of 0.37 are 1.11, not 1.1099999999999999.
    assert!(row("totals").contains("cost_usd=1.11"), "{status}");
    assert!(!status.contains("1.1099"), "{status}");
    crate::snapshots::settings(&env).bind(|| insta::assert_snapshot!("status_budget_halted", status));
}

#[test]
fn resume_warns_when_the_budget_is_still_spent_and_reset_budget_starts_it_over() {
    let env = Env::new();
    env.new_loop("spender", BUDGETED);
    while tick_outcome(&env, "spender") != "halted" {}
    let out = env.run(&["resume", "spender"]);
    assert!(out.status.success());
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(
        warning.contains("gate stock:budget would halt it again") && warning.contains("--reset-budget"),
        "{warning}"
    );
    // As warned: the next firing halts it again.
    assert_eq!(tick_outcome(&env, "spender"), "halted");

    let out = env.run(&["resume", "spender", "--reset-budget"]);
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("its totals start over (they were cost_usd=1.11)"),
        "{said}"
    );
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let state = env.state("spender");
    assert_eq!(state["status"], "active");
    assert_eq!(state["totals"], serde_json::json!({}));
    let reset = env
        .history("spender")
        .into_iter()
        .find(|e| e["kind"] == "totals-reset")
        .expect("the reset is recorded");
    assert_eq!(reset["by"], "operator");
    assert!(
        (reset["totals"]["cost_usd"].as_f64().unwrap() - 1.11).abs() < 1e-9,
        "{reset}"
    );
    let shown = env.ok(&["history", "spender", "--limit", "2"]);
    assert!(
        shown.contains("totals-reset") && shown.contains("totals={cost_usd=1.11}"),
        "{shown}"
    );
    assert_eq!(tick_outcome(&env, "spender"), "ran");
}

/// After `resume --reset-budget`, `review`'s metrics since count from the
/// reset: never more than the totals they are shown beside.
#[test]
fn review_after_a_budget_reset_counts_the_metrics_since_the_reset() {
    let env = Env::new();
    env.new_loop("spender", BUDGETED);
    while tick_outcome(&env, "spender") != "halted" {}
    env.ok(&["resume", "spender", "--reset-budget"]);
    assert_eq!(tick_outcome(&env, "spender"), "ran");
    let review: serde_json::Value = serde_json::from_str(&env.ok(&["review", "spender", "--json"])).unwrap();
    let since = review["metrics_since"]["cost_usd"].as_f64().unwrap();
    let total = review["totals"]["cost_usd"].as_f64().unwrap();
    assert!((since - 0.37).abs() < 1e-9, "{review:#}");
    assert!((total - 0.37).abs() < 1e-9, "{review:#}");
}

#[test]
fn reset_budget_on_an_active_loop_starts_its_totals_over() {
    let env = Env::new();
    env.new_loop("spender", BUDGETED);
    env.ok(&["tick", "spender"]);
    let version = env.state("spender")["version"].as_u64().unwrap();
    let said = env.ok(&["resume", "spender", "--reset-budget"]);
    assert!(said.contains("already active; its totals start over"), "{said}");
    let state = env.state("spender");
    assert_eq!(state["totals"], serde_json::json!({}));
    assert_eq!(state["version"].as_u64(), Some(version + 1));
    // Nothing left to reset: nothing changes, nothing is recorded.
    env.ok(&["resume", "spender", "--reset-budget"]);
    assert_eq!(env.state("spender")["version"].as_u64(), Some(version + 1));
}

#[test]
fn resume_after_a_no_progress_halt_starts_the_unchanged_count_over() {
    let env = crate::files_only!("writes .state.loop by hand");
    env.new_loop("stuck", "step = \"true\"\n");
    // As a no-progress gate leaves it: halted after three unchanged ticks.
    let path = env.loop_dir("stuck").join(".state.loop");
    let mut state: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    state["status"] = "halted".into();
    state["status_reason"] = "no progress: the worktree did not change for 3 ticks in a row (limit 3)".into();
    state["unchanged_ticks"] = 3.into();
    state["consecutive_failures"] = 2.into();
    fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    env.ok(&["resume", "stuck"]);
    let state = env.state("stuck");
    assert_eq!(state["status"], "active");
    assert_eq!(state["unchanged_ticks"], 0);
    assert_eq!(state["consecutive_failures"], 0);
}
