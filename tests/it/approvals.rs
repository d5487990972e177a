//! `approve` and `reject`, and the `[approval]` rules.

use std::fs;

use crate::common::Env;

#[test]
fn allowlist_refuses_anyone_else_and_records_only_the_refusal() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[approval]\napprovers = [\"ann\", \"bob\"]\n",
    );
    let before = env.state("demo");
    let out = env
        .cmd()
        .args(["approve", "demo", "--ahead"])
        .env("AUTOMATON_USER", "mallory")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mallory may not `approve`") && err.contains("approvers (ann, bob)"),
        "{err}"
    );
    let after = env.state("demo");
    assert_eq!(after["pending_approvals"], before["pending_approvals"]);
    assert_eq!(after["status"], before["status"]);
    let refused = env.history("demo").pop().unwrap();
    assert_eq!(
        (
            refused["kind"].as_str(),
            refused["by"].as_str(),
            refused["action"].as_str()
        ),
        (Some("refused"), Some("mallory"), Some("approve"))
    );
    let ok = env
        .cmd()
        .args(["approve", "demo", "--ahead"])
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
        env.cmd()
            .args(["approve", "demo", "--ahead"])
            .env("AUTOMATON_USER", who)
            .output()
            .unwrap()
    };
    let said = |out: std::process::Output| String::from_utf8(out.stdout).unwrap();
    assert!(said(approve("ann")).contains("1 of 2 approvers"));
    let twice = approve("ann");
    assert_eq!(
        twice.status.code(),
        Some(1),
        "the same person twice is one approver"
    );
    assert!(String::from_utf8_lossy(&twice.stderr).contains("one person counts once"));
    assert!(said(approve("bob")).contains("2 of 2 approvers"));
}

#[test]
fn stale_approvals_are_dropped_and_logged() {
    let env = crate::files_only!("ages an approval in .state.loop by hand");
    env.new_loop("demo", "step = \"true\"\n[approval]\nexpires = \"1h\"\n");
    env.ok(&["approve", "demo", "--ahead", "--note", "old"]);
    // Age the approval by rewriting its time, as if it were given yesterday.
    let path = env.loop_dir("demo").join(".state.loop");
    let mut s = env.state("demo");
    s["pending_approvals"][0]["at"] = "2020-01-01T00:00:00Z".into();
    fs::write(&path, serde_json::to_vec(&s).unwrap()).unwrap();
    env.ok(&["approve", "demo", "--ahead", "--note", "fresh"]);
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
    env.ok(&["approve", "demo", "--ahead"]);
    let out = env
        .cmd()
        .args(["reject", "demo", "--halt", "--reason", "wrong approach"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = env.state("demo");
    assert_eq!(s["status"], "halted");
    assert_eq!(s["status_reason"], "rejected by ann: wrong approach");
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 0);
    let dropped = env
        .history("demo")
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "approvals-dropped");
    let dropped = dropped.expect("the approval given ahead is recorded as dropped");
    assert_eq!(dropped["why"], "rejected");
    assert!(dropped.get("await").is_none(), "no await was pending: {dropped}");
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

#[test]
fn approving_a_loop_that_is_not_waiting_needs_ahead() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let before = env.history("demo");
    let err = env.fails(1, &["approve", "demo"]);
    assert!(
        err.contains("not awaiting approval") && err.contains("--ahead"),
        "{err}"
    );
    assert_eq!(env.history("demo"), before, "a refused approval records nothing");
    assert!(
        env.state("demo")["pending_approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    env.ok(&["approve", "demo", "--ahead"]);
    assert_eq!(
        env.state("demo")["pending_approvals"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn repeat_pause_and_resume_change_and_record_nothing() {
    let env = Env::new();
    env.new_loop("demo", "step = \"exit 1\"\n");
    assert_eq!(env.run(&["tick", "demo"]).status.code(), Some(6));
    // Resume of an active loop: the failure count is kept, nothing recorded.
    let (state, history) = (env.state("demo"), env.history("demo"));
    assert!(
        env.ok(&["resume", "demo"])
            .contains("already active; nothing changed")
    );
    assert_eq!((env.state("demo"), env.history("demo")), (state, history));
    // Pause of a paused loop: the first reason is kept, nothing recorded.
    env.ok(&["pause", "demo", "--reason", "release freeze"]);
    let (state, history) = (env.state("demo"), env.history("demo"));
    let said = env.ok(&["pause", "demo", "--reason", "other"]);
    assert!(
        said.contains("already paused (release freeze); nothing changed"),
        "{said}"
    );
    assert_eq!((env.state("demo"), env.history("demo")), (state, history));
}

#[test]
fn awaiting_is_recorded_once_not_at_every_firing() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    let tick = |env: &Env| {
        let v: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "demo", "--json"])).unwrap();
        v["outcome"].as_str().unwrap().to_owned()
    };
    assert_eq!(tick(&env), "ran", "the first tick needs no approval");
    assert_eq!(tick(&env), "awaiting-approval");
    let (state, history) = (env.state("demo"), env.history("demo"));
    for _ in 0..3 {
        assert_eq!(tick(&env), "awaiting-approval");
    }
    assert_eq!(env.history("demo"), history, "a repeat firing records nothing");
    assert_eq!(env.state("demo"), state);
    env.ok(&["approve", "demo"]);
    assert_eq!(tick(&env), "ran");
}

/// The tick an approval lets run says the gate's await was approved, not
/// that the gate's `await-approval` ran; a tick that waits says it waits.
#[test]
fn the_tick_an_approval_lets_run_says_so() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    env.ok(&["tick", "demo"]);
    let waits = env.ok(&["tick", "demo"]);
    assert!(waits.starts_with("demo tick 2: awaiting-approval\n"), "{waits}");
    assert!(
        waits.contains("\n  before-step stock:approve-every: await-approval: approval needed"),
        "{waits}"
    );
    env.ok(&["approve", "demo"]);
    let ran = env.ok(&["tick", "demo"]);
    assert!(ran.starts_with("demo tick 2: ran "), "{ran}");
    assert!(
        ran.contains(
            "\n  before-step stock:approve-every: await-approval (approved, so the step ran): approval needed"
        ),
        "{ran}"
    );
}

#[test]
fn notify_runs_outside_the_lock_when_a_loop_starts_waiting() {
    let env = Env::new();
    let out = env.root.join("notified");
    // From inside the notify command, an operator command that must take
    // the lock at once: it would fail (exit 4) if the tick still held it.
    // The store named in the runner's environment is passed on by name
    // (the notify command does not inherit it otherwise).
    let toml = format!(
        "step = \"true\"\npass_env = [\"AUTOMATON_STORE\"]\n[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n\
         [notify]\ncommand = \"echo \\\"$AUTOMATON_LOOP $AUTOMATON_STATUS $AUTOMATON_TICK\\\" >> '{0}'; \
         '{1}' --root \\\"$AUTOMATON_ROOT\\\" pause \\\"$AUTOMATON_LOOP\\\" --no-wait --reason notified >> '{0}' 2>&1; echo rc=$? >> '{0}'\"\n",
        out.display(),
        crate::common::BIN,
    );
    env.new_loop("demo", &toml);
    env.ok(&["tick", "demo"]);
    assert!(!out.exists(), "a tick that ran does not notify");
    env.ok(&["tick", "demo"]);
    let said = std::fs::read_to_string(&out).unwrap();
    assert!(said.starts_with("demo awaiting_approval 2\n"), "{said}");
    assert!(
        said.contains("paused loop demo") && said.contains("rc=0"),
        "{said}"
    );
    assert_eq!(env.state("demo")["status"], "paused");
    // Once per wait: a firing while still waiting does not notify again.
    let log = env.root.join("waits");
    env.new_loop(
        "quiet",
        &format!(
            "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n\
             [notify]\ncommand = [\"sh\", \"-c\", \"echo $AUTOMATON_STATUS >> '{}'\"]\n",
            log.display()
        ),
    );
    for _ in 0..3 {
        env.ok(&["tick", "quiet"]);
    }
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "awaiting_approval\n");
}

/// A loop whose step appends a line to `ran` and fails from its `fail_at`th
/// run on, gated to await approval before each tick after the first.
fn counting_loop(env: &Env, toml: &str, fail_at: u32) -> std::path::PathBuf {
    let ran = env.scratch().join("ran");
    env.new_loop(
        "demo",
        &format!(
            "step = \"echo x >> '{0}'; test $(wc -l < '{0}') -lt {fail_at}\"\n\
             [[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n{toml}",
            ran.display()
        ),
    );
    env.ok(&["tick", "demo"]);
    env.ok(&["tick", "demo"]);
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    ran
}

#[test]
fn approve_run_ticks_the_await_it_releases_and_exits_as_the_tick() {
    let env = Env::new();
    let ran = counting_loop(&env, "", 2);
    let pending = env.state("demo")["awaiting"]["id"].as_str().unwrap().to_owned();
    env.fails(2, &["approve", "demo", "--run", "--json"]);
    let out = env.run(&["approve", "demo", "--run"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "the tick's exit code: {said}");
    assert!(
        said.starts_with(&format!("approved await {pending} of loop demo as operator")),
        "{said}"
    );
    assert!(said.contains("\ndemo tick 2: failed"), "{said}");
    assert_eq!(fs::read_to_string(&ran).unwrap().lines().count(), 2);
}

#[test]
fn approve_run_does_not_tick_while_more_approvals_are_needed() {
    let env = Env::new();
    let ran = counting_loop(&env, "[approval]\nrequired = 2\n", 10);
    let approve = |who: &str| {
        env.cmd()
            .args(["approve", "demo", "--run"])
            .env("AUTOMATON_USER", who)
            .output()
            .unwrap()
    };
    let first = approve("ann");
    let said = String::from_utf8_lossy(&first.stdout);
    assert_eq!(first.status.code(), Some(0), "{said}");
    assert!(
        said.contains("1 of 2 approvers so far; not ticked: 1 more approval is needed to release it"),
        "{said}"
    );
    assert_eq!(fs::read_to_string(&ran).unwrap().lines().count(), 1);
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    let second = approve("bob");
    let said = String::from_utf8_lossy(&second.stdout);
    assert_eq!(second.status.code(), Some(0), "{said}");
    assert!(
        said.contains("2 of 2 approvers so far\ndemo tick 2: ran"),
        "{said}"
    );
    assert_eq!(fs::read_to_string(&ran).unwrap().lines().count(), 2);
}

/// `review` sums the metrics of the ticks since the last approval from
/// their tick events, so ticks whose run directories are gone (pruned, or
/// on another host) still count.
#[test]
fn review_sums_metrics_from_the_history_not_the_run_directories() {
    let env = Env::new();
    env.new_loop(
        "agent",
        "step = \"echo cost_usd=0.5 > \\\"$AUTOMATON_METRICS\\\"; echo tokens=100 >> \\\"$AUTOMATON_METRICS\\\"\"\n\
         [[gate]]\nstock = \"approve-every\"\nparams = { every = 2 }\n",
    );
    for _ in 0..2 {
        env.ok(&["tick", "agent"]);
    }
    env.ok(&["tick", "agent"]);
    assert_eq!(env.state("agent")["status"], "awaiting_approval");
    let tick = env
        .history("agent")
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "tick" && e["step"].is_object())
        .unwrap();
    assert_eq!(tick["metrics"]["cost_usd"], 0.5, "{tick}");
    // As if the ticks ran on another host, or their output was pruned.
    fs::remove_dir_all(env.loop_dir("agent").join("runs")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["review", "agent", "--json"])).unwrap();
    assert_eq!(v["metrics_since"]["cost_usd"], 1.0, "{v}");
    assert_eq!(v["metrics_since"]["tokens"], 200.0, "{v}");
    assert_eq!(v["totals"]["cost_usd"], 1.0, "{v}");
}

/// A loop awaiting approval (`required = 2`, so one approval does not
/// release it) with ann's approval pending. Returns the await's id.
fn awaiting_with_one_approval(env: &Env) -> String {
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n\
         [approval]\nrequired = 2\n",
    );
    env.ok(&["tick", "demo"]);
    env.ok(&["tick", "demo"]);
    let out = env
        .cmd()
        .args(["approve", "demo"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = env.state("demo");
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 1, "{s}");
    s["awaiting"]["id"].as_str().unwrap().to_owned()
}

/// The loop's one `approvals-dropped` record, after its approval by ann.
fn dropped(env: &Env) -> serde_json::Value {
    let history = env.history("demo");
    let approved = history.iter().rev().find(|e| e["kind"] == "approved").unwrap();
    let mut dropped: Vec<_> = history
        .iter()
        .filter(|e| e["kind"] == "approvals-dropped")
        .cloned()
        .collect();
    assert_eq!(dropped.len(), 1, "{:?}", env.history_kinds("demo"));
    let d = dropped.pop().unwrap();
    assert_eq!(
        (&d["ids"], &d["by"]),
        (&serde_json::json!([approved["id"]]), &serde_json::json!(["ann"]))
    );
    d
}

/// Changes the loop's loop.toml with `sed` script `script`, through `edit`.
fn edit(env: &Env, script: &str) {
    let editor = env.root.join("editor");
    fs::write(&editor, format!("#!/bin/sh\nsed -i '{script}' \"$1\"\n")).unwrap();
    fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env("VISUAL", &editor)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn approvals_of_an_await_the_gates_stop_asking_for_are_dropped_as_ended() {
    let env = Env::new();
    let id = awaiting_with_one_approval(&env);
    edit(&env, "s/every = 1/every = 2/");
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "demo", "--json"])).unwrap();
    assert_eq!(v["outcome"], "ran", "the gate no longer asks: {v}");
    let d = dropped(&env);
    assert_eq!(
        (d["why"].as_str(), d["await"].as_str()),
        (Some("ended"), Some(id.as_str()))
    );
    let s = env.state("demo");
    assert!(s["awaiting"].is_null(), "{s}");
    assert!(s["pending_approvals"].as_array().unwrap().is_empty(), "{s}");
}

#[test]
fn approvals_of_an_await_a_completed_loop_ends_are_dropped_as_ended() {
    let env = Env::new();
    let id = awaiting_with_one_approval(&env);
    edit(
        &env,
        "s/^\\[approval\\]/[[gate]]\\nstock = \"max-ticks\"\\nparams = { max = 1 }\\n[approval]/",
    );
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "demo", "--json"])).unwrap();
    assert_eq!(v["outcome"], "completed", "{v}");
    let d = dropped(&env);
    assert_eq!(
        (d["why"].as_str(), d["await"].as_str()),
        (Some("ended"), Some(id.as_str()))
    );
    let s = env.state("demo");
    assert_eq!(s["status"], "completed");
    assert!(s["awaiting"].is_null() && s["pending_approvals"].as_array().unwrap().is_empty());
}

#[test]
fn approvals_of_a_rejected_await_are_dropped_as_rejected() {
    let env = Env::new();
    let id = awaiting_with_one_approval(&env);
    let out = env
        .cmd()
        .args(["reject", "demo", "--reason", "not this"])
        .env("AUTOMATON_USER", "bob")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d = dropped(&env);
    assert_eq!(
        (d["why"].as_str(), d["await"].as_str()),
        (Some("rejected"), Some(id.as_str()))
    );
    let rejected = env
        .history("demo")
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "rejected")
        .unwrap();
    assert_eq!(
        (rejected["by"].as_str(), rejected["await"].as_str()),
        (Some("bob"), Some(id.as_str()))
    );
    let s = env.state("demo");
    assert_eq!(s["status"], "halted");
    assert!(s["awaiting"].is_null() && s["pending_approvals"].as_array().unwrap().is_empty());
}

/// A tick whose run directory cannot be made (a file stands in its place)
/// fails saying so, runs nothing and leaves the approval it would have
/// used for the next tick, which uses it once the path is clear.
#[test]
fn a_tick_that_cannot_make_its_run_directory_keeps_the_approval() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"echo ran\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    env.ok(&["tick", "demo"]);
    env.ok(&["tick", "demo"]);
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    env.ok(&["approve", "demo"]);
    let runs = env.loop_dir("demo").join("runs");
    let planted: Vec<_> = (2..=4).map(|n| runs.join(n.to_string())).collect();
    for p in &planted {
        std::fs::write(p, "not a directory").unwrap();
    }
    let err = env.fails(1, &["tick", "demo"]);
    assert!(err.contains("creating directory"), "{err}");
    let s = env.state("demo");
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 1, "{s}");
    assert!(s.get("in_flight").is_none_or(serde_json::Value::is_null), "{s}");
    for p in &planted {
        std::fs::remove_file(p).unwrap();
    }
    let ran: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "demo", "--json"])).unwrap();
    assert_eq!(ran["outcome"], "ran", "{ran}");
    let s = env.state("demo");
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 0, "{s}");
}

/// `review` after a rejection names it (by whom, why, the await) and does
/// not list again the ticks it turned down.
#[test]
fn review_after_a_reject_names_it_and_lists_only_the_ticks_since() {
    let env = Env::new();
    let toml = "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n";
    crate::common::warm_stock_gates(toml);
    env.new_loop("demo", toml);
    env.ok(&["tick", "demo"]);
    env.ok(&["tick", "demo"]);
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    let out = env
        .cmd()
        .args(["reject", "demo", "--reason", "wrong approach"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rejected_at = env.state("demo")["tick"].as_u64().unwrap();
    if env.state("demo")["status"] == "halted" {
        env.ok(&["resume", "demo"]);
    }
    env.ok(&["tick", "demo"]);
    let review: serde_json::Value = serde_json::from_str(&env.ok(&["review", "demo", "--json"])).unwrap();
    assert_eq!(review["rejected"]["by"], "ann", "{review:#}");
    assert_eq!(review["rejected"]["reason"], "wrong approach", "{review:#}");
    let ticks: Vec<u64> = review["ticks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tick"].as_u64().unwrap())
        .collect();
    assert!(
        ticks.iter().all(|t| *t > rejected_at),
        "the rejected ticks are not listed again: {ticks:?}"
    );
    let text = env.ok(&["review", "demo"]);
    assert!(
        text.contains("rejected") && text.contains("by ann") && text.contains("wrong approach"),
        "{text}"
    );
}

/// After a rejection, and a resume that starts the totals over, `review`
/// lists no tick the rejection turned down and the new await once, though
/// a pause and resume while it awaited recorded it again; its metrics
/// since count from the reset. After the next approval it lists the ticks
/// that ran and the await they led to.
#[test]
fn review_after_a_reject_and_a_budget_reset_lists_the_await_once() {
    let env = Env::new();
    let toml = "step = \"echo cost_usd=0.35 > \\\"$AUTOMATON_METRICS\\\"\"\n\
                [[gate]]\nstock = \"approve-every\"\nparams = { every = 2 }\n\
                [[gate]]\nstock = \"budget\"\nparams = { metric = \"cost_usd\", max = 5.0 }\n";
    env.new_loop("demo", toml);
    for _ in 0..3 {
        env.ok(&["tick", "demo"]);
    }
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    env.ok(&["reject", "demo", "--reason", "wrong approach"]);
    env.ok(&["resume", "demo", "--reset-budget"]);
    env.ok(&["tick", "demo"]);
    let pending = env.state("demo")["awaiting"]["id"].clone();
    env.ok(&["pause", "demo"]);
    env.ok(&["resume", "demo"]);
    env.ok(&["tick", "demo"]);
    assert_eq!(env.state("demo")["awaiting"]["id"], pending, "the same await");
    let review = |env: &Env| -> (serde_json::Value, String) {
        let json = serde_json::from_str(&env.ok(&["review", "demo", "--json"])).unwrap();
        (json, env.ok(&["review", "demo"]))
    };
    let (json, text) = review(&env);
    let listed = |json: &serde_json::Value| -> Vec<(u64, String)> {
        json["ticks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["tick"].as_u64().unwrap(),
                    t["outcome"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(listed(&json), [(3, "awaiting-approval".to_owned())], "{json:#}");
    assert_eq!(text.matches("tick 3: awaiting-approval").count(), 1, "{text}");
    assert_eq!(json["rejected"]["reason"], "wrong approach", "{json:#}");
    assert_eq!(json["metrics_since"], serde_json::json!({}), "{json:#}");
    assert_eq!(json["totals"], serde_json::json!({}), "{json:#}");
    env.ok(&["approve", "demo"]);
    for _ in 0..3 {
        env.ok(&["tick", "demo"]);
    }
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    let (json, text) = review(&env);
    let outcomes: Vec<String> = listed(&json).into_iter().map(|(_, o)| o).collect();
    assert_eq!(outcomes, ["ran", "ran", "awaiting-approval"], "{json:#}");
    assert!(!text.contains("wrong approach"), "an approval since: {text}");
    let since = json["metrics_since"]["cost_usd"].as_f64().unwrap();
    let total = json["totals"]["cost_usd"].as_f64().unwrap();
    assert!(
        (since - 0.7).abs() < 1e-9 && (total - 0.7).abs() < 1e-9,
        "{json:#}"
    );
}
