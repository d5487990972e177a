//! Shadow gates (`mode = "shadow"`): evaluated beside the live gates on
//! every tick and recorded in the same gate event, never enforced; their
//! evidence in `status`; the notice of a first disagreement; and the name,
//! version and sha256 of the build that decided in every gate event.

use crate::common::{Env, wait_for};
use crate::serve;

/// A step that reports one dollar spent, a live budget of 100 and a
/// shadow budget of 1.5: the shadow halts from the third tick on.
fn budgets(log: &std::path::Path) -> String {
    format!(
        "step = \"echo cost_usd=1 > \\\"$AUTOMATON_METRICS\\\"\"\n\
         [[gate]]\nstock = \"budget\"\nparams = {{ metric = \"cost_usd\", max = 100.0 }}\n\
         [[gate]]\nstock = \"budget\"\nmode = \"shadow\"\nparams = {{ metric = \"cost_usd\", max = 1.5 }}\n\
         [notify]\non = [\"shadow\"]\n\
         command = [\"sh\", \"-c\", \"echo \\\"$AUTOMATON_EVENT|$AUTOMATON_TICK|$AUTOMATON_REASON\\\" >> '{}'\"]\n",
        log.display()
    )
}

fn gate_events(env: &Env, name: &str) -> Vec<serde_json::Value> {
    env.history(name)
        .into_iter()
        .filter(|e| e["kind"] == "gate")
        .collect()
}

#[test]
fn a_shadow_gate_that_halts_never_halts_the_loop_yet_is_recorded_on_every_tick() {
    let env = Env::new();
    let log = env.root.join("notices.log");
    env.new_loop("spend", &budgets(&log));
    for n in 1..=5 {
        let out = env.ok(&["tick", "spend", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["outcome"], "ran", "tick {n}: {v}");
        let decisions = v["decisions"].as_array().unwrap();
        assert_eq!(
            decisions.len(),
            1,
            "the tick's decisions are the live gate's: {v}"
        );
    }
    assert_eq!(env.state("spend")["status"], "active");
    let events = gate_events(&env, "spend");
    assert_eq!(events.len(), 5, "one gate event a tick, the live gate's");
    let shadow: Vec<(&str, bool)> = events
        .iter()
        .map(|e| {
            assert_eq!(e["decision"], "proceed", "{e}");
            let s = &e["shadow"]
                .as_array()
                .expect("the shadow beside the live verdict")[0];
            assert_eq!(s["gate"], "stock:budget");
            assert!(s["micros"].is_u64() && s["sha256"].is_string(), "{s}");
            (s["decision"].as_str().unwrap(), s["agrees"].as_bool().unwrap())
        })
        .collect();
    assert_eq!(
        shadow,
        [
            ("proceed", true),
            ("proceed", true),
            ("halt", false),
            ("halt", false),
            ("halt", false)
        ]
    );
    let status: serde_json::Value = serde_json::from_str(&env.ok(&["status", "spend", "--json"])).unwrap();
    let e = &status["shadows"][0];
    assert_eq!(
        (e["evaluations"].as_u64(), e["agreed"].as_u64()),
        (Some(5), Some(2)),
        "{status}"
    );
    assert_eq!(e["last_disagreement"]["tick"], 5);
    assert_eq!(e["last_disagreement"]["shadow"]["decision"], "halt");
    let human = env.ok(&["status", "spend"]);
    assert!(human.contains("2 of the last 5 evaluations agreed"), "{human}");
    // The console's API and loop page say the same.
    let token = serve::user(&env, "ann");
    let s = serve::Server::start(&env, &[]);
    let (_, api) = serve::get(&s, "/api/loops/spend", &token);
    let api: serde_json::Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["shadows"], status["shadows"]);
    let (id, _) = serve::sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let (code, page) = serve::answer(
        serve::agent()
            .get(s.url("/loops/spend"))
            .header("Cookie", &cookie)
            .call(),
    );
    assert_eq!(code, 200);
    assert!(
        page.contains("Shadow gates") && page.contains("2 of the last 5"),
        "{page}"
    );
    drop(s);
    // One notice, on the first disagreement only.
    wait_for(&log);
    let notices = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = notices.lines().collect();
    assert_eq!(lines.len(), 1, "{notices}");
    assert!(
        lines[0].starts_with("shadow|3|shadow gate stock:budget"),
        "{notices}"
    );
}

#[test]
fn a_failing_shadow_gate_applies_no_on_error_to_the_loop() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 100 }\n\
         [[gate]]\npath = \"gates/missing.wasm\"\nmode = \"shadow\"\non_error = \"halt\"\n",
    );
    for _ in 0..2 {
        env.ok(&["tick", "demo"]);
    }
    assert_eq!(env.state("demo")["status"], "active");
    let events = gate_events(&env, "demo");
    assert_eq!(events.len(), 2);
    for e in &events {
        let s = &e["shadow"][0];
        assert_eq!(s["gate"], "gates/missing.wasm");
        assert!(s["error"].as_str().unwrap().contains("missing.wasm"), "{s}");
        assert_eq!(s["decision"], "halt", "what it would have decided, live");
        assert_eq!(s["agrees"], false);
    }
}

#[test]
fn a_shadow_gate_that_times_out_is_recorded_once_under_its_own_limit() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 100 }\n\
         [[gate]]\npath = \"gates/spin.wasm\"\nmode = \"shadow\"\nlimits = { timeout = \"100ms\" }\n",
    );
    let gates = env.loop_dir("demo").join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    std::fs::write(gates.join("spin.wasm"), crate::gate_fixtures::infinite_loop()).unwrap();
    for _ in 0..2 {
        let out = env.ok(&["tick", "demo", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["outcome"], "ran", "{v}");
    }
    let events = gate_events(&env, "demo");
    assert_eq!(events.len(), 2);
    for e in &events {
        let shadow = e["shadow"].as_array().unwrap();
        assert_eq!(shadow.len(), 1, "recorded once a tick, not tried again: {e}");
        let error = shadow[0]["error"].as_str().unwrap();
        assert!(error.contains("timed out after 100ms"), "its own limit: {error}");
        assert_eq!(e["decision"], "proceed");
    }
}

#[test]
fn gate_events_name_the_build_that_decided() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 100 }\n",
    );
    env.ok(&["tick", "demo"]);
    let inspect: serde_json::Value =
        serde_json::from_str(&env.ok(&["gate", "inspect", "stock:max-ticks", "--json"])).unwrap();
    let e = &gate_events(&env, "demo")[0];
    assert_eq!(e["name"], "max-ticks", "{e}");
    assert_eq!(e["version"], inspect["info"]["version"], "{e} {inspect}");
    assert_eq!(e["sha256"], inspect["sha256"], "{e} {inspect}");
    assert_eq!(e["sha256"].as_str().unwrap().len(), 64);
}
