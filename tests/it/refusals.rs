//! Refusals: said at once, whatever holds the loop's lock, and recorded
//! when the lock comes within a moment (or the command's `--timeout`);
//! and the commands that move a loop away or repair it (`migrate`,
//! `doctor --fix`) are its operators' to run, as any change is.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Env, gated_step, wait_for};

/// Runs `cmd`, failing the test if it has not ended within `bound`: a
/// command that would wait for the tick holding the lock never ends
/// before the tick does.
fn ended_within(cmd: &mut Command, bound: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + bound;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} was still waiting: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Lets a gated step go when dropped, so a tick a failed test leaves ends.
struct Go<'a>(&'a std::path::Path);

impl Drop for Go<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("go"), "");
    }
}

fn refused_events(env: &Env, name: &str) -> Vec<serde_json::Value> {
    env.history(name)
        .into_iter()
        .filter(|e| e["kind"] == "refused")
        .collect()
}

#[test]
fn a_refusal_during_a_long_tick_is_said_and_recorded_at_once() {
    let env = Env::new();
    let gate = tempfile::tempdir().unwrap();
    env.new_loop(
        "agent",
        &format!(
            "{}[access]\noperators = [\"operator\"]\n",
            gated_step(gate.path())
        ),
    );
    let go = Go(gate.path());
    let mut tick = env
        .cmd()
        .args(["tick", "agent"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));
    // The tick holds the lock until the test says go: each refusal is
    // said, and recorded, without waiting for it (the tick never ends on
    // its own): a refusal takes no lock.
    for command in ["pause", "cancel"] {
        let out = ended_within(
            env.cmd()
                .args([command, "agent"])
                .env("AUTOMATON_USER", "mallory"),
            Duration::from_mins(1),
        );
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(10), "{command}: {said}");
        assert!(
            said.contains(&format!("mallory may not `{command}`"))
                && said.contains("the attempt is recorded"),
            "{command}: {said}"
        );
    }
    let refused = refused_events(&env, "agent");
    let refused: Vec<(&str, &str)> = refused
        .iter()
        .map(|e| (e["by"].as_str().unwrap(), e["action"].as_str().unwrap()))
        .collect();
    assert_eq!(refused, [("mallory", "pause"), ("mallory", "cancel")]);
    drop(go);
    assert!(tick.wait().unwrap().success());
    let kinds = env.history_kinds("agent");
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap();
    assert!(at("refused") < at("tick"), "in the order they came: {kinds:?}");
}

#[test]
fn migrate_moves_only_the_loops_its_user_operates_and_records_the_refusal() {
    let from = crate::files_only!("moves loops between two roots' files");
    let to = Env::new();
    from.new_loop("theirs", "step = \"true\"\n[access]\noperators = [\"ops\"]\n");
    from.new_loop("mine", "step = \"true\"\n[access]\noperators = [\"operator\"]\n");
    let (src, dst) = (from.root.to_str().unwrap(), to.root.to_str().unwrap());
    let err = from.fails(10, &["migrate", "--from", src, "--to", dst, "theirs"]);
    assert!(
        err.contains("operator may not `migrate`") && err.contains("operators (ops)"),
        "{err}"
    );
    assert_eq!(from.state("theirs")["status"], "active", "it stayed");
    assert!(!to.loop_dir("theirs").exists());
    let refused = refused_events(&from, "theirs");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["action"], "migrate");
    let out = from.ok(&["migrate", "--from", src, "--to", dst, "mine"]);
    assert!(out.contains("moved loop mine"), "{out}");
    assert_eq!(to.state("mine")["status"], "active");
    // The root's own list holds for a loop that sets none.
    from.new_loop("plain", "step = \"true\"\n");
    std::fs::write(
        from.root.join("automaton.toml"),
        format!(
            "delegates = [{:?}]\n[access]\noperators = [\"ops\"]\n",
            automaton::who::os_user()
        ),
    )
    .unwrap();
    from.fails(10, &["migrate", "--from", src, "--to", dst, "plain"]);
    assert!(!to.loop_dir("plain").exists());
}

#[test]
fn doctor_fix_is_an_operators_and_a_refused_one_repairs_nothing() {
    let env = crate::files_only!("leaves an edit's copy by hand");
    env.new_loop("agent", "step = \"true\"\n[access]\noperators = [\"ops\"]\n");
    let copy = env.loop_dir("agent").join(".loop.toml.edit-1.toml");
    std::fs::write(&copy, "step = \"true\"\n").unwrap();
    let aged = Command::new("touch")
        .args(["-d", "1 hour ago"])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(aged.success());
    let out = env.run(&["doctor", "agent", "--fix"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(10), "{said}");
    assert!(
        said.contains("operator may not `doctor --fix`") && said.contains("operators (ops)"),
        "{said}"
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("not repaired: not allowed"), "{report}");
    assert!(copy.exists(), "a refused fix removes nothing");
    assert_eq!(refused_events(&env, "agent")[0]["action"], "doctor-fix");
    // Checking needs no role; one of its operators repairs it.
    let out = env.run(&["doctor", "agent"]);
    assert_ne!(out.status.code(), Some(10));
    let out = env
        .cmd()
        .args(["doctor", "agent", "--fix"])
        .env("AUTOMATON_USER", "ops")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!copy.exists());
}

/// A loop only `lead` and `watcher` may view, only `lead` operate, with a
/// console in front of it.
fn secret_loop(env: &Env) {
    env.new_loop(
        "secret",
        "step = \"true\"\n[access]\nviewers = [\"lead\", \"watcher\"]\noperators = [\"lead\"]\n",
    );
}

#[test]
fn a_refusal_of_one_who_may_not_view_the_loop_is_logged_not_committed_nor_told_who_may() {
    let env = Env::new();
    secret_loop(&env);
    let stranger = crate::serve::user(&env, "stranger");
    let s = crate::serve::Server::start(&env, &[]);
    let events = env.history("secret");
    for _ in 0..3 {
        let (status, body) = crate::serve::post(&s, "/api/loops/secret/pause", &stranger, "");
        assert_eq!(status, 403, "{body}");
        assert!(!body.contains("lead"), "a non-viewer is told who may: {body}");
        assert!(
            !body.contains("record"),
            "a non-viewer's refusal went near the record: {body}"
        );
    }
    assert_eq!(
        env.history("secret"),
        events,
        "a non-viewer's refusal was committed"
    );
    let log = s.log();
    assert!(
        log.contains("stranger") && log.contains("secret"),
        "the refusal is not in the server's log: {log}"
    );
}

#[test]
fn a_viewers_refusals_are_recorded_once_a_minute_and_the_rest_counted() {
    let env = Env::new();
    secret_loop(&env);
    let watcher = crate::serve::user(&env, "watcher");
    let s = crate::serve::Server::start(&env, &[]);
    for _ in 0..5 {
        let (status, body) = crate::serve::post(&s, "/api/loops/secret/pause", &watcher, "");
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("lead"), "a viewer is told who may: {body}");
    }
    let refused: Vec<_> = env
        .history("secret")
        .into_iter()
        .filter(|e| e["kind"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["by"], "watcher");
    assert!(
        s.log().contains("4 refusals of watcher"),
        "the refusals not recorded are not counted: {}",
        s.log()
    );
    assert_eq!(s.stop(), Some(0));
}

/// A flood of a viewer's refusals (real processes, a handful at a time)
/// with the history rotating at 2 KiB and one rotated file kept: the
/// `created` event and every operator's record stay readable by `history
/// --json`, the refusals take no more room than their own bound, and the
/// history itself never rotated.
#[test]
fn a_flood_of_refusals_never_rotates_the_operators_records_out_of_history() {
    let env = Env::new();
    env.new_loop(
        "agent",
        "step = \"true\"\n[access]\noperators = [\"operator\"]\napprovers = [\"operator\"]\n\
         [history]\nmax_size = \"2KiB\"\nkeep = 1\n",
    );
    env.ok(&["pause", "agent", "--reason", "freeze"]);
    env.ok(&["resume", "agent"]);
    env.ok(&["reject", "agent", "--halt", "--reason", "wrong approach"]);
    env.ok(&["resume", "agent"]);
    let records = ["created", "paused", "resumed", "rejected", "resumed"];
    for _ in 0..10 {
        let flood: Vec<_> = (0..6)
            .map(|i| {
                env.cmd()
                    .args([["pause", "resume", "approve"][i % 3], "agent"])
                    .env("AUTOMATON_USER", "mallory")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in flood {
            let out = child.wait_with_output().unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(10), "{said}");
            assert!(said.contains("the attempt is recorded"), "{said}");
        }
    }
    let history: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(&["history", "agent", "--json"])).unwrap();
    let kept: Vec<&str> = history
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .filter(|k| *k != "refused")
        .collect();
    assert_eq!(kept, records, "{history:#?}");
    let refused = history.iter().filter(|e| e["kind"] == "refused").count();
    assert!(refused > 0, "the newest refusals are in the history");
    assert_eq!(history.last().unwrap()["kind"], "refused");
    if env.pg.is_none() {
        assert!(refused < 60, "the refusals are bounded: {refused}");
        let dir = env.loop_dir("agent");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".jsonl"))
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("history.") && n != "history.jsonl"),
            "the history rotated: {names:?}"
        );
        let room: u64 = ["refusals.jsonl", "refusals.1.jsonl"]
            .iter()
            .map(|n| std::fs::metadata(dir.join(n)).map_or(0, |m| m.len()))
            .sum();
        assert!(room <= 2 * 2048 + 1024, "refusals take {room} bytes");
    }
}
