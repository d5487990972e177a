//! The quick start (`examples/quickstart/run.sh`) with a binary the user
//! already has: nothing is built (no cargo on the PATH), the console's
//! sign-in link says whose token it carries, the daemon ticks the example
//! loop, and Ctrl-C ends it with the loop's status shown.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::common::empty_home;

#[test]
fn the_quick_start_runs_a_binary_given_and_builds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let out = dir.path().join("out");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart/run.sh");
    let mut child = std::os::unix::process::CommandExt::process_group(
        Command::new("sh")
            .arg(&script)
            .arg(&root)
            .env("BIN", env!("CARGO_BIN_EXE_automaton"))
            // No cargo here: building anything fails the run.
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", empty_home())
            .env("PORT", "0")
            .env_remove("AUTOMATON_ROOT")
            .env_remove("AUTOMATON_STORE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null()),
        0,
    )
    .spawn()
    .unwrap();
    let state = root.join("loops/hello/.state.loop");
    let deadline = Instant::now() + Duration::from_mins(2);
    let ticked = || {
        std::fs::read(&state)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|s| s["tick"].as_u64())
            .is_some_and(|t| t >= 1)
    };
    while !ticked() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
            panic!(
                "the daemon never ticked the loop: {}",
                std::fs::read_to_string(&out).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    killpg(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(status.success(), "{status:?}: {text}");
    assert!(text.contains("the token in it is user me's"), "{text}");
    assert!(text.contains("/signin#token="), "{text}");
    assert!(text.contains("hello"), "the loop's status after: {text}");
}
