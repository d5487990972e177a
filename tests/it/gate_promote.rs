//! `gate promote`: a shadow gate made live on its evidence, as a recorded
//! change of loop.toml (its comments kept); refused without enough
//! agreeing evaluations unless forced, and to those who are not operators.

use crate::common::Env;

/// One dollar a tick; a live budget of 100 and, in shadow, one of 1.5,
/// which disagrees from the third tick on.
const LOOP: &str = "step = \"echo cost_usd=1 > \\\"$AUTOMATON_METRICS\\\"\"\n\
    # the budget in force\n\
    [[gate]]\nstock = \"budget\"\nparams = { metric = \"cost_usd\", max = 100.0 }\n\n\
    # the stricter one, tried in shadow first\n\
    [[gate]]\nstock = \"budget\"\nmode = \"shadow\" # until promoted\n\
    params = { metric = \"cost_usd\", max = 1.5 }\n";

/// The loop's loop.toml as its store holds it.
fn config_text(env: &Env) -> String {
    match &env.pg {
        Some(pg) => pg
            .client()
            .query_one("SELECT config FROM loops WHERE name = 'spend'", &[])
            .unwrap()
            .get(0),
        None => std::fs::read_to_string(env.loop_dir("spend").join("loop.toml")).unwrap(),
    }
}

/// Replaces the loop's loop.toml behind automaton's back.
fn set_config(env: &Env, text: &str) {
    match &env.pg {
        Some(pg) => {
            pg.client()
                .execute("UPDATE loops SET config = $1 WHERE name = 'spend'", &[&text])
                .unwrap();
        }
        None => std::fs::write(env.loop_dir("spend").join("loop.toml"), text).unwrap(),
    }
}

fn promotions(env: &Env) -> Vec<serde_json::Value> {
    env.history("spend")
        .into_iter()
        .filter(|e| e["kind"] == "gate-promoted")
        .collect()
}

#[test]
fn promotion_is_refused_without_evidence_and_recorded_with_it() {
    let env = Env::new();
    env.new_loop("spend", LOOP);
    for _ in 0..4 {
        env.ok(&["tick", "spend"]);
    }
    let before = config_text(&env);
    let err = env.fails(1, &["gate", "promote", "spend", "stock:budget", "--min", "3"]);
    assert!(err.contains("2 agreeing evaluations of its last 4"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(config_text(&env), before, "nothing changed");
    assert!(promotions(&env).is_empty());

    // Only an operator may promote.
    set_config(
        &env,
        &format!("{before}[access]\noperators = [\"nobody-else\"]\n"),
    );
    let err = env.fails(10, &["gate", "promote", "spend", "stock:budget", "--min", "2"]);
    assert!(err.contains("gate promote"), "{err}");
    set_config(&env, &before);

    let out = env.ok(&["gate", "promote", "spend", "stock:budget", "--min", "2", "--json"]);
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (answer["agreed"].as_u64(), answer["evaluations"].as_u64()),
        (Some(2), Some(4))
    );
    let after = config_text(&env);
    assert!(
        after.contains("# the budget in force") && after.contains("# the stricter one"),
        "{after}"
    );
    let doc: toml::Table = after.parse().unwrap();
    let modes: Vec<Option<&str>> = doc["gate"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.get("mode").and_then(|m| m.as_str()))
        .collect();
    assert_eq!(modes, [Some("shadow"), None], "the two swapped: {after}");
    let p = &promotions(&env)[0];
    assert_eq!(p["gate"], "stock:budget");
    assert_eq!(p["replaced"], "stock:budget");
    assert_eq!(p["now"], "shadow");
    assert_eq!(
        (p["agreed"].as_u64(), p["evaluations"].as_u64()),
        (Some(2), Some(4))
    );
    let ticks: Vec<u64> = p["disagreements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["tick"].as_u64().unwrap())
        .collect();
    assert_eq!(ticks, [3, 4], "{p}");
    assert!(p.get("forced").is_none(), "{p}");
    assert!(p["by"].is_string() && p["actor"]["user"] == p["by"], "{p}");
    let changed = env
        .history("spend")
        .into_iter()
        .rfind(|e| e["kind"] == "config-changed")
        .unwrap();
    assert_eq!(changed["via"], "promote", "{changed}");

    // The promoted gate is in force now; the old one runs in its shadow.
    env.fails(7, &["tick", "spend"]);
    assert_eq!(env.state("spend")["status"], "halted");

    // Forced, and the replaced gate removed: recorded as forced.
    env.ok(&["gate", "promote", "spend", "stock:budget", "--force", "--remove"]);
    let p = promotions(&env).pop().unwrap();
    assert_eq!(
        (p["forced"].as_bool(), p["now"].as_str()),
        (Some(true), Some("removed")),
        "{p}"
    );
    let doc: toml::Table = config_text(&env).parse().unwrap();
    let gates = doc["gate"].as_array().unwrap();
    assert_eq!(gates.len(), 1);
    assert_eq!(
        gates[0]["params"]["max"].as_float(),
        Some(100.0),
        "the old budget is live again"
    );
}

/// `examples/shadow/run.sh`, the worked example of docs/writing-gates.md,
/// runs to its end: replay exits 11, the promotion is made, the next tick
/// halts under the promoted budget.
#[test]
fn the_shadow_example_runs_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/shadow/run.sh");
    let mut cmd = std::process::Command::new("sh");
    crate::common::isolate(&mut cmd);
    let out = cmd
        .arg(&script)
        .arg(&root)
        .env("BIN", crate::common::BIN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("proceed→halt ×2") && stdout.contains("exit 11"),
        "{stdout}"
    );
    assert!(
        stdout.contains("promoted gate stock:budget of loop spend"),
        "{stdout}"
    );
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("loops/spend/.state.loop")).unwrap()).unwrap();
    assert_eq!(state["status"], "halted");
}

/// With `[approval] config_changes = "await"`, a promotion is a change of
/// the rules the next tick awaits an approval of before any gate runs.
#[test]
fn a_loop_that_awaits_config_changes_awaits_an_approval_of_a_promotion() {
    let env = Env::new();
    env.new_loop(
        "spend",
        &format!("{LOOP}[approval]\nconfig_changes = \"await\"\n"),
    );
    for _ in 0..2 {
        env.ok(&["tick", "spend"]);
    }
    env.ok(&["gate", "promote", "spend", "stock:budget", "--min", "2"]);
    let out = env.ok(&["tick", "spend", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"], "awaiting-approval", "{v}");
    assert!(v["decisions"].as_array().unwrap().is_empty(), "no gate ran: {v}");
    env.ok(&["approve", "spend"]);
    // Approved, the promoted budget is in force: 2 spent of 1.5.
    env.fails(7, &["tick", "spend"]);
    assert_eq!(env.state("spend")["status"], "halted");
}
