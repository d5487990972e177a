//! Tests for the step runner, with real processes and real signals. Waits are
//! bounded polls for a final state; nothing asserts on how long anything took.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::output::MARKER_MAX_LEN;
use super::*;

/// How long a test waits for something that should happen promptly.
const BOUND: Duration = Duration::from_secs(30);

struct Fixture {
    dir: tempfile::TempDir,
    env: Vec<(OsString, OsString)>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![("OUT_DIR".into(), dir.path().into())];
        Fixture { dir, env }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }

    fn run_sh(&self, script: &str, timeout: Option<Duration>) -> Result<ProcessOutcome, StepError> {
        self.run_sh_with(script, timeout, 64 * 1024, |_| {})
    }

    fn run_sh_with(
        &self,
        script: &str,
        timeout: Option<Duration>,
        output_limit: u64,
        on_start: impl FnOnce(&Started),
    ) -> Result<ProcessOutcome, StepError> {
        let args = ["-c".into(), OsString::from(script)];
        let out = Dir::open(self.dir.path()).unwrap();
        let spec = StepSpec {
            program: "sh".as_ref(),
            args: &args,
            cwd: self.dir.path(),
            env: &self.env,
            timeout,
            kill_grace: Duration::from_millis(300),
            out_dir: &out,
            stdout: "stdout",
            stderr: "stderr",
            output_limit,
            confine: None,
            run_as: None,
        };
        run_with(&spec, on_start)
    }

    /// Waits until `name` holds `n` pids, one a line, and returns them.
    fn pids(&self, name: &str, n: usize) -> Vec<i32> {
        let until = Instant::now() + BOUND;
        loop {
            let text = std::fs::read_to_string(self.path(name)).unwrap_or_default();
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= n && text.ends_with('\n') {
                return pids;
            }
            assert!(Instant::now() < until, "{name} never held {n} pids: {text:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` when stopped, `Z`...).
#[cfg(target_os = "linux")]
fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether `pid` is a live process (a zombie counts as dead: it runs nothing).
fn alive(pid: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        state_of(pid).is_some_and(|s| !matches!(s, 'Z' | 'X'))
    }
    #[cfg(not(target_os = "linux"))]
    {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
    }
}

/// Waits (bounded) for every pid to die; returns those still alive.
fn survivors(pids: &[i32]) -> Vec<i32> {
    let until = Instant::now() + BOUND;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill_all(pids: &[i32]) {
    for &pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Forks two background sleepers and records them and itself in `$OUT_DIR/<file>`.
fn sleepers(file: &str) -> String {
    format!(
        "sleep 1000 & echo $! >> \"$OUT_DIR/{file}\"; sleep 1000 & echo $! >> \"$OUT_DIR/{file}\"; \
         echo $$ >> \"$OUT_DIR/{file}\"; wait"
    )
}

#[test]
fn exit_code_and_output_are_captured() {
    let f = Fixture::new();
    let outcome = f.run_sh("echo out; echo err >&2; pwd; exit 3", None).unwrap();
    assert_eq!(outcome.exit_code, Some(3));
    assert_eq!(outcome.signal, None);
    assert!(!outcome.timed_out);
    let cwd = f.dir.path().canonicalize().unwrap();
    assert_eq!(f.read("stdout"), format!("out\n{}\n", cwd.display()));
    assert_eq!(f.read("stderr"), "err\n");
}

#[test]
fn env_is_added_to_the_inherited_one() {
    let f = Fixture::new();
    let outcome = f.run_sh("echo \"$OUT_DIR\"; test -n \"$PATH\"", None).unwrap();
    assert!(outcome.success());
    assert_eq!(f.read("stdout"), format!("{}\n", f.dir.path().display()));
}

#[test]
fn death_by_signal_is_not_an_exit_code() {
    let f = Fixture::new();
    let outcome = f.run_sh("kill -KILL $$", None).unwrap();
    assert_eq!(outcome.exit_code, None);
    assert_eq!(outcome.signal, Some(Signal::SIGKILL as i32));
    assert!(!outcome.success());
}

#[test]
fn timeout_kills_the_whole_group() {
    let f = Fixture::new();
    let outcome = f.run_sh(&sleepers("pids"), Some(Duration::from_secs(2))).unwrap();
    let pids = f.pids("pids", 3);
    let left = survivors(&pids);
    kill_all(&left);
    assert!(left.is_empty(), "still running after the timeout: {left:?}");
    assert!(outcome.timed_out);
    assert_eq!(outcome.signal, Some(Signal::SIGTERM as i32));
    assert!(!outcome.success());
}

#[test]
fn a_step_ignoring_sigterm_is_killed_after_the_grace() {
    let f = Fixture::new();
    let script = format!("trap '' TERM; {}", sleepers("pids"));
    let outcome = f.run_sh(&script, Some(Duration::from_secs(2))).unwrap();
    let pids = f.pids("pids", 3);
    let left = survivors(&pids);
    kill_all(&left);
    assert!(left.is_empty(), "still running after SIGKILL: {left:?}");
    assert!(outcome.timed_out);
    assert_eq!(outcome.signal, Some(Signal::SIGKILL as i32));
}

#[test]
fn cancel_stops_the_group_without_a_timeout() {
    let f = Fixture::new();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let run = s.spawn(|| {
            f.run_sh_with(&sleepers("pids"), None, 1024, |st| {
                tx.send(st.canceller()).unwrap();
            })
        });
        let canceller = rx.recv().unwrap();
        let pids = f.pids("pids", 3);
        canceller.cancel();
        let outcome = run.join().unwrap().unwrap();
        let left = survivors(&pids);
        kill_all(&left);
        assert!(left.is_empty(), "still running after cancel: {left:?}");
        assert!(!outcome.timed_out);
        assert_eq!(outcome.signal, Some(Signal::SIGTERM as i32));
    });
}

#[test]
fn background_processes_do_not_outlive_a_successful_step() {
    let f = Fixture::new();
    let outcome = f
        .run_sh("sleep 1000 & echo $! > \"$OUT_DIR/pids\"; exit 0", None)
        .unwrap();
    assert!(outcome.success());
    let pids = f.pids("pids", 1);
    let left = survivors(&pids);
    kill_all(&left);
    assert!(left.is_empty(), "outlived the step: {left:?}");
}

#[test]
fn started_reports_the_step_and_its_own_group() {
    let f = Fixture::new();
    let mut seen = None;
    let outcome = f
        .run_sh_with(
            "echo $$; echo $$ > \"$OUT_DIR/pids\"; exec sleep 1000",
            None,
            1024,
            |st| {
                let pid = nix::unistd::Pid::from_raw(st.pid as i32);
                seen = Some((st.pid, st.pgid, nix::unistd::getpgid(Some(pid)).unwrap()));
                f.pids("pids", 1);
                st.canceller().cancel();
            },
        )
        .unwrap();
    assert_eq!(outcome.signal, Some(Signal::SIGTERM as i32));
    let (pid, pgid, actual_pgid) = seen.expect("on_start was called");
    assert_eq!(f.read("stdout"), format!("{pid}\n"));
    assert_eq!(actual_pgid.as_raw(), pgid);
    assert_ne!(pgid, nix::unistd::getpgrp().as_raw());
}

/// The guard leads the group and must outlive any catchable signal sent to
/// it (a step's `kill 0`, the runner's SIGTERM on timeout), or the group
/// would no longer die with the runner.
#[test]
fn the_guard_outlives_signals_to_its_group() {
    let f = Fixture::new();
    let outcome = f
        .run_sh_with(
            "trap '' TERM INT HUP USR1; echo $$ > \"$OUT_DIR/pids\"; exec sleep 1000",
            None,
            1024,
            |st| {
                f.pids("pids", 1);
                let group = nix::unistd::Pid::from_raw(st.pgid);
                for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGUSR1] {
                    nix::sys::signal::killpg(group, sig).unwrap();
                }
                // The guard is the group's leader: its pid is the group's id.
                let guard = st.pgid;
                std::thread::sleep(Duration::from_millis(100));
                assert!(alive(guard), "the guard died of a signal to its group");
                // Named in `ps`: its own name where it is a clone of the
                // runner, its argv[0] where it is a shell.
                #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
                {
                    let comm = std::fs::read(format!("/proc/{guard}/comm")).unwrap_or_default();
                    assert_eq!(comm, b"automaton-guard\n", "{comm:?}");
                }
                #[cfg(all(target_os = "linux", not(target_arch = "x86_64")))]
                {
                    let cmdline = std::fs::read(format!("/proc/{guard}/cmdline")).unwrap_or_default();
                    assert!(cmdline.starts_with(b"automaton-guard"), "{cmdline:?}");
                }
                st.canceller().cancel();
            },
        )
        .unwrap();
    // The step ignored SIGTERM, so the cancel's SIGKILL ended it.
    assert_eq!(outcome.signal, Some(Signal::SIGKILL as i32));
}

/// Whether the guard `pid`'s deadline timer is armed, as its timerfd's
/// `it_value` in `/proc/<pid>/fdinfo` says (zero: not armed, or expired);
/// `None` when it has no timer.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn guard_timer_armed(pid: i32) -> Option<bool> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    fds.flatten().find_map(|e| {
        let info = std::fs::read_to_string(e.path()).unwrap_or_default();
        let left = info.lines().find_map(|l| l.strip_prefix("it_value:"))?;
        Some(left.trim() != "(0, 0)")
    })
}

/// A deadline the runner moved before the old one passed holds even when
/// the guard wakes past the old one with the newer still unread (starved;
/// here stopped): the guard arms the newer one and the step lives on, to
/// die by it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_deadline_moved_in_time_holds_however_late_the_guard_reads_it() {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    let f = Fixture::new();
    let outcome = f
        .run_sh_with("echo $$ > \"$OUT_DIR/pids\"; exec sleep 1000", None, 1024, |st| {
            let step = f.pids("pids", 1)[0];
            let guard = Pid::from_raw(st.pgid);
            let until = Instant::now() + BOUND;
            let wait = |what: &str, cond: &dyn Fn() -> bool| {
                while !cond() {
                    assert!(Instant::now() < until, "never happened: {what}");
                    std::thread::sleep(Duration::from_millis(5));
                }
            };
            let deadline = st.deadline();
            deadline.until(Instant::now() + Duration::from_secs(1));
            wait("the guard armed its timer", &|| {
                guard_timer_armed(st.pgid) == Some(true)
            });
            kill(guard, Signal::SIGSTOP).unwrap();
            wait("the guard stopped", &|| state_of(st.pgid) == Some('T'));
            // Renewed in time, while the guard cannot read it; then the old
            // deadline passes.
            deadline.until(Instant::now() + Duration::from_secs(5));
            wait("the old deadline passed", &|| {
                guard_timer_armed(st.pgid) == Some(false)
            });
            kill(guard, Signal::SIGCONT).unwrap();
            // The guard either kills the group at the old deadline (the
            // step ends) or arms the newer one.
            wait("the guard acted", &|| {
                !alive(step) || guard_timer_armed(st.pgid) == Some(true)
            });
            assert!(
                alive(step),
                "the guard killed the step at a deadline already moved"
            );
            // The newer deadline holds: the group dies by it.
            assert!(survivors(&[step]).is_empty(), "the step outlived its deadline");
        })
        .unwrap();
    assert_eq!(outcome.signal, Some(Signal::SIGKILL as i32));
}

#[test]
fn output_beyond_the_limit_is_dropped_without_blocking_the_step() {
    let f = Fixture::new();
    let limit = 64 * 1024;
    let script = "head -c 10000000 /dev/zero; head -c 10000000 /dev/zero >&2; echo done > \"$OUT_DIR/done\"";
    let outcome = f.run_sh_with(script, None, limit, |_| {}).unwrap();
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(f.read("done"), "done\n");
    for stream in ["stdout", "stderr"] {
        let data = std::fs::read(f.path(stream)).unwrap();
        let len = data.len() as u64;
        assert!(
            len > limit && len <= limit + MARKER_MAX_LEN,
            "{stream}: {len} bytes"
        );
        assert!(data[..limit as usize].iter().all(|&b| b == 0));
        let marker = String::from_utf8_lossy(&data[limit as usize..]);
        assert!(marker.contains("output truncated"), "{stream}: {marker:?}");
        assert!(
            marker.contains(&(10_000_000 - limit).to_string()),
            "{stream}: {marker:?}"
        );
        assert_eq!(marker.trim_start_matches('\n').lines().count(), 1);
    }
}

#[test]
fn output_within_the_limit_has_no_marker() {
    let f = Fixture::new();
    let outcome = f.run_sh_with("printf 12345", None, 5, |_| {}).unwrap();
    assert!(outcome.success());
    assert_eq!(f.read("stdout"), "12345");
}

#[test]
fn a_silent_stream_leaves_no_file() {
    let f = Fixture::new();
    let outcome = f.run_sh("echo only-err >&2", None).unwrap();
    assert!(outcome.success());
    assert!(!f.path("stdout").exists());
    assert_eq!(f.read("stderr"), "only-err\n");
}

/// The escape is made with `setsid(1)`: part of util-linux, so always at
/// hand on Linux, where its absence fails the test; elsewhere (macOS has
/// none) the test says it was skipped.
#[test]
#[allow(
    clippy::manual_assert,
    reason = "a cfg! in an assert is a constant; this fails on Linux only"
)]
fn an_escaped_process_holding_the_output_does_not_hang_the_runner() {
    if let Err(e) = Command::new("setsid").arg("true").status() {
        if cfg!(target_os = "linux") {
            panic!("setsid(1) cannot be run: {e}");
        }
        eprintln!("skipped: no setsid(1) to escape the step's process group with ({e})");
        return;
    }
    let f = Fixture::new();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let script = "setsid sh -c 'echo $$ > \"$OUT_DIR/pids\"; exec sleep 1000' & \
                          until test -s \"$OUT_DIR/pids\"; do sleep 0.05; done; echo before";
            let _ = tx.send(f.run_sh(script, None));
        });
        let result = rx.recv_timeout(BOUND);
        let pids = f.pids("pids", 1);
        kill_all(&pids);
        let outcome = result.expect("the runner hung on an escaped process").unwrap();
        assert!(outcome.success());
        assert_eq!(f.read("stdout"), "before\n");
    });
}

#[test]
fn a_missing_program_is_a_typed_error_naming_it() {
    let f = Fixture::new();
    let out = Dir::open(f.dir.path()).unwrap();
    let spec = StepSpec {
        program: "automaton-no-such-program".as_ref(),
        args: &[],
        cwd: f.dir.path(),
        env: &[],
        timeout: None,
        kill_grace: Duration::from_secs(1),
        out_dir: &out,
        stdout: "stdout",
        stderr: "stderr",
        output_limit: 1024,
        confine: None,
        run_as: None,
    };
    let err = run(&spec).unwrap_err();
    assert!(
        matches!(&err, StepError::NotFound { program } if program == Path::new("automaton-no-such-program")),
        "{err:?}"
    );
    assert!(err.to_string().contains("automaton-no-such-program"));

    std::fs::write(f.path("script"), "#!/bin/sh\n").unwrap();
    let spec = StepSpec {
        program: "./script".as_ref(),
        ..spec
    };
    let err = run(&spec).unwrap_err();
    assert!(
        matches!(&err, StepError::NotExecutable { program } if program.ends_with("script")),
        "{err:?}"
    );

    let missing = f.path("missing");
    let spec = StepSpec {
        program: "true".as_ref(),
        cwd: &missing,
        ..spec
    };
    assert!(matches!(run(&spec).unwrap_err(), StepError::Cwd { path, .. } if path == missing));
}

/// Not a test on its own: the body of the process `runner_death_kills_every_step`
/// starts (with `--ignored`) and then SIGKILLs. It runs two steps at once, in
/// two threads, as a daemon would.
#[test]
#[ignore = "the body of a process that runner_death_kills_every_step starts"]
fn runner_death_helper() {
    let dir = std::env::var_os("AUTOMATON_TEST_RUNNER_DEATH")
        .expect("started by runner_death_kills_every_step, which sets AUTOMATON_TEST_RUNNER_DEATH");
    let f = Fixture {
        dir: tempfile::TempDir::new_in(&dir).unwrap(),
        env: vec![("OUT_DIR".into(), dir)],
    };
    std::thread::scope(|s| {
        for file in ["pids-1", "pids-2"] {
            let f = &f;
            s.spawn(move || f.run_sh(&sleepers(file), None));
        }
    });
}

#[test]
fn runner_death_kills_every_step() {
    let f = Fixture::new();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "step::tests::runner_death_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("AUTOMATON_TEST_RUNNER_DEATH", f.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids: Vec<i32> = ["pids-1", "pids-2"].iter().flat_map(|n| f.pids(n, 3)).collect();
    helper.kill().unwrap();
    helper.wait().unwrap();
    let left = survivors(&pids);
    kill_all(&left);
    assert!(left.is_empty(), "outlived the runner: {left:?}");
}

#[test]
fn output_goes_to_a_file_of_its_own_not_through_a_link_the_step_planted() {
    let f = Fixture::new();
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), "precious\n").unwrap();
    let script = format!(
        "ln -s '{}' \"$OUT_DIR/stdout\"; echo hi",
        outside.path().display()
    );
    assert!(f.run_sh(&script, None).unwrap().success());
    assert_eq!(std::fs::read_to_string(outside.path()).unwrap(), "precious\n");
    assert!(f.path("stdout").symlink_metadata().unwrap().is_file());
    assert_eq!(f.read("stdout"), "hi\n");
}
