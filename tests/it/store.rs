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

/// A process that opens and reads every file of `dir` over and over (as
/// `cat`, a backup job or an indexer would) until dropped.
struct Reader(std::process::Child);

impl Reader {
    fn start(dir: &std::path::Path) -> Reader {
        let script = format!(
            "cd {dir:?} && while :; do cat .state.* .tmp-* history.jsonl* loop.toml >/dev/null 2>&1; done"
        );
        Reader(
            std::process::Command::new("sh")
                .args(["-c", &script])
                .stdin(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Readers never change what a writer does: with processes reading every
/// file of the loop all the while, every tick and every operator command
/// completes and is recorded once. (An earlier build wrote the state under
/// a lease whose break signal killed the writer.)
#[test]
fn readers_of_every_loop_file_never_disturb_a_commit() {
    let env = crate::files_only!("reads the loop's files directly");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    let v0 = env.state("demo")["version"].as_u64().unwrap();
    let _readers = [Reader::start(&dir), Reader::start(&dir)];
    const TICKS: u64 = 40;
    for n in 1..=TICKS {
        let out = env.run(&["tick", "demo"]);
        assert_eq!(out.status.code(), Some(0), "tick {n}: {out:?}");
        if n % 4 == 0 {
            env.ok(&["pause", "demo"]);
            env.ok(&["resume", "demo"]);
        }
    }
    let state = env.state("demo");
    assert_eq!(state["tick"].as_u64(), Some(TICKS));
    assert_eq!(state["version"].as_u64(), Some(v0 + TICKS * 2 + TICKS / 4 * 2));
    let ticks = kinds(&env, "demo").iter().filter(|k| *k == "tick").count();
    assert_eq!(ticks as u64, TICKS);
}

/// A reader that opened the state reads it whole, as it was, however many
/// commits come meanwhile: each commit is a new file renamed over it.
#[test]
fn a_state_a_reader_holds_open_is_never_written_over() {
    use std::io::{Read, Seek};
    let env = crate::files_only!("holds the state file open");
    env.new_loop("demo", "step = \"true\"\n");
    let state = env.loop_dir("demo").join(".state.loop");
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
    assert_eq!(later, opened);
    assert_eq!(env.state("demo")["version"].as_u64(), Some(v0 + 4));
}

/// The daemon is not stopped by readers either.
#[test]
fn the_daemon_keeps_ticking_beside_readers() {
    let env = crate::files_only!("reads the loop's files directly");
    let toml = env.root.join("often.toml");
    fs::write(&toml, "step = \"true\"\n[schedule]\nevery = \"100ms\"\n").unwrap();
    let new = env
        .cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .args(["new", "often", "--from"])
        .arg(&toml)
        .output()
        .unwrap();
    assert!(new.status.success(), "{new:?}");
    let _readers = [
        Reader::start(&env.loop_dir("often")),
        Reader::start(&env.loop_dir("often")),
    ];
    let mut daemon = env
        .cmd()
        .env("AUTOMATON_MIN_EVERY", "100ms")
        .arg("daemon")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while env.state("often")["tick"].as_u64().unwrap() < 20 {
        assert!(std::time::Instant::now() < deadline, "the daemon stopped ticking");
        assert!(
            daemon.try_wait().unwrap().is_none(),
            "the daemon died: {:?}",
            daemon.try_wait()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = daemon.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let state = env.state("often");
    let ticks = kinds(&env, "often").iter().filter(|k| *k == "tick").count();
    assert_eq!(ticks as u64, state["tick"].as_u64().unwrap());
}

/// `.state.spare`, which an earlier build kept to write the next state
/// over, is never read or written: whatever is there (a huge file, a
/// FIFO, a directory, a link) the loop ticks, and a plain file is removed
/// with the other leftovers.
#[test]
fn a_spare_state_file_left_by_an_earlier_build_is_never_used() {
    let env = crate::files_only!("plants files in the loop directory");
    for (name, plant) in [
        ("huge", "huge"),
        ("fifo", "fifo"),
        ("dir", "dir"),
        ("link", "link"),
    ] {
        env.new_loop(name, "step = \"true\"\n");
        let dir = env.loop_dir(name);
        let spare = dir.join(".state.spare");
        match plant {
            "huge" => fs::write(&spare, vec![b' '; 17 << 20]).unwrap(),
            "fifo" => nix::unistd::mkfifo(&spare, nix::sys::stat::Mode::S_IRWXU).unwrap(),
            "dir" => fs::create_dir(&spare).unwrap(),
            _ => std::os::unix::fs::symlink("/etc/passwd", &spare).unwrap(),
        }
        env.as_if_a_writer_died(name);
        for _ in 0..3 {
            env.ok(&["tick", name]);
        }
        assert_eq!(env.state(name)["tick"].as_u64(), Some(3), "{name}");
        let len = fs::metadata(dir.join(".state.loop")).unwrap().len();
        assert!(len < 64 * 1024, "{name}: the state is {len} bytes");
        if plant == "huge" {
            assert!(!spare.exists(), "a plain spare is removed as a leftover");
        }
        env.ok(&["status", name]);
    }
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
    // so the tick's commit fails after the step ran: unconfined, since a
    // confined step cannot touch its loop's history.
    env.new_loop(
        "demo",
        "[step]\nconfine = \"off\"\ncommand = \"rm -f ../history.jsonl 2>/dev/null; rm -f \\\"$AUTOMATON_ROOT/loops/demo/history.jsonl\\\"; mkdir \\\"$AUTOMATON_ROOT/loops/demo/history.jsonl\\\"\"\n",
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
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

#[test]
fn a_roots_config_that_is_a_fifo_is_refused_without_blocking() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let config = env.root.join("automaton.toml");
    let _ = fs::remove_file(&config);
    nix::unistd::mkfifo(&config, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for args in [&["status", "demo"][..], &["tick", "demo"], &["validate"]] {
        let mut child = env
            .cmd()
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A command that waits on the FIFO is ended, and the test fails.
        let mut waited = 0;
        while child.try_wait().unwrap().is_none() && waited < 200 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            waited += 1;
        }
        let hung = child.try_wait().unwrap().is_none();
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!hung, "{args:?} waited on the FIFO");
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(err.contains("automaton.toml is a FIFO"), "{args:?}: {err}");
    }
}

/// `args`' output and the most memory the command held (its peak
/// resident set, in KiB) as GNU time tells it (measured in a process of
/// its own: this one's memory is not counted); no figure without it.
fn with_peak_rss(env: &Env, args: &[&str]) -> (std::process::Output, Option<u64>) {
    let time = std::path::Path::new("/usr/bin/time");
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut cmd = match time.exists() {
        true => {
            let mut c = std::process::Command::new(time);
            c.args(["-f", "%M", "-o"])
                .arg(report.path())
                .arg(crate::common::BIN);
            c
        }
        false => std::process::Command::new(crate::common::BIN),
    };
    crate::common::isolate(&mut cmd);
    let out = cmd
        .arg("--root")
        .arg(&env.root)
        .args(args)
        .env("AUTOMATON_USER", "operator")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let peak = fs::read_to_string(report.path())
        .ok()
        .and_then(|t| t.trim().parse().ok());
    (out, peak)
}

/// `history --limit N` over a 60 MB history answers its newest events,
/// those of the kinds asked for, holding far less than the file: it reads
/// from the end.
#[test]
fn the_newest_events_of_a_large_history_are_read_from_its_end() {
    let env = crate::files_only!("writes a large history.jsonl by hand");
    env.new_loop("big", "step = \"true\"\n[history]\nmax_size = \"1GiB\"\n");
    let path = env.loop_dir("big").join("history.jsonl");
    let version = env.state("big")["version"].as_u64().unwrap();
    let mut filler = String::new();
    for i in 0..300_000 {
        filler += &format!(
            "{{\"v\":{version},\"at\":\"2026-01-01T00:00:00Z\",\"kind\":\"resumed\",\"by\":\"ann\",\"from\":\"paused\",\"n\":{i},\"pad\":\"{}\"}}\n",
            "x".repeat(120)
        );
    }
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, filler.as_bytes()).unwrap();
    drop((file, filler));
    assert!(fs::metadata(&path).unwrap().len() > 50_000_000);
    env.ok(&["pause", "big", "--reason", "the newest"]);
    let (out, peak) = with_peak_rss(&env, &["history", "big", "--limit", "3", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let last: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let said: Vec<(&str, Option<&str>)> = last
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["reason"].as_str()))
        .collect();
    assert_eq!(
        said,
        [
            ("resumed", None),
            ("resumed", None),
            ("paused", Some("the newest"))
        ]
    );
    let first = env.ok(&["history", "big", "--limit", "1", "--kind", "created", "--json"]);
    assert!(first.contains("\"created\""), "{first}");
    // The whole file parsed holds hundreds of MB; the answer, a few.
    match peak {
        Some(peak) => assert!(peak < 48 * 1024, "history --limit 3 held {peak} KiB"),
        None => eprintln!("no /usr/bin/time: the peak memory was not measured"),
    }
}
