//! One lock discipline for every command: waiting, giving up, naming the
//! holder, and no lost update under many concurrent processes.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use automaton::lock::{Holder, Wait};
use automaton::root::Root;
use automaton::store::{LoopDir, LoopStore};

use crate::common::Env;

#[test]
fn a_held_lock_is_named_and_waited_for() {
    let env = crate::files_only!("holds the lock file through the library");
    env.new_loop("demo", "step = \"true\"\n");
    let root = Root::at(&env.root);
    let dir = LoopDir::open(&root, "demo").unwrap();
    let me = format!("held by pid {}", std::process::id());
    let waiter: Child;
    {
        let _session = dir.lock(Holder::me("test-holder"), Wait::No).unwrap();
        {
            let err = env.fails(4, &["pause", "demo", "--no-wait"]);
            assert!(err.contains(&me) && err.contains("test-holder"), "{err}");
            let err = env.fails(4, &["approve", "demo", "--ahead", "--timeout", "300ms"]);
            assert!(err.contains(&me), "{err}");
            let status: serde_json::Value =
                serde_json::from_str(&env.ok(&["status", "demo", "--json"])).unwrap();
            assert_eq!(
                status["lock"]["pid"],
                std::process::id(),
                "status names the holder"
            );

            let mut child = env
                .cmd()
                .args(["pause", "demo", "--reason", "waited"])
                .stderr(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stderr.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert!(line.starts_with("waiting for loop \"demo\": "), "{line}");
            assert!(line.contains(&me), "{line}");
            assert_eq!(
                env.state("demo")["status"],
                "active",
                "nothing written while the lock is held"
            );
            waiter = child;
        }
    }
    let mut waiter = waiter;
    let status = waiter.wait().unwrap();
    assert!(status.success());
    let s = env.state("demo");
    assert_eq!(
        (s["status"].as_str(), s["status_reason"].as_str()),
        (Some("paused"), Some("waited"))
    );
    assert!(dir.holder().is_none(), "a released lock names nobody");
    let free: serde_json::Value = serde_json::from_str(&env.ok(&["status", "demo", "--json"])).unwrap();
    assert_eq!(
        free.get("lock"),
        Some(&serde_json::Value::Null),
        "status says the lock is free"
    );
}

fn spawn_all(env: &Env, commands: &[Vec<String>]) -> Vec<std::process::Output> {
    let children: Vec<Child> = commands
        .iter()
        .enumerate()
        .map(|(i, args)| {
            // Each its own person: one person counts once for an await.
            env.cmd()
                .args(args)
                .env("AUTOMATON_USER", format!("person-{i}"))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

#[test]
fn a_hundred_concurrent_approvals_are_all_kept() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let commands: Vec<Vec<String>> = (0..100)
        .map(|i| {
            vec![
                "approve".into(),
                "demo".into(),
                "--ahead".into(),
                "--note".into(),
                format!("note-{i}"),
            ]
        })
        .collect();
    for out in spawn_all(&env, &commands) {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let s = env.state("demo");
    let notes: BTreeSet<String> = s["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["note"].as_str().unwrap().to_owned())
        .collect();
    let expected: BTreeSet<String> = (0..100).map(|i| format!("note-{i}")).collect();
    assert_eq!(notes, expected);
    assert_eq!(s["version"], 101, "one write per approval after creation");
    let ids: BTreeSet<&str> = s["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 100, "approval ids are unique");
    assert_eq!(
        env.history_kinds("demo")
            .iter()
            .filter(|k| *k == "approved")
            .count(),
        100
    );
}

#[test]
fn mixed_concurrent_commands_lose_no_update() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let mut commands: Vec<Vec<String>> = Vec::new();
    for i in 0..90 {
        commands.push(match i % 3 {
            0 => vec!["pause".into(), "demo".into()],
            1 => vec!["resume".into(), "demo".into()],
            _ => vec![
                "approve".into(),
                "demo".into(),
                "--ahead".into(),
                "--note".into(),
                format!("n{i}"),
            ],
        });
    }
    let outs = spawn_all(&env, &commands);
    let ok = outs.iter().filter(|o| o.status.success()).count();
    assert_eq!(
        ok, 90,
        "pause, resume and approve all succeed on an active or paused loop"
    );
    let s = env.state("demo");
    assert_eq!(s["pending_approvals"].as_array().unwrap().len(), 30);
    // Every write left one history event, in an order the versions agree
    // with; a repeat (pause of a paused loop, resume of an active one)
    // wrote nothing and recorded nothing.
    let history = env.history("demo");
    assert_eq!(s["version"], history.len());
    let approved = history.iter().filter(|e| e["kind"] == "approved").count();
    assert_eq!(approved, 30);
}

/// Two processes never hold one loop's lock at once: ticks started
/// together, each waiting its turn, run their steps one after another.
/// Each step claims a marker directory (`mkdir` fails if it exists) for the
/// whole of its run, so an overlap leaves a trace.
#[test]
fn two_processes_never_hold_one_loops_lock_at_once() {
    let env = Env::new();
    let marks = env.root.with_file_name("marks");
    std::fs::create_dir(&marks).unwrap();
    let step = format!(
        "mkdir '{0}/held' 2>/dev/null || touch '{0}/overlap'; sleep 0.05; rmdir '{0}/held'",
        marks.display()
    );
    env.new_loop("one", &format!("step = {step:?}\noverlap = \"wait\"\n"));
    const TICKS: usize = 12;
    let ticks: Vec<Vec<String>> = (0..TICKS)
        .map(|_| ["tick", "one", "--timeout", "120s"].map(String::from).to_vec())
        .collect();
    for out in spawn_all(&env, &ticks) {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(!marks.join("overlap").exists(), "two steps ran at once");
    assert_eq!(env.state("one")["tick"].as_u64(), Some(TICKS as u64));
}
