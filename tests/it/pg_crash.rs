//! A budgeted tick on PostgreSQL killed at each message it sends the
//! server (strace kills the runner as it makes its k-th `sendto`, the
//! message unsent): before its reservation, after it and before the
//! `in_flight` commit, during the step, before the settlement, before the
//! tick's record. What the server's tables say after the kill and after the
//! next tick: a hold the dead tick left is settled by the next tick, at
//! its amount, and recorded as the dead tick's; nothing stays held; the
//! account's spend is what history settled, and at most one reservation
//! more for each tick that died.
//!
//! Gated on strace like `crash`: skipped, saying so, unless
//! `AUTOMATON_REQUIRE_STRACE=1`.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::common::{BIN, Env};
use crate::crash::strace_usable;

/// A loop spending into a budget of its own: each tick reserves 1 before
/// its step and settles it (the step reports 1) after.
const BUDGETED: &str = r#"
step = 'echo cost_usd=1 > "$AUTOMATON_METRICS"'
max_per_tick = 1.0
[[budget]]
name = "daily"
window = "1d"
cap = 1000.0
"#;

/// The most messages a tick sends; a run that gets this far unkilled fails
/// the test.
const MAX_K: u32 = 200;

/// `args` run on `env` as its commands are, under strace killing the
/// runner at its `k`-th `sendto` (a short lease, so the next tick need not
/// wait long for it).
fn killed_at(env: &Env, k: u32, args: &[&str]) -> Output {
    let base = env.cmd();
    let mut c = Command::new("strace");
    c.args(["-f", "-o", "/dev/null", "-e"])
        .arg(format!("inject=sendto:signal=SIGKILL:when={k}"))
        .arg(BIN)
        .args(base.get_args())
        .args(args);
    for (key, value) in base.get_envs() {
        match value {
            Some(v) => c.env(key, v),
            None => c.env_remove(key),
        };
    }
    c.env("AUTOMATON_LEASE_TTL", "2s")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The loop's holds on the server: (tick, amount).
fn holds(env: &Env, name: &str) -> Vec<(i64, f64)> {
    env.pg
        .as_ref()
        .unwrap()
        .client()
        .query(
            "SELECT tick, amount FROM budget_holds WHERE loop = $1 ORDER BY tick",
            &[&name],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The account's spend on the server.
fn spent(env: &Env, name: &str) -> f64 {
    env.pg
        .as_ref()
        .unwrap()
        .client()
        .query_opt(
            "SELECT spent FROM budget_accounts WHERE account = $1",
            &[&format!("{name}:daily")],
        )
        .unwrap()
        .map_or(0.0, |r| r.get(0))
}

fn settled(history: &[Value], name: &str) -> f64 {
    history
        .iter()
        .filter(|e| e["kind"] == "budget-settled")
        .filter_map(|e| e["costs"][format!("{name}:daily")].as_f64())
        .sum()
}

#[test]
fn a_budgeted_tick_on_postgresql_killed_at_every_message_leaves_no_hold_unsettled() {
    if !strace_usable("a_budgeted_tick_on_postgresql_killed_at_every_message_leaves_no_hold_unsettled") {
        return;
    }
    let Some(env) = Env::postgres() else { return };
    let mut killed = 0;
    let mut left_held = Vec::new();
    let mut problems = Vec::new();
    for k in 1..=MAX_K {
        assert!(k < MAX_K, "the tick was never done with its messages");
        let name = format!("k{k}");
        env.new_loop(&name, BUDGETED);
        env.ok(&["tick", &name]);
        let out = killed_at(&env, k, &["tick", &name]);
        if out.status.signal() != Some(9) {
            // Every message sent: the tick ran whole.
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert!(holds(&env, &name).is_empty());
            break;
        }
        killed += 1;
        let held = holds(&env, &name);
        let recovered = env.run(&["tick", &name, "--timeout", "60s"]);
        if !recovered.status.success() {
            problems.push(format!(
                "k={k}: the next tick failed: {}",
                String::from_utf8_lossy(&recovered.stderr).trim()
            ));
            continue;
        }
        let history = env.history(&name);
        let after = holds(&env, &name);
        if !after.is_empty() {
            problems.push(format!("k={k}: still held after the next tick: {after:?}"));
        }
        for (tick, amount) in &held {
            left_held.push(k);
            let recorded = history
                .iter()
                .any(|e| e["kind"] == "budget-settled" && e["tick"] == *tick && e["died"] == true);
            if !recorded || (*amount - 1.0).abs() > 1e-9 {
                problems.push(format!(
                    "k={k}: the dead tick {tick}'s hold of {amount} is not recorded as settled at it"
                ));
            }
        }
        let dead: std::collections::BTreeSet<u64> = history
            .iter()
            .filter(|e| e["kind"] == "crashed")
            .filter_map(|e| e["tick"].as_u64())
            .collect();
        let (spent, settled) = (spent(&env, &name), settled(&history, &name));
        if spent < settled - 1e-9 || spent > settled + dead.len() as f64 + 1e-9 {
            problems.push(format!(
                "k={k}: spent {spent}, not within what history settled ({settled}) and one reservation more for each tick that died ({dead:?})"
            ));
        }
    }
    eprintln!(
        "killed at {killed} messages; a hold left by the dead tick at k = {left_held:?}; {} problems",
        problems.len()
    );
    assert!(killed > 0);
    assert!(
        !left_held.is_empty(),
        "no kill fell between a reservation and its settlement"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
