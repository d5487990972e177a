//! The record of config changes: each tick event names the sha256 of the
//! loop.toml and automaton.toml it ran with; a loop.toml changed behind
//! automaton's back is recorded by the next command that commits, with its
//! diff and the sha256 before and after, shown by `status`, `review` and
//! the console until the next approval; `edit` records its own change with
//! its actor; and with `[approval] config_changes = "await"` a change to
//! the rules keeps the loop awaiting, running nothing, until approved.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::Env;

/// A loop whose before-step gate proceeds (an approval every 1000 ticks),
/// and whose step leaves `ran` in its run directory.
const GATED: &str = "step = \"touch \\\"$AUTOMATON_RUN_DIR/ran\\\"\"\n\
                     [[gate]]\nstock = \"approve-every\"\nparams = { every = 1000 }\n";

fn sha256_of(path: &Path) -> String {
    sha256(&fs::read(path).unwrap())
}

/// The sha256 of `bytes` in hex, as coreutils' `sha256sum` says it.
fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// The loop's loop.toml text, from whichever store the suite runs against.
fn config_text(env: &Env, name: &str) -> String {
    match &env.pg {
        Some(pg) => pg
            .client()
            .query_one("SELECT config FROM loops WHERE name = $1", &[&name])
            .unwrap()
            .get(0),
        None => fs::read_to_string(env.loop_dir(name).join("loop.toml")).unwrap(),
    }
}

/// Replaces the loop's loop.toml behind automaton's back; its sha256.
fn set_config(env: &Env, name: &str, text: &str) -> String {
    match &env.pg {
        Some(pg) => {
            pg.client()
                .execute("UPDATE loops SET config = $1 WHERE name = $2", &[&text, &name])
                .unwrap();
        }
        None => fs::write(env.loop_dir(name).join("loop.toml"), text).unwrap(),
    }
    sha256(text.as_bytes())
}

fn tick(env: &Env, name: &str) -> Value {
    serde_json::from_str(&env.ok(&["tick", name, "--json"])).unwrap()
}

fn config_changes(env: &Env, name: &str) -> Vec<Value> {
    env.history(name)
        .into_iter()
        .filter(|e| e["kind"] == "config-changed")
        .collect()
}

/// Removes the `[[gate]]` table from the loop's loop.toml by hand: the
/// sha256 before and after.
fn remove_gate(env: &Env, name: &str) -> (String, String) {
    let text = config_text(env, name);
    let before = sha256(text.as_bytes());
    let kept = &text[..text.find("[[gate]]").unwrap()];
    (before, set_config(env, name, kept))
}

#[test]
fn each_tick_event_names_the_sha256_of_the_config_it_ran_with() {
    let env = Env::new();
    env.new_loop("demo", GATED);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    let ticks: Vec<Value> = env
        .history("demo")
        .into_iter()
        .filter(|e| e["kind"] == "tick")
        .collect();
    let config = &ticks[0]["config"];
    let text = config_text(&env, "demo");
    assert_eq!(config["loop_toml"], sha256(text.as_bytes()));
    assert_eq!(
        config["automaton_toml"],
        sha256_of(&env.root.join("automaton.toml"))
    );
    // A root without automaton.toml says so.
    let root_config = fs::read(env.root.join("automaton.toml")).unwrap();
    fs::remove_file(env.root.join("automaton.toml")).unwrap();
    let out = env
        .cmd()
        .env_remove("AUTOMATON_USER")
        .args(["tick", "demo"])
        .output()
        .unwrap();
    fs::write(env.root.join("automaton.toml"), root_config).unwrap();
    assert!(out.status.success(), "{out:?}");
    let last = env
        .history("demo")
        .into_iter()
        .rfind(|e| e["kind"] == "tick")
        .unwrap();
    assert_eq!(last["config"]["automaton_toml"], "absent", "{last}");
}

#[test]
fn a_gate_removed_behind_automatons_back_is_recorded_by_the_next_tick() {
    let env = Env::new();
    env.new_loop("demo", GATED);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    let (before, after) = remove_gate(&env, "demo");

    // A reader sees it and records nothing.
    let text = env.ok(&["status", "demo"]);
    assert!(
        text.contains("loop.toml changed since it was last recorded (not yet recorded)"),
        "{text}"
    );
    assert_eq!(env.status("demo")["unrecorded_config"]["loop_toml"], after);
    assert!(config_changes(&env, "demo").is_empty());

    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    let changes = config_changes(&env, "demo");
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!(
        (c["via"].as_str(), c["rules"].clone()),
        (Some("outside"), serde_json::json!(["gate"]))
    );
    assert_eq!(
        (&c["before"]["loop_toml"], &c["after"]["loop_toml"]),
        (&before.clone().into(), &after.clone().into())
    );
    let root = sha256_of(&env.root.join("automaton.toml"));
    assert_eq!(
        (&c["before"]["automaton_toml"], &c["after"]["automaton_toml"]),
        (&root.clone().into(), &root.into())
    );
    let diff = c["diff"].as_str().unwrap();
    assert!(
        diff.contains("-[[gate]]") && diff.contains("-stock = \"approve-every\""),
        "{diff}"
    );
    assert!(c.get("awaits").is_none(), "recorded only: {c}");

    // Recorded once; status and review show it since the last approval.
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    assert_eq!(config_changes(&env, "demo").len(), 1);
    let status = env.status("demo");
    assert!(status.get("unrecorded_config").is_none(), "{status}");
    assert_eq!(status["config_changes"][0]["diff"], diff);
    let text = env.ok(&["status", "demo"]);
    assert!(
        !text.contains("not yet recorded") && text.contains("-[[gate]]"),
        "{text}"
    );
    let review: Value = serde_json::from_str(&env.ok(&["review", "demo", "--json"])).unwrap();
    assert_eq!(review["config_changes"][0]["after"]["loop_toml"], after);
    assert_eq!(review["config_changes"][0]["diff"], diff);
    let text = env.ok(&["review", "demo"]);
    assert!(
        text.contains("config changed outside automaton") && text.contains("-[[gate]]"),
        "{text}"
    );
}

#[test]
fn an_operator_command_that_commits_records_a_change_it_finds() {
    let env = Env::new();
    env.new_loop("demo", GATED);
    remove_gate(&env, "demo");
    env.ok(&["pause", "demo"]);
    let kinds = env.history_kinds("demo");
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["config-changed", "paused"],
        "{kinds:?}"
    );
}

#[test]
fn a_change_to_the_rules_awaits_approval_before_any_step_runs() {
    let env = Env::new();
    let toml = GATED.replacen("[[gate]]", "[approval]\nconfig_changes = \"await\"\n[[gate]]", 1);
    env.new_loop("demo", &toml);
    let dir = env.loop_dir("demo");
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    // A harmless change is recorded and awaits nothing.
    set_config(&env, "demo", &format!("description = \"harmless\"\n{toml}"));
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    assert!(dir.join("runs/2/ran").exists());
    // Removing the gate (and the setting with it) is awaited.
    let after = set_config(&env, "demo", "step = \"touch \\\"$AUTOMATON_RUN_DIR/ran\\\"\"\n");
    for _ in 0..2 {
        let t = tick(&env, "demo");
        assert_eq!(t["outcome"], "awaiting-approval", "{t}");
        let reason = t["reason"].as_str().unwrap();
        assert!(reason.contains("gate") && reason.contains("approval"), "{reason}");
    }
    assert!(!dir.join("runs/3/ran").exists(), "no step ran while awaiting");
    let status = env.status("demo");
    assert_eq!(status["status"], "awaiting_approval");
    assert_eq!(status["awaiting"]["gates"][0]["gate"], "loop.toml");
    let changes = config_changes(&env, "demo");
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[1]["awaits"], true);
    assert_eq!(changes[1]["rules"], serde_json::json!(["gate", "approval"]));
    let kinds = env.history_kinds("demo");
    assert_eq!(
        kinds.iter().filter(|k| *k == "tick").count(),
        3,
        "a repeated await records nothing: {kinds:?}"
    );

    env.ok(&["approve", "demo"]);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    assert!(dir.join("runs/3/ran").exists());
    let used = env
        .history("demo")
        .into_iter()
        .rfind(|e| e["kind"] == "approvals-used")
        .unwrap();
    assert_eq!(used["approved_config"], after, "{used}");
    let review: Value = serde_json::from_str(&env.ok(&["review", "demo", "--json"])).unwrap();
    assert_eq!(
        review["config_changes"],
        serde_json::json!([]),
        "approved: {review}"
    );
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
}

#[test]
fn edit_records_its_change_with_its_actor() {
    let env = Env::new();
    env.new_loop("demo", GATED);
    let editor = env.root.join("drop-gate.sh");
    fs::write(&editor, "#!/bin/sh\nsed -i '/gate/,$d' \"$1\"\n").unwrap();
    fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env_remove("VISUAL")
        .env("EDITOR", &editor)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let changes = config_changes(&env, "demo");
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!(
        (c["via"].as_str(), c["by"].as_str()),
        (Some("edit"), Some("operator"))
    );
    assert_eq!(c["actor"]["user"], "operator");
    let text = config_text(&env, "demo");
    assert_eq!(c["after"]["loop_toml"], sha256(text.as_bytes()));
    assert!(c["diff"].as_str().unwrap().contains("-[[gate]]"), "{c}");
    // The tick finds nothing more to record.
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    assert_eq!(config_changes(&env, "demo").len(), 1);
}

#[test]
fn a_config_change_is_recorded_in_postgresql() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("demo", GATED);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    let pg = env.pg.as_ref().unwrap();
    let text = "step = \"true\"\n";
    pg.client()
        .execute("UPDATE loops SET config = $1 WHERE name = 'demo'", &[&text])
        .unwrap();
    let status = env.ok(&["status", "demo"]);
    assert!(status.contains("not yet recorded"), "{status}");
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    let changes = config_changes(&env, "demo");
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["after"]["loop_toml"], sha256(text.as_bytes()));
    assert_eq!(changes[0]["rules"], serde_json::json!(["gate"]));
    assert!(changes[0]["diff"].as_str().unwrap().contains("-[[gate]]"));
    let state = pg.state("demo");
    assert_eq!(state["recorded_config"]["text"], text);
    let last = env
        .history("demo")
        .into_iter()
        .rfind(|e| e["kind"] == "tick")
        .unwrap();
    assert_eq!(last["config"]["loop_toml"], sha256(text.as_bytes()));
}

#[test]
fn the_consoles_review_page_shows_the_config_changes_since_the_last_approval() {
    let env = Env::new();
    env.new_loop("demo", GATED);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    let (_, after) = remove_gate(&env, "demo");
    let token: Value = serde_json::from_str(&env.ok(&["user", "add", "ann", "--json"])).unwrap();
    let token = token["token"].as_str().unwrap().to_owned();
    let server = crate::serve::Server::start(&env, &[]);
    let page = |path: &str| {
        let mut r = ureq::get(server.url(path))
            .header("Authorization", format!("Bearer {token}"))
            .call()
            .unwrap();
        r.body_mut().read_to_string().unwrap()
    };
    let unrecorded = page("/loops/demo/review");
    assert!(unrecorded.contains("not yet recorded"), "{unrecorded}");
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    let recorded = page("/loops/demo/review");
    assert!(!recorded.contains("not yet recorded"), "{recorded}");
    assert!(
        recorded.contains("Config changes since the last approval")
            && recorded.contains("changed outside automaton")
            && recorded.contains("-[[gate]]")
            && recorded.contains(&after),
        "{recorded}"
    );
}

#[test]
fn a_change_to_the_rules_is_approved_by_the_approvers_before_it() {
    let env = Env::new();
    let toml = GATED.replacen(
        "[[gate]]",
        "[approval]\nconfig_changes = \"await\"\n[access]\napprovers = [\"ann\"]\n[[gate]]",
        1,
    );
    env.new_loop("demo", &toml);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    // The step names itself the approver and drops the gate, then
    // approves ahead, before any tick has seen the change.
    set_config(
        &env,
        "demo",
        "step = \"touch \\\"$AUTOMATON_RUN_DIR/ran\\\"\"\n[access]\napprovers = [\"agent\"]\n",
    );
    let agent = |args: &[&str]| {
        env.cmd()
            .env("AUTOMATON_USER", "agent")
            .args(args)
            .output()
            .unwrap()
    };
    let out = agent(&["approve", "demo", "--ahead"]);
    assert_eq!(out.status.code(), Some(10), "{out:?}");
    let kinds = env.history_kinds("demo");
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["config-changed", "refused"],
        "{kinds:?}"
    );
    assert_eq!(tick(&env, "demo")["outcome"], "awaiting-approval");
    let out = agent(&["approve", "demo"]);
    assert_eq!(out.status.code(), Some(10), "{out:?}");
    assert_eq!(tick(&env, "demo")["outcome"], "awaiting-approval");
    assert!(!env.loop_dir("demo").join("runs/2/ran").exists());
    // The approver before the change releases it.
    let out = env
        .cmd()
        .env("AUTOMATON_USER", "ann")
        .args(["approve", "demo"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
}
