//! Running a tick's step and verifier: where they run, what environment
//! they get, where their output goes, and what counts as failure.

use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;

use crate::config::{CommandLine, LoopConfig};
use crate::fsx::Dir;
use crate::lock::LockWatch;
use crate::runs::{self, Runs};
use crate::state::{Cancellation, ProcessOutcome};
use crate::step::confine::{self, ConfineError, Confinement, Prepared};
use crate::step::{self, Canceller, StepError, StepSpec};
use crate::worktree::WorktreeError;

/// A step's timeout when loop.toml sets none.
pub(super) const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_hours(1);
/// A verifier's timeout when loop.toml sets none.
pub(super) const DEFAULT_VERIFIER_TIMEOUT: Duration = Duration::from_mins(30);
/// Between SIGTERM and SIGKILL when a timeout ends a process group.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What the step's environment says about the tick.
pub(super) struct Env<'a> {
    pub loop_name: &'a str,
    pub tick: u64,
    pub root: &'a Path,
    pub worktree: Option<&'a Path>,
    pub run_dir: &'a Path,
    /// The loop's directory (its loop.toml, its state and runs).
    pub loop_dir: &'a Path,
}

impl Env<'_> {
    fn vars(&self) -> Vec<(OsString, OsString)> {
        let mut vars: Vec<(OsString, OsString)> = vec![
            ("AUTOMATON_LOOP".into(), self.loop_name.into()),
            ("AUTOMATON_TICK".into(), self.tick.to_string().into()),
            ("AUTOMATON_ROOT".into(), self.root.into()),
            ("AUTOMATON_RUN_DIR".into(), self.run_dir.into()),
            (
                "AUTOMATON_METRICS".into(),
                self.run_dir.join(runs::METRICS).into(),
            ),
        ];
        if let Some(w) = self.worktree {
            vars.push(("AUTOMATON_WORKTREE".into(), w.into()));
        }
        vars
    }
}

/// Why a tick failed: its causes (the OS error of a spawn that failed, git's
/// complaint) stay attached as sources, and [`Failure::reason`] says them
/// all in the one line the state and history keep.
#[derive(Debug, Error)]
pub(crate) enum Failure {
    /// The step or verifier could not be started or supervised.
    #[error("{what}")]
    Start {
        what: &'static str,
        #[source]
        source: StepError,
    },
    /// It ran past its timeout; said as configured, not as measured.
    #[error("{what} timed out after {}", crate::duration::format(*timeout))]
    TimedOut { what: &'static str, timeout: Duration },
    /// It exited unsuccessfully or was killed by a signal.
    #[error("{what} {outcome}")]
    Exited {
        what: &'static str,
        outcome: ProcessOutcome,
    },
    /// `automaton cancel` stopped it (who, and why if they said); `ended`
    /// is how it ended.
    #[error("cancelled by {note} ({ended})")]
    Cancelled { note: Cancellation, ended: Box<Failure> },
    /// The runner lost the loop's lock (the PostgreSQL store's lease) and
    /// killed what ran under it; `ended` is how it ended.
    #[error("the loop's lock was lost, and the runner killed the {what} ({ended})")]
    LockLost { what: &'static str, ended: Box<Failure> },
    /// The daemon's grace period ended between the step and the verifier.
    #[error("cancelled before the verifier ran")]
    CancelledBeforeVerifier,
    /// The loop's worktree could not be made or checked.
    #[error("worktree")]
    Worktree(#[source] WorktreeError),
    /// The step could not be confined, so it did not run.
    #[error("the step did not run")]
    Confine(#[source] ConfineError),
    /// `[step] run_as` names a user the runner cannot switch to.
    #[error("the step did not run: run_as = {user:?}: {why}")]
    RunAs { user: String, why: String },
}

impl Failure {
    /// How `what` ended when that is a failure (a timeout, a bad exit).
    fn ended(what: &'static str, o: &ProcessOutcome, timeout: Duration) -> Failure {
        if o.timed_out {
            Failure::TimedOut { what, timeout }
        } else {
            Failure::Exited {
                what,
                outcome: o.clone(),
            }
        }
    }

    /// The failure with its causes, as one line: the tick's reason.
    pub(crate) fn reason(&self) -> String {
        crate::error::with_causes(self)
    }

    /// Who cancelled the tick, and why, when that is how it failed.
    pub(crate) fn cancellation(&self) -> Option<&Cancellation> {
        match self {
            Failure::Cancelled { note, .. } => Some(note),
            _ => None,
        }
    }
}

/// How the step and verifier went.
#[derive(Debug, Default)]
pub(super) struct Ran {
    pub step: Option<ProcessOutcome>,
    pub verifier: Option<ProcessOutcome>,
    /// Why the tick failed, if it did.
    pub failure: Option<Failure>,
    /// The run directory, held open, once it was made.
    pub run_dir: Option<Dir>,
    /// How the step ran: confined (and how) or not; none when it did not
    /// start.
    pub confinement: Option<Confinement>,
}

impl Ran {
    pub(super) fn failed(&self) -> bool {
        self.failure.is_some()
    }

    /// How the step and verifier ended, in a few words.
    pub(super) fn describe(&self) -> String {
        match (&self.failure, &self.step) {
            (Some(why), _) => why.reason(),
            (None, Some(step)) => format!("step {step}"),
            (None, None) => "it did not start".to_owned(),
        }
    }
}

/// Stops a tick's step (and keeps its verifier from starting) from another
/// thread: the daemon uses it when its grace period ends. Cancelling before
/// the step starts stops it as soon as it does.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cancel(Arc<Mutex<CancelState>>);

#[derive(Debug, Default)]
struct CancelState {
    cancelled: bool,
    current: Option<Canceller>,
}

impl Cancel {
    /// Stops the running process, if any (SIGTERM to its group, a grace
    /// period, SIGKILL), and any later one.
    pub(crate) fn cancel(&self) {
        let mut s = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.cancelled = true;
        if let Some(c) = &s.current {
            c.cancel();
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .cancelled
    }

    fn arm(&self, c: Canceller) {
        let mut s = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.cancelled {
            c.cancel();
        }
        s.current = Some(c);
    }
}

/// Makes the tick's run directory in the loop directory `base`, old ones
/// pruned to `[runs] keep`. Made before the tick commits itself as in
/// flight: a tick that cannot make it runs nothing and uses no approval.
pub(super) fn make_run_dir(
    config: &LoopConfig,
    base: &Path,
    tick: u64,
    run_dir: &Path,
) -> crate::error::Result<Dir> {
    Runs::make(base).and_then(|runs| {
        let run = runs.make_for_tick(tick, config.runs.keep);
        run.map_err(crate::fsx::io_error("creating directory", run_dir))
    })
}

/// Runs the step (in `group` when the tick made it beforehand), then (if
/// it succeeded) the verifier, with their output in `run_dir`. When `lost`
/// says the loop's lock is lost, whichever of them runs is killed at once,
/// and the verifier does not start.
pub(super) fn run_step_and_verifier(
    config: &LoopConfig,
    cwd: &Path,
    env: &Env<'_>,
    cancel: Option<&Cancel>,
    lost: Option<&LockWatch>,
    group: Option<step::Group>,
    run_dir: Dir,
) -> Ran {
    let mut ran = run_in(config, cwd, env, cancel, lost, group, &run_dir);
    ran.run_dir = Some(run_dir);
    ran
}

/// The step, then the verifier, with their output in `run_dir`.
fn run_in(
    config: &LoopConfig,
    cwd: &Path,
    env: &Env<'_>,
    cancel: Option<&Cancel>,
    lost: Option<&LockWatch>,
    group: Option<step::Group>,
    run_dir: &Dir,
) -> Ran {
    let mut vars = env.vars();
    vars.extend(config.passed_env());
    let (prepared, run_as) = match confined(config, cwd, env) {
        Ok(c) => c,
        Err(failure) => {
            return Ran {
                failure: Some(failure),
                ..Ran::default()
            };
        }
    };
    let confinement = Some(
        prepared
            .as_ref()
            .map_or(Confinement::Unconfined, |p| p.record.clone()),
    );
    if prepared.is_some()
        && let Some(tmp) = super::confinement::private_tmpdir(env.root, env.run_dir)
        && crate::fsx::create_dirs(&tmp).is_ok()
    {
        vars.push(("TMPDIR".into(), tmp.into()));
    }
    let runner = Runner {
        cwd,
        vars,
        run_dir,
        limit: config.runs.output_limit.as_u64(),
        cancel,
        lost,
        confine: prepared.as_ref(),
        run_as,
    };
    let mut ran = run_confined(config, &runner, group);
    ran.confinement = confinement;
    ran
}

/// The uid and gid a step runs as.
type User = (u32, u32);

/// The step's confinement (none with `confine = "off"`) and the user it
/// runs as: refused when the kernel cannot confine or the runner cannot
/// switch users.
fn confined(
    config: &LoopConfig,
    cwd: &Path,
    env: &Env<'_>,
) -> Result<(Option<Prepared>, Option<User>), Failure> {
    let run_as = match &config.step.run_as {
        Some(user) => Some(switch_to(user, env.run_dir)?),
        None => None,
    };
    let prepared = match config.step.confine {
        crate::config::Confine::Off => None,
        crate::config::Confine::On => {
            let policy = super::confinement::policy(config, cwd, env);
            Some(confine::prepare(&policy).map_err(Failure::Confine)?)
        }
    };
    Ok((prepared, run_as))
}

/// The uid and gid of `user`, once the run directory is theirs; refused
/// when the runner may not switch users.
fn switch_to(user: &str, run_dir: &Path) -> Result<User, Failure> {
    let refuse = |why: String| Failure::RunAs {
        user: user.to_owned(),
        why,
    };
    if !super::confinement::may_switch_users() {
        return Err(refuse(
            "the runner cannot switch users: that needs CAP_SETUID and CAP_SETGID (root has them unless they were dropped)"
                .to_owned(),
        ));
    }
    #[cfg(windows)]
    return Err(refuse(format!(
        "running a step as another user needs Unix (not {})",
        run_dir.display()
    )));
    #[cfg(unix)]
    let found =
        nix::unistd::User::from_name(user).map_err(|e| refuse(format!("cannot look the user up: {e}")))?;
    #[cfg(unix)]
    let found = found.ok_or_else(|| refuse("no such user".to_owned()))?;
    #[cfg(unix)]
    let (uid, gid) = (found.uid.as_raw(), found.gid.as_raw());
    #[cfg(unix)]
    nix::unistd::chown(run_dir, Some(found.uid), Some(found.gid))
        .map_err(|e| refuse(format!("cannot give it {}: {e}", run_dir.display())))?;
    #[cfg(unix)]
    Ok((uid, gid))
}

/// The step, then the verifier, each confined as `runner` says.
fn run_confined(config: &LoopConfig, runner: &Runner<'_>, group: Option<step::Group>) -> Ran {
    let lost = runner.lost;
    let cancel = runner.cancel;
    let run_dir = runner.run_dir;
    let timeout = config.timeout.map_or(DEFAULT_STEP_TIMEOUT, |d| d.0);
    let step = match runner.run("step", &config.step.command, timeout, group) {
        Ok(o) => o,
        Err(failure) => {
            return Ran {
                failure: Some(failure),
                ..Ran::default()
            };
        }
    };
    let ended = |failure| Ran {
        failure: Some(failure),
        step: Some(step.clone()),
        ..Ran::default()
    };
    if lost.is_some_and(LockWatch::is_lost) {
        let ended_as = Box::new(Failure::ended("step", &step, timeout));
        return ended(Failure::LockLost {
            what: "step",
            ended: ended_as,
        });
    }
    if let Some(note) = runs::cancelled_by(run_dir) {
        let ended_as = Box::new(Failure::ended("step", &step, timeout));
        return ended(Failure::Cancelled {
            note,
            ended: ended_as,
        });
    }
    if !step.success() {
        return ended(Failure::ended("step", &step, timeout));
    }
    let Some(v) = &config.verifier else {
        return Ran {
            step: Some(step),
            ..Ran::default()
        };
    };
    if cancel.is_some_and(Cancel::is_cancelled) {
        return ended(Failure::CancelledBeforeVerifier);
    }
    verified(runner, v, step)
}

/// Runs the verifier after a step that succeeded: its failure, its
/// cancellation or a lock lost while it ran fails the tick.
fn verified(runner: &Runner<'_>, v: &crate::config::Verifier, step: ProcessOutcome) -> Ran {
    let timeout = v.timeout.map_or(DEFAULT_VERIFIER_TIMEOUT, |d| d.0);
    match runner.run("verifier", &v.command, timeout, None) {
        Ok(o) if runner.lost.is_some_and(LockWatch::is_lost) => Ran {
            failure: Some(Failure::LockLost {
                what: "verifier",
                ended: Box::new(Failure::ended("verifier", &o, timeout)),
            }),
            step: Some(step),
            verifier: Some(o),
            ..Ran::default()
        },
        Ok(o) => Ran {
            failure: match runs::cancelled_by(runner.run_dir) {
                Some(note) => Some(Failure::Cancelled {
                    note,
                    ended: Box::new(Failure::ended("verifier", &o, timeout)),
                }),
                None => (!o.success()).then(|| Failure::ended("verifier", &o, timeout)),
            },
            step: Some(step),
            verifier: Some(o),
            ..Ran::default()
        },
        Err(failure) => Ran {
            failure: Some(failure),
            step: Some(step),
            ..Ran::default()
        },
    }
}

/// What the step and the verifier of one tick share.
struct Runner<'a> {
    cwd: &'a Path,
    vars: Vec<(OsString, OsString)>,
    run_dir: &'a Dir,
    limit: u64,
    cancel: Option<&'a Cancel>,
    lost: Option<&'a LockWatch>,
    confine: Option<&'a Prepared>,
    run_as: Option<User>,
}

impl Runner<'_> {
    /// Runs `command` as `what` (`step`, `verifier`), its output in
    /// `runs/<tick>/<what>.out` and `.err`. A `group` made beforehand is
    /// named in the tick's `in_flight` record; else the group's id is
    /// written to `runs/<tick>/<what>.pgid` once the command runs in it.
    fn run(
        &self,
        what: &'static str,
        command: &CommandLine,
        timeout: Duration,
        group: Option<step::Group>,
    ) -> Result<ProcessOutcome, Failure> {
        let argv: Vec<OsString> = command.argv().into_iter().map(OsString::from).collect();
        let (program, args) = argv.split_first().expect("commands are never empty");
        let (stdout, stderr) = (runs::output_name(what, false), runs::output_name(what, true));
        let spec = StepSpec {
            program,
            args,
            cwd: self.cwd,
            env: &self.vars,
            timeout: Some(timeout),
            kill_grace: KILL_GRACE,
            out_dir: self.run_dir,
            stdout: &stdout,
            stderr: &stderr,
            output_limit: self.limit,
            confine: self.confine,
            run_as: self.run_as,
        };
        let announced = group.is_some();
        // The file stays (removing it could free the very room a full disk
        // needs to fail the tick's commit visibly); `cancel` signals a group
        // only while its leader is still the one this runner started.
        step::run_in(&spec, group, |started| {
            if let Some(c) = self.cancel {
                c.arm(started.canceller());
            }
            if let Some(lost) = self.lost {
                let canceller = started.canceller();
                lost.on_lost(move || canceller.kill());
                let deadline = started.deadline();
                lost.on_renewed(move |at| deadline.until(at));
            }
            if !announced {
                let start = crate::procfs::start_of(started.pgid);
                if let Err(e) = runs::write_group(self.run_dir, what, started.pgid, start.as_ref()) {
                    tracing::debug!(
                        "cannot write {}: {e}",
                        self.run_dir.join(runs::pgid_name(what)).display()
                    );
                }
            } else if runs::has_note(self.run_dir) {
                // `cancel` found the group in the `in_flight` record and may
                // have signalled it before the command was in it: `cancel`
                // leaves its note before it signals, so the note is there.
                started.canceller().cancel();
            }
        })
        .map_err(|source| Failure::Start { what, source })
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_failure_keeps_its_causes_in_its_reason() {
        let f = Failure::Start {
            what: "step",
            source: StepError::Spawn {
                program: "x".into(),
                source: std::io::Error::from_raw_os_error(nix::libc::E2BIG),
            },
        };
        assert!(std::error::Error::source(&f).is_some());
        assert_eq!(
            f.reason(),
            format!(
                "step: cannot start program x: {}",
                std::io::Error::from_raw_os_error(nix::libc::E2BIG)
            )
        );
        let timed_out = ProcessOutcome {
            exit_code: None,
            signal: Some(9),
            duration_ms: 1234,
            timed_out: true,
        };
        let cancelled = |reason: Option<&str>| Failure::Cancelled {
            note: Cancellation {
                by: "ops".into(),
                reason: reason.map(str::to_owned),
            },
            ended: Box::new(Failure::ended("step", &timed_out, Duration::from_secs(90))),
        };
        assert_eq!(
            cancelled(None).reason(),
            "cancelled by ops (step timed out after 1m 30s)"
        );
        assert_eq!(
            cancelled(Some("a freeze")).reason(),
            "cancelled by ops: a freeze (step timed out after 1m 30s)"
        );
    }
}
