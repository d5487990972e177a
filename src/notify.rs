//! `[notify] command`: tells people that a loop needs them or has stopped.
//! Whoever ran a tick (the `tick` command, the daemon's worker) runs it once
//! the tick has freed the loop's lock (so the command may run `automaton` on
//! the loop itself), when the loop started awaiting approval, halted or
//! completed. It gets the loop, status and reason in its
//! environment (a NUL, which no environment variable can hold, as U+FFFD),
//! stdin from /dev/null and stderr for its output; it is bounded
//! by a timeout, and its failure is logged, never the tick's.

use std::borrow::Cow;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::LoopConfig;
use crate::root::Root;
use crate::state::Outcome;

use crate::tick::TickReport;

/// A notify command's timeout when loop.toml sets none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);

/// Runs the notify command of the loop `report` is about, if the tick is
/// one it is for and the loop has one. Never fails: a problem is logged.
pub fn after_tick(root: &Root, report: &TickReport) {
    if !report.notifies() {
        return;
    }
    let config = match crate::store::open(root, &report.loop_name).and_then(|d| Ok((d.config()?, d))) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("loop {:?}: cannot read its notify command: {e}", report.loop_name);
            return;
        }
    };
    run(&config.0, root, config.1.base_dir(), report);
}

/// Runs `config`'s notify command for `report`, in `base` (the loop's
/// directory), if it has one.
fn run(config: &LoopConfig, root: &Root, base: &Path, report: &TickReport) {
    let Some(notify) = &config.notify else { return };
    let status = match report.outcome {
        Outcome::AwaitingApproval => "awaiting_approval",
        Outcome::Halted => "halted",
        Outcome::Completed => "completed",
        _ => return,
    };
    let argv = notify.command.argv();
    let (program, args) = argv.split_first().expect("commands are never empty");
    let name = report.loop_name.as_str();
    // Its output goes to stderr: a tick's stdout is its report.
    let stdout = match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::null(),
    };
    let mut command = Command::new(program);
    // The store's secrets stay with the runner, as from the step.
    let passed = config.passed_env();
    crate::step::withhold_secrets(&mut command, &passed);
    command.envs(passed);
    let mut child = match command
        .args(args)
        .current_dir(base)
        .env("AUTOMATON_LOOP", name)
        .env("AUTOMATON_STATUS", status)
        .env(
            "AUTOMATON_REASON",
            &*env_value(report.reason.as_deref().unwrap_or("")),
        )
        .env("AUTOMATON_TICK", report.tick.to_string())
        .env("AUTOMATON_ROOT", root.path())
        .stdin(Stdio::null())
        .stdout(stdout)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("loop {name:?}: cannot run its notify command {program:?}: {e}");
            return;
        }
    };
    let limit = notify.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0);
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
