//! `edit` killed or refused loses nothing and leaves nothing for good: a
//! copy that was not saved is listed by `doctor` and reopened by the next
//! `edit`; what a kill while saving left is removed by the next `edit`; a
//! loop.toml that is not a regular file is refused at once.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{BIN, wait_for};

/// The files in the loop's directory an edit or a writer made.
fn edit_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".loop.toml.") || n.starts_with(".tmp-"))
        .collect();
    names.sort();
    names
}

/// An editor script at `path` that runs `body` on the file in `$1`.
fn editor(path: &Path, body: &str) -> PathBuf {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_owned()
}

#[test]
fn a_killed_edit_is_listed_by_doctor_and_reopened_by_the_next_edit() {
    let env = crate::files_only!("reads the loop directory");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    let before = fs::read(dir.join("loop.toml")).unwrap();
    // The editor writes half the work, says so, and waits: the edit is
    // killed while it is open.
    let ready = env.root.join("ready");
    let first = editor(
        &env.root.join("first.sh"),
        &format!(
            "printf 'description = \"half\"\\nstep = \"true\"\\n' > \"$1\"\necho $$ > '{0}.tmp'; mv '{0}.tmp' '{0}'\nexec sleep 600",
            ready.display()
        ),
    );
    let mut edit = env
        .cmd()
        .args(["edit", "demo"])
        .env_remove("VISUAL")
        .env("EDITOR", &first)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&ready);
    edit.kill().unwrap();
    edit.wait().unwrap();
    let sleeper: i32 = fs::read_to_string(&ready).unwrap().trim().parse().unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sleeper),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(fs::read(dir.join("loop.toml")).unwrap(), before);
    let left = edit_files(&dir);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(".loop.toml.edit-"), "{left:?}");

    // doctor lists it with what to do, and --fix keeps a young one.
    for args in [&["doctor", "demo"][..], &["doctor", "demo", "--fix"]] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(&left[0]) && text.contains("was not saved"),
            "{text}"
        );
        assert!(text.contains("`automaton edit demo` reopens it"), "{text}");
    }
    assert_eq!(edit_files(&dir), left);

    // The next edit opens the half-done work, and finishes it.
    let second = editor(
        &env.root.join("second.sh"),
        "grep -q half \"$1\" || exit 9\nsed -i 's/half/whole/' \"$1\"",
    );
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env_remove("VISUAL")
        .env("EDITOR", &second)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        err.contains("a previous edit of loop \"demo\" was interrupted or refused; reopening it"),
        "{err}"
    );
    assert!(
        fs::read_to_string(dir.join("loop.toml"))
            .unwrap()
            .contains("whole")
    );
    assert_eq!(edit_files(&dir), Vec::<String>::new());
    assert_eq!(env.run(&["doctor", "demo"]).status.code(), Some(0));
}

#[test]
fn doctor_fix_removes_an_old_copy_of_a_dead_edit() {
    let env = crate::files_only!("writes the loop directory by hand");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    // Made by a process that is gone (no process has that pid), long ago.
    let old = dir.join(".loop.toml.edit-2147483632-abcdef.toml");
    fs::write(&old, "step = \"old\"\n").unwrap();
    let touched = Command::new("touch")
        .args(["-d", "20 minutes ago"])
        .arg(&old)
        .status()
        .unwrap();
    assert!(touched.success());
    let out = env.ok(&["doctor", "demo", "--fix"]);
    assert!(out.contains(&format!("removed {}", old.display())), "{out}");
    assert_eq!(edit_files(&dir), Vec::<String>::new());
}

#[test]
fn edit_refuses_a_fifo_loop_toml_at_once() {
    let env = crate::files_only!("puts a FIFO in the loop directory");
    env.new_loop("demo", "step = \"true\"\n");
    let config = env.loop_dir("demo").join("loop.toml");
    fs::remove_file(&config).unwrap();
    nix::unistd::mkfifo(&config, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut edit = env
        .cmd()
        .args(["edit", "demo"])
        .env("EDITOR", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A bound only so that a hang fails the test instead of stalling it.
    let deadline = Instant::now() + Duration::from_mins(1);
    let status = loop {
        if let Some(s) = edit.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            edit.kill().unwrap();
            panic!("edit hung on a FIFO loop.toml");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut edit.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(5), "{err}");
    assert!(err.contains(&format!("{} is a FIFO", config.display())), "{err}");
}

#[test]
fn an_edit_killed_at_its_rename_leaves_nothing_the_next_edit_keeps() {
    if !crate::crash::strace_usable("an_edit_killed_at_its_rename_leaves_nothing_the_next_edit_keeps") {
        return;
    }
    let env = crate::files_only!("reads the loop directory");
    env.new_loop("demo", "step = \"true\"\n");
    let dir = env.loop_dir("demo");
    let before = fs::read(dir.join("loop.toml")).unwrap();
    // The first rename of the edit is its save's: killed there.
    let mut strace = Command::new("strace");
    crate::common::isolate(&mut strace);
    let out = strace
        .args(["-f", "-o", "/dev/null", "-e"])
        .arg("inject=rename,renameat,renameat2:signal=SIGKILL:when=1")
        .arg(BIN)
        .arg("--root")
        .arg(&env.root)
        .args(["edit", "demo"])
        .env_remove("VISUAL")
        .env(
            "EDITOR",
            "sh -c 'printf \"description = \\\"saved\\\"\\nstep = \\\"true\\\"\\n\" > \"$1\"' sh",
        )
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.signal() == Some(9) || out.status.code() == Some(137),
        "{out:?}"
    );
    assert_eq!(fs::read(dir.join("loop.toml")).unwrap(), before);
    let left = edit_files(&dir);
    assert!(
        left.iter().all(|n| !n.starts_with(".tmp-")),
        "the store's name: {left:?}"
    );
    assert_eq!(left.len(), 2, "{left:?}");
    // A locking command leaves them: they are not the store's.
    env.ok(&["tick", "demo"]);
    assert_eq!(edit_files(&dir), left);
    let doctor = String::from_utf8(env.run(&["doctor", "demo"]).stdout).unwrap();
    assert!(doctor.contains("killed while saving loop.toml"), "{doctor}");
    // The next edit takes the copy up again and removes the unsaved file.
    let out = env
        .cmd()
        .args(["edit", "demo"])
        .env_remove("VISUAL")
        .env("EDITOR", "true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        fs::read_to_string(dir.join("loop.toml"))
            .unwrap()
            .contains("saved")
    );
    assert_eq!(edit_files(&dir), Vec::<String>::new());
}
