//! What only the PostgreSQL store has: runners on several hosts sharing one
//! loop, a runner killed mid-tick, a server that is down, a schema from a
//! newer automaton, credentials kept out of every message. Tests that need
//! a server skip (saying so) unless `AUTOMATON_TEST_STORE` names one.

use std::process::{Command, Stdio};

use crate::common::{BIN, Env, gated_step, gone, isolate, wait_for};

/// The binary against `env`'s root as runner host `host`.
fn on_host(env: &Env, host: &str) -> Command {
    let mut c = env.cmd();
    c.env("AUTOMATON_HOST", host);
    c
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn ticks_from_two_hosts_serialize_and_lose_nothing() {
    let Some(env) = Env::postgres() else { return };
    let log = env.root.join("ran.log");
    // Each step notes it began and ended: two steps at once would interleave.
    env.new_loop(
        "shared",
        &format!(
            "step = \"echo begin >> '{0}'; sleep 0.05; echo end >> '{0}'\"\noverlap = \"wait\"\n",
            log.display()
        ),
    );
    const EACH: usize = 6;
    std::thread::scope(|scope| {
        for host in ["host-a", "host-b"] {
            let env = &env;
            scope.spawn(move || {
                for _ in 0..EACH {
                    let out = on_host(env, host)
                        .args(["tick", "shared", "--timeout", "120s"])
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                }
            });
        }
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4 * EACH, "every step ran once");
    assert!(
        lines.chunks(2).all(|p| p == ["begin", "end"]),
        "steps never overlapped: {lines:?}"
    );
    let state = env.state("shared");
    assert_eq!(state["tick"], 2 * EACH as u64);
    let history = env.history("shared");
    let ticks: Vec<u64> = history
        .iter()
        .filter(|e| e["kind"] == "tick")
        .map(|e| e["tick"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ticks,
        (1..=2 * EACH as u64).collect::<Vec<_>>(),
        "one record a tick, in order"
    );
    let versions: Vec<u64> = history.iter().map(|e| e["v"].as_u64().unwrap()).collect();
    assert!(versions.windows(2).all(|w| w[0] <= w[1]), "{versions:?}");
    assert_eq!(*versions.last().unwrap(), state["version"].as_u64().unwrap());
}

#[test]
fn an_operator_on_a_third_host_sees_the_holder_and_waits_for_it() {
    let Some(env) = Env::postgres() else { return };
    let gate = tempfile::tempdir().unwrap();
    env.new_loop("busy", &gated_step(gate.path()));
    let mut runner = on_host(&env, "runner-1")
        .args(["tick", "busy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));

    let out = on_host(&env, "ops-laptop")
        .args(["pause", "busy", "--no-wait"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("held by pid {} on runner-1 (tick 1", runner.id())),
        "{err}"
    );
    let status = json(
        &String::from_utf8(
            on_host(&env, "ops-laptop")
                .args(["status", "busy", "--json"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap(),
    );
    assert_eq!(status["lock"]["host"], "runner-1");
    assert_eq!(status["lock"]["tick"], 1);
    assert_eq!(status["in_flight"]["host"], "runner-1");

    // A pause that waits lands after the tick, and both are recorded.
    let waiter = on_host(&env, "ops-laptop")
        .args(["pause", "busy", "--reason", "maintenance"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(gate.path().join("go"), "").unwrap();
    assert!(runner.wait().unwrap().success());
    assert!(waiter.wait_with_output().unwrap().status.success());
    let state = env.state("busy");
    assert_eq!(state["status"], "paused");
    assert_eq!(state["tick"], 1);
    assert!(state["in_flight"].is_null());
    assert_eq!(env.history_kinds("busy").last().unwrap(), "paused");
    assert!(json(&env.ok(&["status", "busy", "--json"]))["lock"].is_null());
}

#[test]
fn a_runner_killed_mid_tick_frees_the_lock_and_the_next_tick_records_the_crash() {
    let Some(env) = Env::postgres() else { return };
    let gate = tempfile::tempdir().unwrap();
    env.new_loop(
        "fragile",
        &format!("{}overlap = \"wait\"\n", gated_step(gate.path())),
    );
    let mut runner = on_host(&env, "doomed")
        .args(["tick", "fragile"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gate.path().join("started"));
    let pid = runner.id() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    runner.wait().unwrap();
    assert!(gone(pid));
    // Let the orphaned step finish; the next tick's step passes at once.
    std::fs::write(gate.path().join("go"), "").unwrap();

    let out = on_host(&env, "survivor")
        .args(["tick", "fragile", "--timeout", "60s", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&String::from_utf8(out.stdout).unwrap())["outcome"], "ran");
    let history = env.history("fragile");
    let crashed: Vec<_> = history.iter().filter(|e| e["kind"] == "crashed").collect();
    assert_eq!(crashed.len(), 1, "{history:?}");
    assert_eq!(crashed[0]["tick"], 1);
    assert_eq!(crashed[0]["pid"], pid);
    assert_eq!(crashed[0]["host"], "doomed");
    let state = env.state("fragile");
    assert_eq!(state["tick"], 2, "the dead tick counts; the next is tick 2");
    assert!(state["in_flight"].is_null());
    assert_eq!(state["consecutive_failures"], 0, "the survivor's tick succeeded");
}

#[test]
fn a_server_that_is_down_is_a_clean_error_that_keeps_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let url = format!(
        "postgres://ann:hunter2secret@/automaton?host={}",
        dir.path().join("no-server-here").display()
    );
    for args in [vec!["init"], vec!["list"], vec!["status", "x"], vec!["tick", "x"]] {
        let out = isolate(&mut Command::new(BIN))
            .arg("--root")
            .arg(&root)
            .args(["--store", &url])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("PostgreSQL store postgres://ann:***@/automaton"),
            "{err}"
        );
        assert!(err.contains("cannot connect"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    }
    // The same URL from the environment.
    let out = isolate(&mut Command::new(BIN))
        .arg("--root")
        .arg(&root)
        .env("AUTOMATON_STORE", &url)
        .args(["list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
}

#[test]
fn an_unknown_store_is_a_usage_error() {
    let env = Env::new();
    let out = env.cmd().args(["--store", "mysql://x", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown store"));
}

#[test]
fn credentials_are_never_printed_nor_stored() {
    let Some(env) = Env::postgres() else { return };
    let pg = env.pg.as_ref().unwrap();
    // Trust or password authentication alike: a password in the URL must
    // never be shown. (A server that checks it would refuse a wrong one.)
    let with_password = pg.url.replacen("://", "://postgres:hunter2secret@", 1);
    if with_password.contains("@@") || !with_password.contains("hunter2secret@") {
        return;
    }
    let run = |args: &[&str]| {
        let out = env
            .cmd()
            .env("AUTOMATON_STORE", &with_password)
            .args(args)
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("hunter2"), "{args:?}: {all}");
        out
    };
    run(&["new", "quiet", "--step", "true"]);
    run(&["tick", "quiet", "--json"]);
    run(&["status", "quiet", "--json"]);
    run(&["history", "quiet", "--json"]);
    run(&["list", "-v"]);
    run(&["status", "no-such-loop"]);
    let mut client = pg.client();
    for table in ["loops", "events", "holders"] {
        let row = client
            .query_one(
                &format!("SELECT count(*) FROM {table} t WHERE t::text LIKE '%hunter2%'"),
                &[],
            )
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 0, "{table}");
    }
}

#[test]
fn a_schema_newer_than_the_binary_is_refused_untouched() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("kept", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    pg.client()
        .batch_execute("INSERT INTO automaton_schema (version) VALUES (999)")
        .unwrap();
    let err = env.fails(5, &["tick", "kept"]);
    assert!(err.contains("schema version 999"), "{err}");
    assert_eq!(env.state("kept")["tick"], 0, "nothing ran");
}

#[test]
fn the_store_is_recorded_in_the_root_and_used_without_the_flag() {
    let Some(url) = crate::common::test_store() else {
        crate::common::skip_without_postgres();
        return;
    };
    // A schema of its own, through the harness.
    let env = Env::postgres().unwrap();
    let pg = env.pg.as_ref().unwrap();
    drop(url);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let cmd = |args: &[&str]| {
        isolate(&mut Command::new(BIN))
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .unwrap()
    };
    let out = cmd(&["--store", &pg.url, "init"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(root.join("automaton.toml").is_file());
    assert!(cmd(&["new", "via-config", "--step", "true"]).status.success());
    // The other root (the harness's) shares the database: it sees the loop.
    let listed = env.ok(&["list", "--json"]);
    assert!(listed.contains("via-config"), "{listed}");
    // And the file store, asked for by name, does not.
    let out = cmd(&["--store", "file", "status", "via-config"]);
    assert_eq!(out.status.code(), Some(3));
}
