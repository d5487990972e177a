//! Links planted in and around a loop never lead automaton outside it: a
//! `runs/` that points elsewhere is refused and nothing behind it is
//! pruned, a link the step leaves as `runs/<tick>/cancel` is replaced, not
//! written through, a forged `in_flight` record gets no process group
//! signalled, and `rm` of a loop directory that is a link removes nothing.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::{Env, tree, wait_for};

/// Nine numbered directories, each with a file: what a `runs/` link
/// points at.
fn nine_runs(dir: &Path) -> Vec<String> {
    for tick in 1..=9 {
        let d = dir.join(tick.to_string());
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("step.out"), "not the loop's\n").unwrap();
    }
    tree(dir)
}

fn outside(env: &Env) -> PathBuf {
    let dir = env.root.with_file_name("outside");
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_runs_link_out_of_the_loop_is_refused_and_nothing_behind_it_is_pruned() {
    let env = Env::new();
    for keep in [2, 0] {
        let name = format!("keep{keep}");
        env.new_loop(&name, &format!("step = \"true\"\n[runs]\nkeep = {keep}\n"));
        env.ok(&["tick", &name]);
        let target = outside(&env).join(&name);
        let before = nine_runs(&target);
        let runs = env.loop_dir(&name).join("runs");
        fs::remove_dir_all(&runs).unwrap();
        symlink(&target, &runs).unwrap();

        // The tick cannot make its run directory: it fails saying why and
        // commits nothing (an approval it would have used stays).
        let events = env.history(&name).len();
        let reason = env.fails(5, &["tick", &name]);
        assert_eq!(tree(&target), before, "keep = {keep}: the outside was touched");
        assert_eq!(
            env.history(&name).len(),
            events,
            "keep = {keep}: a tick was recorded"
        );
        assert!(reason.contains(&runs.display().to_string()), "{reason}");
        assert!(reason.contains("symbolic link"), "{reason}");
        assert!(runs.symlink_metadata().unwrap().file_type().is_symlink());
    }
}

#[test]
fn cancel_never_writes_through_a_link_the_step_left_as_its_note() {
    let env = Env::new();
    let signals = outside(&env);
    let precious = signals.join("precious");
    fs::write(&precious, "precious\n").unwrap();
    let step = format!(
        "step = \"ln -s '{0}' \\\"$AUTOMATON_RUN_DIR/cancel\\\"; touch '{1}/started'; while :; do sleep 0.05; done\"\n",
        precious.display(),
        signals.display()
    );
    env.new_loop("demo", &step);
    let mut tick = env
        .cmd()
        .args(["tick", "demo"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&signals.join("started"));
    let out = env
        .cmd()
        .args(["cancel", "demo", "--grace", "5s"])
        .env("AUTOMATON_USER", "ann")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tick.wait().unwrap().code(), Some(6));
    assert_eq!(fs::read_to_string(&precious).unwrap(), "precious\n");
    let last = env.history("demo").pop().unwrap();
    let reason = last["reason"].as_str().unwrap();
    assert!(reason.starts_with("cancelled by ann"), "{last}");
}

/// What `/proc/<pid>/stat` says of a process: its group, its name and
/// when it started (clock ticks since boot).
fn proc_stat(pid: i32) -> Option<(i32, String, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields.get(2)?.parse().ok()?, comm, fields.get(19)?.parse().ok()?))
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_owned()
}

/// `sleep` in a session and process group of its own, as an unrelated
/// job would be; killed when dropped.
struct Bystander(Child);

impl Bystander {
    fn start() -> Bystander {
        let child = Command::new("setsid")
            .args(["sleep", "1000"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Until `setsid` has made the session (and become `sleep`).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while proc_stat(pid).is_none_or(|(pgrp, comm, _)| pgrp != pid || comm != "sleep") {
            assert!(std::time::Instant::now() < deadline, "setsid sleep never started");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Bystander(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `in_flight` into the loop's state file by hand.
fn forge_in_flight(env: &Env, name: &str, in_flight: serde_json::Value) {
    let path = env.loop_dir(name).join(".state.loop");
    let mut state: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    state["in_flight"] = in_flight;
    fs::write(&path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
}

#[test]
fn cancel_signals_no_group_a_forged_or_stale_record_names() {
    let env = crate::files_only!("it forges the state file");
    env.new_loop("demo", "step = \"true\"\n");
    let mut sleep = Bystander::start();
    let (_, _, ticks) = proc_stat(sleep.pid()).unwrap();
    let boot = boot_id();
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let record = |start: serde_json::Value| {
        serde_json::json!({
            "tick": 1,
            // A live process that is the sleep's parent, as a runner is
            // its guard's.
            "pid": std::process::id(),
            "host": host,
            "started_at": "2026-01-01T00:00:00Z",
            "group": sleep.pid(),
            "group_start": start,
        })
    };
    let cases = [
        // As good a forgery as can be made: the leader's real start.
        (
            "forged",
            record(serde_json::json!({ "ticks": ticks, "boot": boot })),
        ),
        (
            "stale",
            record(serde_json::json!({ "ticks": ticks + 1, "boot": boot })),
        ),
        (
            "another boot",
            record(serde_json::json!({ "ticks": ticks, "boot": "0" })),
        ),
        ("an older build's", record(serde_json::Value::Null)),
    ];
    for (what, forged) in cases {
        forge_in_flight(&env, "demo", forged);
        let err = env.fails(1, &["cancel", "demo", "--grace", "1s", "--timeout", "5s"]);
        assert!(err.contains("nothing was signalled"), "{what}: {err}");
        assert!(sleep.alive(), "{what}: the bystander was signalled");
        let note = env.loop_dir("demo").join("runs/1/cancel");
        assert!(note.symlink_metadata().is_err(), "{what}: a note was left");
    }
}

#[test]
fn rm_of_a_loop_directory_that_is_a_link_removes_nothing() {
    let env = Env::new();
    env.new_loop("demo", "step = \"echo hi\"\n");
    env.ok(&["tick", "demo"]);
    let dir = env.loop_dir("demo");
    let target = outside(&env).join("demo");
    fs::rename(&dir, &target).unwrap();
    symlink(&target, &dir).unwrap();
    let before = tree(&target);
    assert!(!before.is_empty());

    let err = env.fails(5, &["rm", "demo", "--force"]);
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(tree(&target), before, "rm touched what the link points to");
    assert!(
        dir.symlink_metadata().unwrap().file_type().is_symlink(),
        "the link is kept"
    );
}
