//! Ticks with gates: approvals end to end, metrics and the budget gate, a
//! broken gate under each `on_error` policy, and replaying past decisions.

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::{Env, gated_step, wait_for};

fn tick(env: &Env, name: &str) -> (i32, serde_json::Value) {
    let out = env.run(&["tick", name, "--json"]);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

fn outcome(env: &Env, name: &str) -> String {
    tick(env, name).1["outcome"].as_str().unwrap().to_owned()
}

#[test]
fn approve_every_end_to_end() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    assert_eq!(outcome(&env, "demo"), "ran", "the first tick needs no approval");
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (0, Some("awaiting-approval")));
    assert_eq!(v["decisions"][0]["decision"], "await-approval");
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    assert_eq!(
        outcome(&env, "demo"),
        "awaiting-approval",
        "still waiting without an approval"
    );
    // One approval for the await pending, one for the next: each releases
    // one await, and neither carries over.
    env.ok(&["approve", "demo", "--note", "one"]);
    env.ok(&["approve", "demo", "--ahead", "--note", "two"]);
    assert_eq!(outcome(&env, "demo"), "ran");
    assert_eq!(env.state("demo")["status"], "active");
    assert_eq!(outcome(&env, "demo"), "ran");
    assert_eq!(
        outcome(&env, "demo"),
        "awaiting-approval",
        "two approvals released exactly two ticks"
    );
    let s = env.state("demo");
    assert_eq!(s["tick"], 3);
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 0);
    let used: Vec<serde_json::Value> = env
        .history("demo")
        .into_iter()
        .filter(|e| e["kind"] == "approvals-used")
        .collect();
    assert_eq!(used.len(), 2);
    assert_eq!(used[0]["tick"], 2);
    assert_eq!(used[1]["tick"], 3);
}

#[test]
fn race_approve_from_another_process_against_a_tick_is_used_once() {
    let env = Env::new();
    let sync = tempfile::tempdir().unwrap();
    env.new_loop(
        "demo",
        &format!(
            "{}[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n",
            gated_step(sync.path())
        ),
    );
    // Tick 1 needs no approval; it blocks in its step while an approval comes in.
    let running = env
        .cmd()
        .args(["tick", "demo"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&sync.path().join("started"));
    let mut approve = env
        .cmd()
        .args(["approve", "demo", "--ahead", "--note", "for tick 2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(approve.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("held by pid") && line.contains("(tick 1,"),
        "{line}"
    );
    fs::write(sync.path().join("go"), "").unwrap();
    assert!(running.wait_with_output().unwrap().status.success());
    assert!(approve.wait().unwrap().success());
    assert_eq!(
        env.state("demo")["pending_approvals"].as_array().unwrap().len(),
        1,
        "tick 1 did not use it"
    );
    assert_eq!(outcome(&env, "demo"), "ran", "tick 2 uses it");
    assert_eq!(outcome(&env, "demo"), "awaiting-approval", "and only once");
}

#[test]
fn metrics_reach_totals_and_the_budget_gate_halts_on_them() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"echo cost_usd=0.6 > \\\"$AUTOMATON_METRICS\\\"\"\n\
         [[gate]]\nstock = \"budget\"\nphase = [\"before-step\", \"after-step\"]\nparams = { metric = \"cost_usd\", max = 1.0 }\n",
    );
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (0, Some("ran")));
    assert_eq!(env.state("demo")["totals"]["cost_usd"], 0.6);
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (7, Some("halted")), "{v}");
    let s = env.state("demo");
    assert_eq!(s["status"], "halted");
    assert!(s["status_reason"].as_str().unwrap().contains("cost_usd"), "{s}");
    assert!((s["totals"]["cost_usd"].as_f64().unwrap() - 1.2).abs() < 1e-9);
    assert_eq!(s["tick"], 2, "the step ran, then the after-step gate halted");
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (0, Some("inactive")));
}

#[test]
fn bad_metrics_are_a_warning_not_a_failure() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"echo 'cost = lots' > \\\"$AUTOMATON_METRICS\\\"\"\n",
    );
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (0, Some("ran")));
    let warnings: Vec<_> = env
        .history("demo")
        .into_iter()
        .filter(|e| e["kind"] == "metrics-warning")
        .collect();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0]["message"].as_str().unwrap().contains("line 1"),
        "{}",
        warnings[0]
    );
}

/// A loop whose gate file is replaced by a broken one after the loop was
/// made (`new` would refuse it outright).
fn broken_gate_loop(env: &Env, on_error: Option<&str>) {
    let gate = env.root.join("broken.wasm");
    env.new_loop(
        "demo",
        &format!(
            "step = \"touch '{}'\"\n[[gate]]\npath = \"{}\"\n{}",
            env.scratch().join("ran").display(),
            gate.display(),
            on_error.map_or(String::new(), |p| format!("on_error = \"{p}\"\n"))
        ),
    );
    fs::write(&gate, b"\0asm this is not a component").unwrap();
}

#[test]
fn a_broken_gate_halts_the_loop_by_default() {
    let env = Env::new();
    broken_gate_loop(&env, None);
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (7, Some("halted")), "{v}");
    assert!(
        v["decisions"][0]["error"]
            .as_str()
            .unwrap()
            .contains("broken.wasm"),
        "{v}"
    );
    assert!(
        !env.scratch().join("ran").exists(),
        "fail closed: the step did not run"
    );
    let s = env.state("demo");
    assert_eq!(s["status"], "halted");
    assert!(s["status_reason"].as_str().unwrap().contains("broken.wasm"));
    let gate_event = env
        .history("demo")
        .into_iter()
        .find(|e| e["kind"] == "gate")
        .unwrap();
    assert!(gate_event["error"].as_str().unwrap().contains("broken.wasm"));
}

#[test]
fn a_broken_gate_with_on_error_skip_skips() {
    let env = Env::new();
    broken_gate_loop(&env, Some("skip"));
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (0, Some("skipped")), "{v}");
    assert!(!env.scratch().join("ran").exists());
    assert_eq!(env.state("demo")["status"], "active");
}

#[test]
fn a_broken_gate_with_on_error_proceed_proceeds() {
    let env = Env::new();
    broken_gate_loop(&env, Some("proceed"));
    let (code, v) = tick(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (0, Some("ran")), "{v}");
    assert!(env.scratch().join("ran").exists());
    assert!(
        v["decisions"][0]["error"].is_string(),
        "the error is still recorded"
    );
}

#[test]
fn check_gate_shows_and_applies_without_running_the_step() {
    let env = Env::new();
    env.new_loop(
        "demo",
        &format!(
            "step = \"touch '{}'\"\n[[gate]]\nstock = \"max-ticks\"\nparams = {{ max = 1 }}\n",
            env.scratch().join("ran").display()
        ),
    );
    assert_eq!(outcome(&env, "demo"), "ran");
    fs::remove_file(env.scratch().join("ran")).unwrap();
    let out: serde_json::Value = serde_json::from_str(&env.ok(&["check-gate", "demo", "--json"])).unwrap();
    assert_eq!(out["decision"], "complete");
    assert_eq!(out["applied"], false);
    assert_eq!(
        env.state("demo")["status"],
        "active",
        "without --apply nothing is recorded"
    );
    env.ok(&["check-gate", "demo", "--apply"]);
    assert_eq!(env.state("demo")["status"], "completed");
    assert!(!env.scratch().join("ran").exists());
    let kinds = env.history_kinds("demo");
    assert_eq!(kinds, ["created", "gate", "tick", "gate", "check-gate"]);
}

#[test]
fn replaying_a_stricter_gate_shows_where_decisions_differ() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"max-ticks\"\nparams = { max = 100 }\n",
    );
    for _ in 0..4 {
        assert_eq!(outcome(&env, "demo"), "ran");
    }
    let out = env.run(&[
        "gate",
        "replay",
        "demo",
        "--gate",
        "stock:max-ticks",
        "--params",
        "{\"max\": 2}",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(11), "a decision differs");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 4);
    let differs: Vec<u64> = rows
        .iter()
        .filter(|r| r["differs"] == true)
        .map(|r| r["tick"].as_u64().unwrap())
        .collect();
    assert_eq!(
        differs,
        [3, 4],
        "a limit of 2 would have completed the loop before ticks 3 and 4"
    );
    assert!(rows.iter().all(|r| r["recorded"]["decision"] == "proceed"));
    let out = env.run(&[
        "gate",
        "replay",
        "demo",
        "--gate",
        "stock:max-ticks",
        "--params",
        "{\"max\": 2}",
    ]);
    assert_eq!(out.status.code(), Some(11));
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(human.contains("2 of 4 decisions would differ"), "{human}");
}

#[test]
fn new_refuses_gate_params_the_gate_rejects() {
    let env = Env::new();
    let file = env.root.join("bad.toml");
    fs::write(
        &file,
        "step = \"true\"\n[[gate]]\nstock = \"max-failures\"\nparams = { max = 3 }\n\
         [[gate]]\nstock = \"approve-every\"\nparams = { every = 0 }\n",
    )
    .unwrap();
    let err = env.fails(5, &["new", "demo", "--from", file.to_str().unwrap()]);
    assert!(err.contains("[[gate]] 2 (stock:approve-every)"), "{err}");
    assert!(err.contains("every"), "{err}");
    fs::write(&file, "step = \"true\"\n[[gate]]\nstock = \"no-such-gate\"\n").unwrap();
    let err = env.fails(5, &["new", "demo", "--from", file.to_str().unwrap()]);
    assert!(err.contains("no-such-gate"), "{err}");
    assert!(!env.loop_dir("demo").exists(), "nothing was made");
}

#[test]
fn history_is_rotated_and_read_across_its_files() {
    let env = crate::files_only!("rotates history.jsonl files");
    env.new_loop(
        "demo",
        "step = \"true\"\n[history]\nmax_size = \"4KiB\"\nkeep = 2\n\
         [[gate]]\nstock = \"max-failures\"\nparams = { max = 3 }\n",
    );
    for _ in 0..30 {
        assert_eq!(outcome(&env, "demo"), "ran");
    }
    let dir = env.loop_dir("demo");
    // Each rotation is one rename to the next `history.<n>.jsonl`.
    let mut rotated: Vec<u64> = fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("history.")?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()
        })
        .collect();
    rotated.sort_unstable();
    assert_eq!(
        rotated.len(),
        2,
        "only `keep` rotated files are kept: {rotated:?}"
    );
    assert!(
        rotated[0] > 1 && rotated[1] == rotated[0] + 1,
        "the newest two of several rotations: {rotated:?}"
    );
    assert!(!dir.join("history.jsonl.1").exists(), "no file is shifted up");
    for n in rotated {
        let f = format!("history.{n}.jsonl");
        let size = fs::metadata(dir.join(&f)).unwrap().len();
        assert!(size < 4096 + 4096, "{f} is {size} bytes");
    }
    let size = fs::metadata(dir.join("history.jsonl")).unwrap().len();
    assert!(size < 4096 + 4096, "history.jsonl is {size} bytes");
    // Readers see the kept events in order, oldest dropped, newest last.
    let out: Vec<serde_json::Value> = serde_json::from_str(&env.ok(&["history", "demo", "--json"])).unwrap();
    let ticks: Vec<u64> = out
        .iter()
        .filter(|e| e["kind"] == "tick")
        .map(|e| e["tick"].as_u64().unwrap())
        .collect();
    assert_eq!(ticks.last(), Some(&30));
    assert!(
        ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "in order, none missing in between: {ticks:?}"
    );
    assert!(ticks[0] > 1, "the oldest events were dropped: {ticks:?}");
    assert!(out.iter().all(|e| e["kind"] != "created"));
    assert_eq!(env.state("demo")["tick"], 30, "rotation does not touch the state");
}
