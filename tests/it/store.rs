//! One commit: the state and its events are one record. A dead tick is
//! recorded by the first command that finds it; an unfinished commit is
//! never read and is cut by the next lock holder; hostile files are refused
//! without blocking; what steps and gates hand in stays bounded; a step
//! whose result could not be recorded says it ran.

use std::fs;

use crate::common::Env;

/// Every event a reader sees, with its version, from `history --json`.
fn events(env: &Env, name: &str) -> Vec<serde_json::Value> {
    serde_json::from_str(&env.ok(&["history", name, "--json"])).unwrap()
}

fn kinds(env: &Env, name: &str) -> Vec<String> {
    events(env, name)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// Rewrites the state file as a dead tick would have left it.
fn leave_in_flight(env: &Env, name: &str, tick: u64) {
    let path = env.loop_dir(name).join(".state.loop");
    let mut s = env.state(name);
    s["in_flight"] = serde_json::json!({
        "tick": tick, "pid": 999_999, "host": "elsewhere", "started_at": "2026-01-01T00:00:00Z"
    });
    fs::write(&path, serde_json::to_vec_pretty(&s).unwrap()).unwrap();
}

#[test]
fn every_event_carries_the_version_it_was_committed_with() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["tick", "demo"]);
    env.ok(&["pause", "demo"]);
    let version = env.state("demo")["version"].as_u64().unwrap();
    let history = env.history("demo");
    assert!(history.iter().all(|e| e["v"].as_u64().unwrap() <= version));
    assert_eq!(history.last().unwrap()["v"].as_u64(), Some(version));
    assert_eq!(history.first().unwrap()["v"], 1, "the created event is version 1");
}

#[test]
fn a_dead_tick_is_recorded_by_the_first_command_that_finds_it() {
    let env = crate::files_only!("leaves a dead tick in .state.loop by hand");
    env.new_loop("demo", "step = \"true\"\n");
    env.ok(&["tick", "demo"]);
    leave_in_flight(&env, "demo", 2);
    // An operator's command, not the next tick, records the crash.
    env.ok(&["pause", "demo", "--reason", "looking"]);
    let s = env.state("demo");
    assert!(s["in_flight"].is_null());
    assert_eq!(s["tick"], 2, "the dead tick counts");
    assert_eq!(s["consecutive_failures"], 1);
    assert_eq!(s["status"], "paused");
    let k = kinds(&env, "demo");
    assert_eq!(&k[k.len() - 2..], ["crashed", "paused"]);
    let crashed = &events(&env, "demo")[k.len() - 2];
    assert_eq!(crashed["tick"], 2);
    assert_eq!(crashed["host"], "elsewhere");
}

#[test]
fn events_of_an_unfinished_commit_are_never_read_and_are_cut_by_the_next_holder() {
    let env = crate::files_only!("tears history.jsonl by hand");
    env.new_loop("demo", "step = \"true\"\n");
    let version = env.state("demo")["version"].as_u64().unwrap();
    let path = env.loop_dir("demo").join("history.jsonl");
    let mut text = fs::read_to_string(&path).unwrap();
    // A commit that appended its events and died before its state was written.
    text.push_str(&format!(
        "{{\"v\":{},\"at\":\"2026-01-01T00:00:00Z\",\"kind\":\"paused\",\"by\":\"ghost\"}}\n",
        version + 1
    ));
    fs::write(&path, &text).unwrap();
    assert_eq!(
        kinds(&env, "demo"),
        ["created"],
        "readers see only what the state committed"
    );
    env.ok(&["approve", "demo", "--ahead"]);
    let history = env.history("demo");
    assert_eq!(
        history
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["created", "approved"],
        "the unfinished commit was cut before the next one"
    );
    assert!(!fs::read_to_string(&path).unwrap().contains("ghost"));
}

#[test]
fn stray_temporary_files_are_removed_by_the_next_locking_command() {
    let env = crate::files_only!("leaves temporary files by hand");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    for n in 0..3 {
        fs::write(dir.join(format!(".tmp-dead{n}")), "half a state").unwrap();
    }
    // Readers leave them (they never write).
    env.ok(&["status", "demo"]);
    assert!(dir.join(".tmp-dead0").exists());
    env.ok(&["resume", "demo"]);
    let left: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A holder that lets go with the loop's files whole says so in the lock
/// file, naming this boot; the next holder then does not look for what a
/// dead writer leaves. A holder that died leaves its own record, and a
/// line of another boot (a power loss since) is no word: both make the
/// next holder look, and `doctor --fix` always looks.
#[test]
fn a_lock_let_go_whole_spares_the_next_holder_the_search_for_dead_writes() {
    let env = crate::files_only!("leaves temporary files by hand");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    let lock = dir.join(".state.lock");
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let released = format!("released {}\n", boot.trim());
    env.ok(&["pause", "demo"]);
    assert_eq!(fs::read_to_string(&lock).unwrap(), released);
    let strays = || {
        fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tmp-"))
            .count()
    };
    // Nobody died since the lock was let go whole: nothing is looked for
    // (a file put there by hand stays).
    fs::write(dir.join(".tmp-by-hand"), "x").unwrap();
    env.ok(&["resume", "demo"]);
    assert_eq!(strays(), 1);
    assert_eq!(fs::read_to_string(&lock).unwrap(), released);
    // A holder that died: the next one looks.
    env.as_if_a_writer_died("demo");
    env.ok(&["pause", "demo"]);
    assert_eq!(strays(), 0);
    // Let go whole on another boot: the next one looks.
    fs::write(dir.join(".tmp-by-hand"), "x").unwrap();
    fs::write(&lock, "released 00000000-0000-0000-0000-000000000000\n").unwrap();
    env.ok(&["resume", "demo"]);
    assert_eq!(strays(), 0);
    // `doctor --fix` looks whatever the lock file says.
    fs::write(dir.join(".tmp-by-hand"), "x").unwrap();
    assert_eq!(fs::read_to_string(&lock).unwrap(), released);
    let out = env.run(&["doctor", "demo", "--fix"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(strays(), 0);
    // A tick killed mid-step, after a holder let go whole, leaves its own
    // record; the next holder finds its step in flight.
    assert_eq!(fs::read_to_string(&lock).unwrap(), released);
    env.ok(&["resume", "demo"]);
    let gate = tempfile::tempdir().unwrap();
    fs::write(dir.join("loop.toml"), crate::common::gated_step(gate.path())).unwrap();
    let mut runner = env.cmd().args(["tick", "demo"]).spawn().unwrap();
    crate::common::wait_for(&gate.path().join("started"));
    let pid = nix::unistd::Pid::from_raw(runner.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    runner.wait().unwrap();
    fs::write(gate.path().join("go"), "").unwrap();
    assert!(!fs::read_to_string(&lock).unwrap().starts_with("released"));
    env.ok(&["pause", "demo"]);
    assert_eq!(env.history_kinds("demo").last().unwrap(), "paused");
    assert!(env.history_kinds("demo").iter().any(|k| k == "crashed"));
    assert_eq!(env.state("demo")["tick"], 1, "the dead tick counts");
    assert_eq!(fs::read_to_string(&lock).unwrap(), released);
}

/// A commit writes the new state over the one the commit before it
/// replaced (kept as `.state.spare`) and swaps the two: no file is made or
/// removed. But never over one a reader still has open: that reader reads
/// the state it opened, whole, however many commits come meanwhile.
#[test]
fn commits_reuse_the_spare_state_file_but_never_one_a_reader_has_open() {
    use std::io::{Read, Seek};
    use std::os::unix::fs::MetadataExt;
    let env = crate::files_only!("looks at the state file's inode");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    let (state, spare) = (dir.join(".state.loop"), dir.join(".state.spare"));
    let ino = |p: &std::path::Path| fs::metadata(p).unwrap().ino();
    env.ok(&["pause", "demo"]);
    env.ok(&["resume", "demo"]);
    let mut pair = [ino(&state), ino(&spare)];
    pair.sort_unstable();
    for _ in 0..3 {
        env.ok(&["pause", "demo"]);
        env.ok(&["resume", "demo"]);
        let mut now = [ino(&state), ino(&spare)];
        now.sort_unstable();
        assert_eq!(now, pair, "the same two files, swapped");
    }
    let v0 = env.state("demo")["version"].as_u64().unwrap();

    let mut held = fs::File::open(&state).unwrap();
    let mut opened = String::new();
    held.read_to_string(&mut opened).unwrap();
    for _ in 0..2 {
        env.ok(&[
            "pause",
            "demo",
            "--reason",
            "a reason long enough to change every byte",
        ]);
        env.ok(&["resume", "demo"]);
    }
    held.rewind().unwrap();
    let mut later = String::new();
    held.read_to_string(&mut later).unwrap();
    assert_eq!(later, opened, "a state a reader holds open is never written over");
    let v: serde_json::Value = serde_json::from_str(&later).unwrap();
    assert_eq!(v["version"].as_u64(), Some(v0));
    assert_eq!(env.state("demo")["version"].as_u64(), Some(v0 + 4));
    assert!(env.ok(&["doctor", "demo"]).contains("demo"));
}

#[test]
fn a_state_file_that_is_a_fifo_is_refused_without_blocking() {
    let env = crate::files_only!("puts a fifo in place of .state.loop");
    env.new_loop("demo", "step = \"true\"\n");
    env.new_loop("other", "step = \"true\"\n");
    let state = env.loop_dir("demo").join(".state.loop");
    fs::remove_file(&state).unwrap();
    nix::unistd::mkfifo(&state, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for args in [
        &["status", "demo"][..],
        &["pause", "demo", "--timeout", "1s"],
        &["tick", "demo"],
        &["history", "demo"],
    ] {
        let err = env.fails(5, args);
        assert!(err.contains(".state.loop is a FIFO"), "{args:?}: {err}");
    }
    // The other loops are listed; the bad one is named.
    let out = env.run(&["status"]);
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stdout).contains("other"));
}

#[test]
fn history_and_lock_files_that_are_not_regular_files_are_refused() {
    let env = crate::files_only!("puts odd files in the loop directory");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    fs::remove_file(dir.join("history.jsonl")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("history.jsonl")).unwrap();
    let err = env.fails(5, &["history", "demo"]);
    assert!(err.contains("history.jsonl is a symbolic link"), "{err}");
    let before = env.state("demo");
    let err = env.fails(5, &["pause", "demo"]);
    assert!(err.contains("history.jsonl is a symbolic link"), "{err}");
    assert_eq!(env.state("demo"), before, "nothing was committed");
    fs::remove_file(dir.join("history.jsonl")).unwrap();
    let _ = fs::remove_file(dir.join(".state.lock"));
    nix::unistd::mkfifo(&dir.join(".state.lock"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let err = env.fails(5, &["pause", "demo"]);
    assert!(err.contains(".state.lock is a FIFO"), "{err}");
}

#[test]
fn metric_totals_that_would_overflow_leave_a_valid_state() {
    let env = Env::new();
    env.new_loop("demo", "step = \"echo x=1e308 > \\\"$AUTOMATON_METRICS\\\"\"\n");
    env.ok(&["tick", "demo"]);
    env.ok(&["tick", "demo"]);
    let s = env.state("demo");
    assert_eq!(s["totals"]["x"], 1e308, "the overflowing sum was left out");
    assert!(kinds(&env, "demo").contains(&"metrics-warning".to_owned()));
    env.ok(&["status", "demo"]);
    env.ok(&["tick", "demo"]);
}

#[test]
fn a_huge_gate_reason_and_a_huge_operator_reason_are_cut_with_a_marker() {
    let env = crate::files_only!("measures the loop's files");
    // Skips with a reason of 1 MiB of "r".
    let gate = crate::gate_fixtures::WatGate::new(
        "(drop (memory.grow (i32.const 17)))
         (memory.fill (i32.const 65536) (i32.const 114) (i32.const 1048576))
         (call $decide (i32.const 1) (i32.const 65536) (i32.const 1048576))",
    )
    .build();
    let path = env.root.join("verbose.wasm");
    fs::write(&path, gate).unwrap();
    env.new_loop(
        "demo",
        &format!("step = \"true\"\n[[gate]]\npath = \"{}\"\n", path.display()),
    );
    let out: serde_json::Value = serde_json::from_str(&env.ok(&["tick", "demo", "--json"])).unwrap();
    assert_eq!(out["outcome"], "skipped");
    let reason = out["reason"].as_str().unwrap();
    assert!(
        reason.len() <= 4096 && reason.ends_with("more bytes cut]"),
        "{}",
        reason.len()
    );
    // A reason an operator hands in is bounded the same way.
    env.ok(&["pause", "demo", "--reason", &"r".repeat(100_000)]);
    let kept = env.state("demo")["status_reason"].as_str().unwrap().to_owned();
    assert!(
        kept.len() <= 4096 && kept.ends_with("more bytes cut]"),
        "{}",
        kept.len()
    );
    let dir = env.loop_dir("demo");
    assert!(fs::metadata(dir.join(".state.loop")).unwrap().len() < 16_384);
    assert!(fs::metadata(dir.join("history.jsonl")).unwrap().len() < 64 * 1024);
}

#[test]
fn a_step_whose_result_cannot_be_recorded_exits_8_and_the_next_command_records_a_crash() {
    let env = crate::files_only!("breaks history.jsonl from the step");
    // The step makes the history file unwritable (a directory in its place),
    // so the tick's commit fails after the step ran.
    env.new_loop(
        "demo",
        "step = \"rm -f ../history.jsonl 2>/dev/null; rm -f \\\"$AUTOMATON_ROOT/loops/demo/history.jsonl\\\"; mkdir \\\"$AUTOMATON_ROOT/loops/demo/history.jsonl\\\"\"\n",
    );
    let err = env.fails(8, &["tick", "demo"]);
    assert!(err.contains("tick 1 ran its step"), "{err}");
    assert!(err.contains("do not run it again"), "{err}");
    let s = env.status("demo");
    assert_eq!(s["in_flight"]["tick"], 1, "the state says a step was in flight");
    assert_eq!(s["tick"], 0);
    fs::remove_dir(env.loop_dir("demo").join("history.jsonl")).unwrap();
    env.ok(&["pause", "demo"]);
    let s = env.state("demo");
    assert!(s["in_flight"].is_null());
    assert_eq!(s["tick"], 1);
    assert_eq!(kinds(&env, "demo"), ["crashed", "paused"]);
}

#[test]
fn a_fifo_in_one_loop_does_not_stall_the_daemons_other_loops() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let env = crate::files_only!("puts fifos in place of the loop's files");
    env.new_loop("good", "step = \"true\"\n[schedule]\nevery = \"1s\"\n");
    env.new_loop("bad", "step = \"true\"\n[schedule]\nevery = \"1s\"\n");
    let bad = env.loop_dir("bad");
    for file in ["loop.toml", ".state.loop"] {
        fs::remove_file(bad.join(file)).unwrap();
        nix::unistd::mkfifo(&bad.join(file), nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    let mut daemon = env
        .cmd()
        .arg("daemon")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while env.state("good")["tick"].as_u64().unwrap() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the good loop never ticked twice"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0), "the daemon heard SIGTERM");
}
