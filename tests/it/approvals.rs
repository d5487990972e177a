//! `approve` and `reject`, and the `[approval]` rules.

use std::fs;

use crate::common::Env;

#[test]
fn allowlist_refuses_anyone_else_and_changes_nothing() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[approval]\napprovers = [\"ann\", \"bob\"]\n",
    );
    let before = fs::read(env.loop_dir("demo").join(".state.loop")).unwrap();
    let out = env
        .cmd()
        .args(["approve", "demo"])
        .env("AUTOMATON_USER", "mallory")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mallory is not an approver") && err.contains("ann, bob"),
        "{err}"
    );
    assert_eq!(
        fs::read(env.loop_dir("demo").join(".state.loop")).unwrap(),
        before
    );
    let ok = env
        .cmd()
        .args(["approve", "demo"])
        .env("AUTOMATON_USER", "bob")
        .output()
        .unwrap();
    assert!(ok.status.success());
    assert_eq!(env.state("demo")["pending_approvals"][0]["by"], "bob");
}

#[test]
fn required_counts_distinct_approvers() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n[approval]\nrequired = 2\n");
    let approve = |who: &str| {
        let out = env
            .cmd()
            .args(["approve", "demo"])
            .env("AUTOMATON_USER", who)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(approve("ann").contains("1 of 2 approvers"));
    assert!(
        approve("ann").contains("1 of 2 approvers"),
        "the same person twice is one approver"
    );
    assert!(approve("bob").contains("2 of 2 approvers"));
}

#[test]
fn stale_approvals_are_dropped_and_logged() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n[approval]\nexpires = \"1h\"\n");
    env.ok(&["approve", "demo", "--note", "old"]);
    // Age the approval by rewriting its time, as if it were given yesterday.
    let path = env.loop_dir("demo").join(".state.loop");
    let mut s = env.state("demo");
    s["pending_approvals"][0]["at"] = "2020-01-01T00:00:00Z".into();
    fs::write(&path, serde_json::to_vec(&s).unwrap()).unwrap();
    env.ok(&["approve", "demo", "--note", "fresh"]);
    let s = env.state("demo");
    let notes: Vec<&str> = s["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["note"].as_str().unwrap())
        .collect();
    assert_eq!(notes, ["fresh"]);
    let h = env.history("demo");
    let expired: Vec<_> = h.iter().filter(|e| e["kind"] == "approval-expired").collect();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0]["approved_at"], "2020-01-01T00:00:00Z");
}

#[test]
fn reject_halts_and_drops_approvals() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["approve", "demo"]);
    let out = env
        .cmd()
        .args(["reject", "demo", "--reason", "wrong approach"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = env.state("demo");
    assert_eq!(s["status"], "halted");
    assert_eq!(s["status_reason"], "rejected by ann: wrong approach");
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 0);
    assert!(env.fails(1, &["approve", "demo"]).contains("halted"));
    assert!(env.fails(1, &["pause", "demo"]).contains("halted"));
    env.ok(&["resume", "demo"]);
    assert_eq!(env.state("demo")["status"], "active");
    let last = env.history("demo").pop().unwrap();
    assert_eq!(
        (last["kind"].as_str(), last["from"].as_str()),
        (Some("resumed"), Some("halted"))
    );
}
