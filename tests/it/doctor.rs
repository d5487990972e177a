//! `doctor`: finds what a dead writer left, a damaged state, a gate that
//! no longer matches its pin and a cache others can write; `--fix` repairs
//! what is safe and nothing else.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::Env;

fn doctor(env: &Env, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

/// The findings of loop `name` at `level` or worse, as `check: message`.
fn findings(report: &serde_json::Value, name: &str, levels: &[&str]) -> Vec<String> {
    let l = report["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap();
    l["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| levels.contains(&f["level"].as_str().unwrap()))
        .map(|f| {
            format!(
                "{}: {}",
                f["check"].as_str().unwrap(),
                f["message"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_healthy_root_exits_0() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["tick", "demo"]);
    let (code, report) = doctor(&env, &[]);
    assert_eq!(code, 0, "{report}");
    assert!(findings(&report, "demo", &["warning", "error"]).is_empty());
}

/// The in-flight record every loop that ticked keeps (of a version its
/// state has passed) is nothing to say: doctor names no such record.
#[test]
fn a_loop_that_ticked_has_no_in_flight_record_line() {
    let env = crate::files_only!("the in-flight record is the file store's");
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["tick", "demo"]);
    env.ok(&["tick", "demo"]);
    let (_, report) = doctor(&env, &["demo"]);
    let found = findings(&report, "demo", &["ok", "note", "warning", "error"]);
    assert!(
        !found.iter().any(|f| f.starts_with("in-flight-record:")),
        "{found:?}"
    );
    let text = String::from_utf8(env.run(&["doctor", "demo"]).stdout).unwrap();
    assert!(!text.contains("in-flight-record"), "{text}");
}

#[test]
fn what_a_dead_writer_left_is_found_and_fixed_under_the_lock() {
    let env = crate::files_only!("leaves a dead writer's files by hand");
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["tick", "demo"]);
    let dir = env.loop_dir("demo");
    fs::write(dir.join(".tmp-abc"), "half").unwrap();
    let mut history = fs::read_to_string(dir.join("history.jsonl")).unwrap();
    history.push_str("{\"v\": 77, \"at\": \"20");
    fs::write(dir.join("history.jsonl"), &history).unwrap();
    let mut s = env.state("demo");
    s["in_flight"] =
        serde_json::json!({"tick": 2, "pid": 999999, "host": "gone", "started_at": "2026-01-01T00:00:00Z"});
    fs::write(dir.join(".state.loop"), serde_json::to_vec(&s).unwrap()).unwrap();

    let (code, report) = doctor(&env, &["demo"]);
    assert_eq!(code, 1);
    let found = findings(&report, "demo", &["warning"]);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        found.iter().any(|f| f.starts_with("in-flight: tick 2")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.starts_with("history: 19 bytes")),
        "{found:?}"
    );
    assert!(found.iter().any(|f| f.starts_with("temp-files:")), "{found:?}");
    assert_eq!(env.state("demo"), s, "doctor without --fix changes nothing");

    let (code, report) = doctor(&env, &["demo", "--fix"]);
    assert_eq!(code, 0, "{report}");
    assert!(!dir.join(".tmp-abc").exists());
    assert!(env.state("demo")["in_flight"].is_null());
    assert_eq!(env.history_kinds("demo").last().unwrap(), "crashed");
}

#[test]
fn a_damaged_state_and_a_changed_pinned_gate_are_errors_fix_leaves_alone() {
    let env = crate::files_only!("damages and pins files by hand");
    let gate = env.root.join("gate.wasm");
    fs::write(&gate, crate::gate_fixtures::good()).unwrap();
    let pin = "0".repeat(64);
    env.new_loop(
        "pinned",
        &format!("step = \"true\"\n[[gate]]\npath = \"{}\"\n", gate.display()),
    );
    let toml = env.loop_dir("pinned").join("loop.toml");
    let text = fs::read_to_string(&toml).unwrap() + &format!("sha256 = \"{pin}\"\n");
    fs::write(&toml, text).unwrap();
    env.new_loop("broken", "step = \"true\"\n");
    let state = env.loop_dir("broken").join(".state.loop");
    fs::write(&state, "{ not json").unwrap();

    let (code, report) = doctor(&env, &["--fix"]);
    assert_eq!(code, 1);
    let pinned = findings(&report, "pinned", &["error"]);
    assert!(
        pinned
            .iter()
            .any(|f| f.contains(&format!("loop.toml pins {pin}"))),
        "{pinned:?}"
    );
    let broken = findings(&report, "broken", &["error"]);
    assert!(
        broken.iter().any(|f| f.starts_with("state: state file")),
        "{broken:?}"
    );
    assert_eq!(
        fs::read_to_string(&state).unwrap(),
        "{ not json",
        "never overwritten"
    );
}

#[test]
fn a_cache_others_can_write_is_made_private_by_fix() {
    let env = Env::with_own_cache();
    let cache = env.root.join("cache");
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).unwrap();
    let (code, report) = doctor(&env, &[]);
    assert_eq!(code, 1);
    assert_eq!(report["root"][0]["level"], "warning", "{report}");
    let (code, _) = doctor(&env, &["--fix"]);
    assert_eq!(code, 0);
    assert_eq!(fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o700);
}
