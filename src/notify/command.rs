//! `[notify] command`: run with the notice in its environment (a NUL,
//! which no environment variable can hold, as U+FFFD), stdin from
//! /dev/null and stderr for its output; bounded by its timeout, and its
//! failure logged, never the tick's or the command's that notified. In a
//! root shared by a group the command runs only as the member who wrote
//! loop.toml (its file's owner): a command one member wrote never runs as
//! another member, nor as root; for anyone else it is skipped, saying so
//! (the webhook, which runs no one's code, is still called).

use std::borrow::Cow;
#[cfg(unix)]
use std::os::fd::AsFd;
#[cfg(windows)]
use std::os::windows::io::AsHandle;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Notice;
use crate::config::{CommandLine, LoopConfig};
use crate::root::Root;

/// A notify command's timeout when loop.toml sets none.
const DEFAULT_TIMEOUT: Duration = Duration::from_mins(1);
const POLL: Duration = Duration::from_millis(20);

/// Runs `command` of `config` for `notice`, in `base` (the loop's directory).
pub(super) fn run(command: &CommandLine, config: &LoopConfig, root: &Root, base: &Path, notice: &Notice) {
    let argv = command.argv();
    let (program, args) = argv.split_first().expect("commands are never empty");
    let name = notice.loop_name.as_str();
    if let Err(why) = may_run(root, base) {
        tracing::warn!("loop {name:?}: its notify command is not run: {why}");
        return;
    }
    // Its output goes to stderr: a tick's stdout is its report.
    #[cfg(unix)]
    let stderr = std::io::stderr().as_fd().try_clone_to_owned();
    #[cfg(windows)]
    let stderr = std::io::stderr().as_handle().try_clone_to_owned();
    let stdout = match stderr {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::null(),
    };
    let mut command = Command::new(program);
    // The store's secrets stay with the runner, as from the step.
    let passed = config.passed_env();
    crate::step::withhold_secrets(&mut command, &passed);
    command.envs(passed);
    for (key, value) in notice.env() {
        command.env(key, &*env_value(&value));
    }
    let child = command
        .args(args)
        .current_dir(base)
        .env("AUTOMATON_ROOT", root.path())
        .stdin(Stdio::null())
        .stdout(stdout)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("loop {name:?}: cannot run its notify command {program:?}: {e}");
            return;
        }
    };
    let limit = config
        .notify
        .as_ref()
        .and_then(|n| n.timeout)
        .map_or(DEFAULT_TIMEOUT, |d| d.0);
    wait(child, limit, name);
}

/// Whether this user may run the loop's notify command: anyone in a root
/// of their own; in a group's root, only the owner of the loop's
/// loop.toml, who wrote the command.
#[cfg(unix)]
fn may_run(root: &Root, base: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !crate::fsx::Modes::of_dir(root.path()).shared() {
        return Ok(());
    }
    let file = base.join("loop.toml");
    let owner = std::fs::symlink_metadata(&file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .uid();
    let me = nix::unistd::geteuid().as_raw();
    match owner == me {
        true => Ok(()),
        false => Err(format!(
            "in a root shared by a group it runs only as the owner of {} ({}), not as {}",
            file.display(),
            user_name(owner),
            user_name(me)
        )),
    }
}

#[cfg(not(unix))]
fn may_run(_root: &Root, _base: &Path) -> Result<(), String> {
    Ok(())
}

#[cfg(unix)]
fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("{} (uid {uid})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// Waits for the command, killing it past `limit`; logs how it failed.
fn wait(mut child: std::process::Child, limit: Duration, name: &str) {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return,
            Ok(Some(s)) => {
                tracing::warn!("loop {name:?}: its notify command failed ({s})");
                return;
            }
            Ok(None) if started.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                tracing::warn!(
                    "loop {name:?}: its notify command was killed after {}",
                    crate::duration::format(limit)
                );
                return;
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => {
                tracing::warn!("loop {name:?}: cannot wait for its notify command: {e}");
                return;
            }
        }
    }
}

/// `text` as an environment variable can hold it: a NUL (which ends a
/// variable's value, so the command could not be started) becomes U+FFFD;
/// the rest, newlines included, is kept as the gate or person wrote it.
fn env_value(text: &str) -> Cow<'_, str> {
    match text.contains('\0') {
        true => Cow::Owned(text.replace('\0', "\u{fffd}")),
        false => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_in_a_value_is_replaced_and_the_rest_kept() {
        assert_eq!(env_value("a\0b\nc"), "a\u{fffd}b\nc");
        assert!(matches!(env_value("plain\tvalue"), Cow::Borrowed("plain\tvalue")));
    }
}
