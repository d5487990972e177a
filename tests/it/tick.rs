//! The tick: outcomes, exit codes, the lock held across the whole tick, and
//! what a crash or a timeout leaves behind.

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use crate::common::{Env, gated_step, gone, tree, wait_for};

fn tick_json(env: &Env, name: &str) -> (i32, serde_json::Value) {
    let out = env.run(&["tick", name, "--json"]);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

fn spawn_tick(env: &Env, name: &str) -> Child {
    env.cmd()
        .args(["tick", name, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_plain_tick_runs_the_step_and_records_it() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"echo out; echo err >&2; echo \\\"$AUTOMATON_LOOP $AUTOMATON_TICK\\\" > \\\"$AUTOMATON_RUN_DIR/env.txt\\\"; echo cost_usd=0.25 >> \\\"$AUTOMATON_METRICS\\\"\"\n",
    );
    let (code, v) = tick_json(&env, "demo");
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (v["loop"].as_str(), v["tick"].as_u64(), v["outcome"].as_str()),
        (Some("demo"), Some(1), Some("ran"))
    );
    assert_eq!(v["step"]["exit_code"], 0);
    let dir = env.loop_dir("demo");
    assert_eq!(
        fs::read_to_string(dir.join("runs/1/env.txt")).unwrap(),
        "demo 1\n"
    );
    assert_eq!(fs::read_to_string(dir.join("runs/1/step.out")).unwrap(), "out\n");
    assert_eq!(fs::read_to_string(dir.join("runs/1/step.err")).unwrap(), "err\n");
    env.ok(&["tick", "demo"]);
    let s = env.state("demo");
    assert_eq!(s["tick"], 2);
    assert_eq!(s["in_flight"], serde_json::Value::Null);
    assert_eq!(s["metrics"]["cost_usd"], 0.25);
    assert_eq!(s["totals"]["cost_usd"], 0.5);
    assert_eq!(s["last_tick"]["number"], 2);
    assert_eq!(s["last_tick"]["outcome"], "ran");
    assert_eq!(env.history_kinds("demo"), ["created", "tick", "tick"]);
}

#[test]
fn a_failing_step_is_exit_6_and_counts_failures() {
    let env = Env::new();
    env.new_loop("demo", "step = \"exit 3\"\n");
    let (code, v) = tick_json(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (6, Some("failed")));
    assert!(
        v["reason"].as_str().unwrap().starts_with("step exited 3 in "),
        "{v}"
    );
    env.fails(6, &["tick", "demo"]);
    let s = env.state("demo");
    assert_eq!(
        (s["tick"].as_u64(), s["consecutive_failures"].as_u64()),
        (Some(2), Some(2))
    );
}

#[test]
fn a_failing_verifier_fails_the_tick_and_a_passing_one_resets_failures() {
    let env = Env::new();
    env.new_loop(
        "demo",
        "step = \"true\"\n[verifier]\ncommand = \"test -e pass\"\n",
    );
    let (code, v) = tick_json(&env, "demo");
    assert_eq!(code, 6);
    assert!(
        v["reason"].as_str().unwrap().starts_with("verifier exited 1 in "),
        "{v}"
    );
    fs::write(env.loop_dir("demo").join("pass"), "").unwrap();
    let (code, v) = tick_json(&env, "demo");
    assert_eq!((code, v["verifier"]["exit_code"].as_i64()), (0, Some(0)));
    assert_eq!(env.state("demo")["consecutive_failures"], 0);
}

#[test]
fn a_missing_program_is_a_failed_tick_naming_it() {
    let env = Env::new();
    env.new_loop("demo", "step = [\"./no-such-agent\", \"--go\"]\n");
    let (code, v) = tick_json(&env, "demo");
    assert_eq!(code, 6);
    assert!(v["reason"].as_str().unwrap().contains("no-such-agent"), "{v}");
}

#[test]
fn paused_and_halted_loops_tick_as_inactive_without_running() {
    let env = Env::new();
    let ran = |name: &str| env.scratch().join(name);
    let step = |name: &str| format!("step = \"touch '{}'\"\n", ran(name).display());
    env.new_loop("paused", &step("paused"));
    env.ok(&["pause", "paused"]);
    env.new_loop("halted", &step("halted"));
    env.ok(&["reject", "halted", "--halt", "--reason", "stop"]);
    assert_eq!(env.state("halted")["status"], "halted");
    for name in ["paused", "halted"] {
        let version = env.state(name)["version"].clone();
        let (code, v) = tick_json(&env, name);
        assert_eq!((code, v["outcome"].as_str()), (0, Some("inactive")), "{name}");
        assert!(!ran(name).exists(), "{name}");
        assert_eq!(
            env.state(name)["version"],
            version,
            "{name}: an inactive tick writes nothing"
        );
    }
}

#[test]
fn an_unknown_loop_is_exit_3_and_makes_no_lock_file() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let before = tree(&env.root);
    env.fails(3, &["tick", "ghost"]);
    assert_eq!(tree(&env.root), before, "nothing created, no lock file anywhere");
}

#[test]
fn overlap_skip_answers_busy_while_a_tick_runs() {
    let env = Env::new();
    let sync = tempfile::tempdir().unwrap();
    env.new_loop("demo", &gated_step(sync.path()));
    let first = spawn_tick(&env, "demo");
    wait_for(&sync.path().join("started"));
    for _ in 0..3 {
        let (code, v) = tick_json(&env, "demo");
        assert_eq!((code, v["outcome"].as_str()), (0, Some("busy")));
        assert!(v["reason"].as_str().unwrap().contains("tick 1"), "{v}");
    }
    fs::write(sync.path().join("go"), "").unwrap();
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success());
    let s = env.state("demo");
    assert_eq!(s["tick"], 1, "only the tick that held the lock ran");
    assert_eq!(
        env.history_kinds("demo").iter().filter(|k| *k == "tick").count(),
        1,
        "busy ticks are not recorded"
    );
}

#[test]
fn overlap_wait_serialises_concurrent_ticks() {
    let env = Env::new();
    let sync = tempfile::tempdir().unwrap();
    let (trace, started, go) = (
        sync.path().join("trace"),
        sync.path().join("started"),
        sync.path().join("go"),
    );
    // Each step records its start, then blocks until the test releases it.
    env.new_loop(
        "demo",
        &format!(
            "overlap = \"wait\"\nstep = \"echo start >> '{0}'; touch '{1}'; \
             while [ ! -e '{2}' ]; do sleep 0.02; done; rm '{2}'; echo end >> '{0}'\"\n",
            trace.display(),
            started.display(),
            go.display()
        ),
    );
    let n = 8;
    let first = spawn_tick(&env, "demo");
    wait_for(&started);
    // The others start while the first step holds the lock, and each says
    // it is waiting for it before the test lets any step finish.
    let mut others: Vec<(Child, BufReader<std::process::ChildStderr>)> = (1..n)
        .map(|_| {
            let mut c = spawn_tick(&env, "demo");
            let mut err = BufReader::new(c.stderr.take().unwrap());
            let mut line = String::new();
            err.read_line(&mut line).unwrap();
            assert!(
                line.contains("held by pid") && line.contains("(tick 1,"),
                "{line}"
            );
            (c, err)
        })
        .collect();
    // One step at a time: while one is blocked, no other has started.
    for i in 1..=n {
        wait_for(&started);
        let lines = fs::read_to_string(&trace).unwrap();
        let mut expected: Vec<&str> = (1..i).flat_map(|_| ["start", "end"]).collect();
        expected.push("start");
        assert_eq!(lines.lines().collect::<Vec<_>>(), expected, "steps never overlap");
        fs::remove_file(&started).unwrap();
        fs::write(&go, "").unwrap();
    }
    assert!(first.wait_with_output().unwrap().status.success());
    for (mut c, mut err) in others.drain(..) {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        assert!(c.wait().unwrap().success(), "{rest}");
    }
    assert_eq!(env.state("demo")["tick"], n);
    let lines = fs::read_to_string(&trace).unwrap();
    let expected: Vec<&str> = (0..n).flat_map(|_| ["start", "end"]).collect();
    assert_eq!(lines.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn overlap_wait_is_bounded_by_timeout() {
    let env = Env::new();
    let sync = tempfile::tempdir().unwrap();
    env.new_loop(
        "demo",
        &format!("overlap = \"wait\"\n{}", gated_step(sync.path())),
    );
    let first = spawn_tick(&env, "demo");
    wait_for(&sync.path().join("started"));
    let err = env.fails(4, &["tick", "demo", "--timeout", "100ms"]);
    assert!(err.contains("tick 1"), "{err}");
    fs::write(sync.path().join("go"), "").unwrap();
    assert!(first.wait_with_output().unwrap().status.success());
}

/// Race scenarios: an operator command issued while a tick holds the lock
/// waits for the tick, then applies on top of the tick's state.
fn command_during_a_tick(args: &[&str], check: impl FnOnce(&Env, &serde_json::Value)) {
    let env = Env::new();
    let sync = tempfile::tempdir().unwrap();
    env.new_loop("demo", &gated_step(sync.path()));
    let tick = spawn_tick(&env, "demo");
    wait_for(&sync.path().join("started"));
    let mut cmd = env
        .cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(cmd.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("waiting for loop \"demo\": held by pid"),
        "{line}"
    );
    assert!(line.contains("(tick 1,"), "{line}");
    fs::write(sync.path().join("go"), "").unwrap();
    assert!(tick.wait_with_output().unwrap().status.success());
    let out = cmd.wait_with_output().unwrap();
    assert!(out.status.success(), "{args:?}");
    let s = env.state("demo");
    assert_eq!(s["tick"], 1, "the tick's write was not lost");
    assert_eq!(s["in_flight"], serde_json::Value::Null);
    // created, in_flight, the tick's final write, the command's write.
    assert_eq!(s["version"], 4, "every write landed once");
    let kinds = env.history_kinds("demo");
    assert_eq!(
        kinds[..2],
        ["created", "tick"],
        "the command came after the tick: {kinds:?}"
    );
    check(&env, &s);
}

#[test]
fn race_pause_during_a_tick() {
    command_during_a_tick(&["pause", "demo"], |env, s| {
        assert_eq!(s["status"], "paused");
        assert_eq!(env.history_kinds("demo")[2], "paused");
    });
}

#[test]
fn race_approve_during_a_tick() {
    command_during_a_tick(&["approve", "demo", "--ahead", "--note", "mid-tick"], |env, s| {
        assert_eq!(
            s["pending_approvals"][0]["note"], "mid-tick",
            "the running tick did not use it"
        );
        assert_eq!(env.history_kinds("demo")[2], "approved");
    });
}

#[test]
fn race_check_gate_against_a_tick() {
    command_during_a_tick(&["check-gate", "demo", "--apply"], |env, _| {
        assert_eq!(env.history_kinds("demo")[2], "check-gate");
    });
}

#[test]
fn race_two_ticks_at_once_run_one_step_at_a_time() {
    let env = Env::new();
    let sync = tempfile::tempdir().unwrap();
    env.new_loop(
        "demo",
        &format!("overlap = \"wait\"\n{}", gated_step(sync.path())),
    );
    let first = spawn_tick(&env, "demo");
    wait_for(&sync.path().join("started"));
    fs::remove_file(sync.path().join("started")).unwrap();
    let mut second = spawn_tick(&env, "demo");
    let mut line = String::new();
    BufReader::new(second.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("held by pid") && line.contains("(tick 1,"),
        "{line}"
    );
    assert!(
        !sync.path().join("started").exists(),
        "the second step waits for the first tick"
    );
    fs::write(sync.path().join("go"), "").unwrap();
    assert!(first.wait_with_output().unwrap().status.success());
    let out = second.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["tick"].as_u64(), v["outcome"].as_str()),
        (Some(2), Some("ran"))
    );
    assert_eq!(env.state("demo")["tick"], 2);
}

#[test]
fn race_check_gate_against_pause_serialise() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let children: Vec<Child> = (0..30)
        .map(|i| {
            let args: &[&str] = match i % 3 {
                0 => &["check-gate", "demo", "--apply"],
                1 => &["pause", "demo"],
                _ => &["resume", "demo"],
            };
            env.cmd()
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let s = env.state("demo");
    let kinds = env.history_kinds("demo");
    assert_eq!(s["version"], kinds.len(), "each write recorded one event");
    assert_eq!(kinds.iter().filter(|x| *x == "check-gate").count(), 10);
    // A pause of a paused loop and a resume of an active one are no-ops:
    // pauses and resumes alternate, starting with a pause.
    let switches: Vec<&String> = kinds
        .iter()
        .filter(|k| *k == "paused" || *k == "resumed")
        .collect();
    for (i, k) in switches.iter().enumerate() {
        assert_eq!(
            k.as_str(),
            if i % 2 == 0 { "paused" } else { "resumed" },
            "{kinds:?}"
        );
    }
}

#[test]
fn a_runner_killed_mid_step_takes_its_step_along_and_is_recorded_as_crashed() {
    let env = crate::files_only!("edits loop.toml by hand");
    let sync = tempfile::tempdir().unwrap();
    let pids = sync.path().join("pids");
    env.new_loop(
        "demo",
        &format!(
            "step = \"sleep 1000 & echo $! >> '{0}'; echo $$ >> '{0}'; touch '{1}/started'; sleep 1000\"\n",
            pids.display(),
            sync.path().display()
        ),
    );
    let mut runner = spawn_tick(&env, "demo");
    wait_for(&sync.path().join("started"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    runner.wait().unwrap();
    let recorded: Vec<i32> = fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(recorded.len(), 2);
    for pid in recorded {
        assert!(gone(pid), "step process {pid} outlived its runner");
    }
    let s = env.status("demo");
    assert_eq!(s["in_flight"]["tick"], 1, "the dead tick left its marker");
    // The next tick records the crash, counts it, and runs.
    fs::write(env.loop_dir("demo").join("loop.toml"), "step = \"true\"\n").unwrap();
    let (code, v) = tick_json(&env, "demo");
    assert_eq!(
        (code, v["recovered_crash"].as_u64(), v["tick"].as_u64()),
        (0, Some(1), Some(2))
    );
    let s = env.state("demo");
    assert_eq!(s["in_flight"], serde_json::Value::Null);
    assert_eq!(s["tick"], 2);
    assert_eq!(s["consecutive_failures"], 0, "the tick after the crash succeeded");
    // loop.toml was changed by hand: the tick records that too.
    let kinds = env.history_kinds("demo");
    assert_eq!(kinds, ["created", "crashed", "config-changed", "tick"]);
}

#[test]
fn a_step_timeout_kills_its_background_children() {
    let env = Env::new();
    let pids = env.scratch().join("pids");
    env.new_loop(
        "demo",
        &format!(
            "timeout = \"1s\"\nstep = \"sleep 1000 & echo $! >> '{0}'; (sleep 1000; true) & echo $! >> '{0}'; sleep 1000\"\n",
            pids.display()
        ),
    );
    let (code, v) = tick_json(&env, "demo");
    assert_eq!((code, v["outcome"].as_str()), (6, Some("failed")));
    assert_eq!(v["step"]["timed_out"], true);
    assert!(
        v["reason"].as_str().unwrap().contains("timed out after 1s"),
        "{v}"
    );
    for pid in fs::read_to_string(&pids).unwrap().lines() {
        assert!(
            gone(pid.trim().parse().unwrap()),
            "background child {pid} survived the timeout"
        );
    }
}
