//! Running a loop's step and verifier processes. A step runs in its own
//! process group with its output captured, bounded, to files; a timeout kills
//! the whole group (SIGTERM, a grace period, SIGKILL), and so does the step's
//! end: a step's background processes do not outlive it. If the runner dies,
//! even by SIGKILL, the group dies with it (see `guard`), so two steps of one
//! loop never run at once.
//!
//! Not covered: a process that leaves the group on purpose (`setsid`, or a
//! daemon that detaches) is beyond a process group's reach.

pub mod confine;
#[cfg(unix)]
mod guard;
#[cfg(unix)]
pub use guard::Deadline;
#[cfg(windows)]
mod job;
#[cfg(windows)]
pub use job::{Canceller, Deadline, Group};
#[cfg(windows)]
pub(crate) use job::{has_job, run_in, stop_job};
mod output;
#[cfg(unix)]
mod supervise;
#[cfg(all(test, unix))]
mod tests;

use std::ffi::{OsStr, OsString};
use std::io;
#[cfg(unix)]
use std::os::fd::OwnedFd;
#[cfg(unix)]
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
#[cfg(unix)]
use std::process::Stdio;
#[cfg(unix)]
use std::sync::Arc;
use std::time::Duration;
#[cfg(unix)]
use std::time::Instant;

use thiserror::Error;

use crate::fsx::Dir;
use crate::state::ProcessOutcome;
#[cfg(unix)]
use supervise::Supervisor;

/// What to run, and where its output goes.
#[derive(Debug, Clone)]
pub struct StepSpec<'a> {
    /// A program name looked up on `PATH`, or a path; a relative path with a
    /// slash in it is taken relative to `cwd`.
    pub program: &'a OsStr,
    pub args: &'a [OsString],
    pub cwd: &'a Path,
    /// Added to the environment the runner inherited.
    pub env: &'a [(OsString, OsString)],
    pub timeout: Option<Duration>,
    /// After a timeout: how long between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// The directory the output files are made in.
    pub out_dir: &'a Dir,
    /// The output files' names in `out_dir`, each made (mode 0600, empty)
    /// when its stream carries its first byte: a stream that stays silent
    /// leaves no file. Whatever else is there under the name (a link) is
    /// replaced, never written through.
    pub stdout: &'a str,
    pub stderr: &'a str,
    /// Bytes kept per stream; the rest is read and dropped, and a one-line
    /// truncation marker is appended.
    pub output_limit: u64,
    /// The ruleset the step's process confines itself with before exec;
    /// none: it runs with the runner's rights.
    pub confine: Option<&'a confine::Prepared>,
    /// The OS user (uid, gid) the step runs as; none: the runner's.
    pub run_as: Option<(u32, u32)>,
}

/// A step that has started, handed to the `run_with` callback. The step may
/// already have exited by then; its group id stays valid until `run_with`
/// returns.
#[derive(Debug)]
pub struct Started {
    /// The step's own process id.
    pub pid: u32,
    /// The process group the step runs in.
    pub pgid: i32,
    canceller: Canceller,
    deadline: Deadline,
}

impl Started {
    /// A handle that gives the step's guard the deadline by which it kills
    /// the step's group, whatever becomes of the runner.
    pub fn deadline(&self) -> Deadline {
        self.deadline.clone()
    }

    /// A handle that can stop the step from another thread.
    pub(crate) fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }
}

#[cfg(unix)]
/// Stops a running step as a timeout would (SIGTERM to the group, the grace
/// period, then SIGKILL). The outcome then reports the signal, not a timeout.
///
/// It writes a byte to a pipe the runner polls; it keeps both ends, so a
/// late cancel writes into a pipe nobody reads rather than a closed one.
#[derive(Debug, Clone)]
pub struct Canceller(Arc<CancelPipe>);

#[cfg(unix)]
#[derive(Debug)]
struct CancelPipe {
    read: OwnedFd,
    write: OwnedFd,
}

#[cfg(unix)]
impl Canceller {
    /// Asks for the step to be stopped; does nothing once it has ended.
    pub fn cancel(&self) {
        // Non-blocking: a full pipe already asks for the stop.
        let _ = nix::unistd::write(&self.0.write, &[STOP]);
    }

    /// Kills the step's whole group at once (SIGKILL, no grace period):
    /// for a runner that lost its loop's lock, which must have ended the
    /// step before anyone else may take the lock. Does nothing once the
    /// step has ended.
    pub fn kill(&self) {
        let _ = nix::unistd::write(&self.0.write, &[KILL]);
    }
}

#[cfg(unix)]
/// What a byte written to the cancel pipe asks for: a stop as a timeout
/// does it...
const STOP: u8 = 1;
#[cfg(unix)]
/// ...or SIGKILL now.
const KILL: u8 = 2;

#[derive(Debug, Error)]
pub enum StepError {
    #[error("program {} not found", program.display())]
    NotFound { program: PathBuf },
    #[error("program {} is not executable", program.display())]
    NotExecutable { program: PathBuf },
    #[error("cannot start program {}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("working directory {} is not usable", path.display())]
    Cwd {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write step output to {}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot supervise program {}", program.display())]
    Supervise {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Runs the step to its end and reports how it ended.
pub fn run(spec: &StepSpec) -> Result<ProcessOutcome, StepError> {
    run_with(spec, |_| {})
}

#[cfg(unix)]
/// A step's process group, made before the step starts so that its id can
/// be recorded first (the tick writes it into its `in_flight` record).
/// Its leader is the guard; dropping an unused group ends it.
pub struct Group(guard::Guard);

#[cfg(unix)]
impl Group {
    pub fn new() -> io::Result<Group> {
        guard::Guard::spawn().map(Group)
    }

    /// The process group id.
    pub fn id(&self) -> i32 {
        self.0.pgid().as_raw()
    }
}

#[cfg(unix)]
/// Whether process `pid` is the guard of a step group that the runner
/// `runner` started, as far as `/proc` can tell: the runner's child,
/// leading its own group since `start`, running what a guard runs. What
/// `cancel` checks before it signals a group; false where there is no
/// `/proc`.
pub(crate) fn is_step_group(pid: i32, runner: u32, start: &crate::state::ProcessStart) -> bool {
    let Some(stat) = crate::procfs::stat(pid) else {
        return false;
    };
    crate::procfs::boot_id() == Some(start.boot.as_str())
        && stat.start == start.ticks
        && stat.pgrp == pid
        && u32::try_from(stat.ppid) == Ok(runner)
        && guard::runs_as_guard(pid, runner)
}

/// Like [`run`], calling `on_start` once the step is running (to record its
/// pid, or keep a [`Canceller`]). `on_start` runs on the supervising thread,
/// before any output is read: it must not wait for the step.
///
/// The calling thread supervises the step alone: one `poll` over the step's
/// exit (a pidfd where there is one), its two output pipes and the cancel
/// pipe, with the timeout as poll's.
pub(crate) fn run_with(
    spec: &StepSpec,
    on_start: impl FnOnce(&Started),
) -> Result<ProcessOutcome, StepError> {
    run_in(spec, None, on_start)
}

#[cfg(unix)]
/// Like [`run_with`], in `group` when one was made beforehand (else in a
/// group of its own).
pub(crate) fn run_in(
    spec: &StepSpec,
    group: Option<Group>,
    on_start: impl FnOnce(&Started),
) -> Result<ProcessOutcome, StepError> {
    let program = resolve_program(spec.program, spec.cwd);
    let supervise = |source| StepError::Supervise {
        program: program.clone(),
        source,
    };
    check_cwd(spec.cwd)?;

    // Everything that can fail is set up before the step exists, so an error
    // never leaves a step running or unreaped.
    let Pipes {
        mut drains,
        write_ends,
        canceller,
    } = Pipes::new(spec).map_err(supervise)?;
    let guard = match group {
        Some(Group(guard)) => guard,
        None => guard::Guard::spawn().map_err(supervise)?,
    };
    let Spawned { pid, start, watch } = spawn(spec, &program, &guard, write_ends)?;
    on_start(&Started {
        pid,
        pgid: guard.pgid().as_raw(),
        canceller: canceller.clone(),
        deadline: guard.deadline(),
    });

    let mut buf = buffer::take();
    let mut supervisor = Supervisor::new(&guard, spec.timeout.map(|t| start + t), spec.kill_grace);
    if let Err(e) = supervisor.until_exit(&watch, &canceller.0, &mut drains, &mut buf) {
        drop(guard);
        let _ = watch.wait();
        return Err(supervise(e.into()));
    }
    let timed_out = supervisor.timed_out;
    let status = watch.wait();
    let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::debug!(pid, ?status, timed_out, duration_ms, "step ended");

    // Whatever the step left in its group dies now; then what is left in the
    // pipes is read, without waiting for writers that escaped the group.
    drop(guard);
    let output = finish_output(spec, drains, &mut buf);
    buffer::give_back(buf);
    let status = status.map_err(supervise)?;
    output?;
    Ok(ProcessOutcome {
        exit_code: status.code(),
        signal: status.signal(),
        duration_ms,
        timed_out,
    })
}

#[cfg(unix)]
/// The step's output pipes, each read end in a drain to its file, and its
/// cancel pipe: made before the step starts.
struct Pipes<'a> {
    drains: Vec<output::Drain<'a>>,
    /// The write ends of stdout's and stderr's pipes, for the step.
    write_ends: [OwnedFd; 2],
    canceller: Canceller,
}

#[cfg(unix)]
impl<'a> Pipes<'a> {
    fn new(spec: &StepSpec<'a>) -> io::Result<Pipes<'a>> {
        let mut drains = Vec::with_capacity(2);
        let mut write_ends = Vec::with_capacity(2);
        for name in [spec.stdout, spec.stderr] {
            let (read, write) = guard::cloexec_pipe()?;
            drains.push(output::Drain::new(read, spec.out_dir, name, spec.output_limit)?);
            write_ends.push(write);
        }
        let (read, write) = guard::nonblocking_cloexec_pipe()?;
        Ok(Pipes {
            drains,
            write_ends: write_ends.try_into().expect("two streams"),
            canceller: Canceller(Arc::new(CancelPipe { read, write })),
        })
    }
}

#[cfg(unix)]
/// A step that has started, and the watch on its exit.
struct Spawned {
    pid: u32,
    start: Instant,
    watch: exit::Watch,
}

#[cfg(unix)]
/// Starts the step in `guard`'s group, its stdout and stderr into `write_ends`.
fn spawn(
    spec: &StepSpec,
    program: &Path,
    guard: &guard::Guard,
    [stdout, stderr]: [OwnedFd; 2],
) -> Result<Spawned, StepError> {
    let mut cmd = command(spec, program, guard.pgid().as_raw());
    cmd.stdout(stdout).stderr(stderr);
    let start = Instant::now();
    #[cfg(target_os = "linux")]
    let spawned = match spec.confine {
        Some(prepared) => spawn_confined(&mut cmd, prepared),
        None => cmd.spawn(),
    };
    #[cfg(not(target_os = "linux"))]
    let spawned = cmd.spawn();
    // The pipes' write ends now live only in the step (and its children).
    drop(cmd);
    let child = spawned.map_err(|e| spawn_error(program, e))?;
    let pid = child.id();
    // On failure the guard's drop kills the group, step included, and the
    // watch reaps it.
    let watch = exit::Watch::new(child).map_err(|source| StepError::Supervise {
        program: program.to_owned(),
        source,
    })?;
    tracing::debug!(program = %program.display(), pid, pgid = guard.pgid().as_raw(), "step started");
    Ok(Spawned { pid, start, watch })
}

#[cfg(unix)]
/// Reads what is left in each output pipe into its file. Every stream is
/// finished; the first that failed is the error.
fn finish_output(spec: &StepSpec, drains: Vec<output::Drain>, buf: &mut [u8]) -> Result<(), StepError> {
    let mut output_error = None;
    for (drain, name) in drains.into_iter().zip([spec.stdout, spec.stderr]) {
        if let Err(source) = drain.finish(buf) {
            output_error.get_or_insert(StepError::Output {
                path: spec.out_dir.join(name),
                source,
            });
        }
    }
    output_error.map_or(Ok(()), Err)
}

#[cfg(unix)]
/// The buffer a step's output is read through: one per thread, kept
/// between steps (a daemon's worker runs thousands), not made and zeroed
/// for each.
mod buffer {
    use std::cell::Cell;

    const SIZE: usize = 64 * 1024;

    thread_local! {
        static KEPT: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }

    pub(super) fn take() -> Vec<u8> {
        match KEPT.take() {
            buf if buf.len() == SIZE => buf,
            _ => vec![0; SIZE],
        }
    }

    pub(super) fn give_back(buf: Vec<u8>) {
        KEPT.set(buf);
    }
}

#[cfg(unix)]
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

#[cfg(unix)]
/// Knowing when the step has exited without a thread waiting for it.
mod exit {
    use std::io;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::process::{Child, ExitStatus};
    use std::thread::JoinHandle;

    /// The step's exit as a descriptor that becomes readable: a pidfd on
    /// Linux; elsewhere (or on a kernel without pidfds) a pipe that a
    /// waiting thread closes.
    pub(super) enum Watch {
        #[cfg(target_os = "linux")]
        Pidfd { fd: OwnedFd, child: Child },
        Thread {
            fd: OwnedFd,
            thread: JoinHandle<io::Result<ExitStatus>>,
        },
    }

    impl Watch {
        pub(super) fn new(child: Child) -> io::Result<Watch> {
            #[cfg(target_os = "linux")]
            let child = match pidfd_open(child.id()) {
                Ok(fd) => return Ok(Watch::Pidfd { fd, child }),
                Err(_) => child,
            };
            Watch::thread(child)
        }

        fn thread(mut child: Child) -> io::Result<Watch> {
            let (read, write) = super::guard::cloexec_pipe()?;
            let (tx, rx) = std::sync::mpsc::channel::<(Child, OwnedFd)>();
            let spawned = std::thread::Builder::new()
                .name("step-wait".into())
                .spawn(move || {
                    let (mut child, write) = rx.recv().expect("sent below");
                    let status = child.wait();
                    drop(write);
                    status
                });
            match spawned {
                Ok(thread) => {
                    tx.send((child, write)).expect("the thread is running");
                    Ok(Watch::Thread { fd: read, thread })
                }
                Err(e) => {
                    // The caller's guard kills the group; reap the step here.
                    let _ = child.kill();
                    let _ = child.wait();
                    Err(e)
                }
            }
        }

        pub(super) fn fd(&self) -> BorrowedFd<'_> {
            match self {
                #[cfg(target_os = "linux")]
                Watch::Pidfd { fd, .. } => fd.as_fd(),
                Watch::Thread { fd, .. } => fd.as_fd(),
            }
        }

        /// The step's status, waiting for it if it has not exited yet.
        pub(super) fn wait(self) -> io::Result<ExitStatus> {
            match self {
                #[cfg(target_os = "linux")]
                Watch::Pidfd { mut child, .. } => child.wait(),
                Watch::Thread { thread, .. } => thread
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("waiting thread panicked"))),
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
        use nix::libc;
        use std::os::fd::FromRawFd;
        // SAFETY: a plain system call; a non-negative result is a new
        // descriptor (close-on-exec, as pidfds always are) that we own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }
}

/// What the runner's environment may hold that is the store's secret, or
/// leads to one: its URL (which may carry a password) and libpq's
/// password, password file, service file and client key. A step, a
/// verifier and a notify command never inherit them; the tick passes on
/// those loop.toml names in `pass_env`, through the step's own variables.
pub(crate) const WITHHELD_ENV: &[&str] = &[
    "AUTOMATON_STORE",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGSSLKEY",
];

/// Removes the variables of [`WITHHELD_ENV`] from `cmd`'s environment,
/// but those `set` gives a value of its own.
pub(crate) fn withhold_secrets(cmd: &mut Command, set: &[(OsString, OsString)]) {
    for name in WITHHELD_ENV {
        if !set.iter().any(|(k, _)| k == name) {
            cmd.env_remove(name);
        }
    }
}

#[cfg(unix)]
/// The step's command: its own group (led by the guard), no stdin, no
/// store secret from the runner's environment, and its user when it has
/// one. It sets no `pre_exec` hook, so the standard library starts it with
/// `posix_spawn` (a vfork: nothing of the runner's address space copied)
/// unless it runs as another user; its confinement is the spawning
/// thread's ([`spawn_confined`]).
fn command(spec: &StepSpec, program: &Path, pgid: i32) -> Command {
    let mut cmd = Command::new(program);
    withhold_secrets(&mut cmd, spec.env);
    cmd.args(spec.args)
        .current_dir(spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .process_group(pgid);
    if let Some((uid, gid)) = spec.run_as {
        // As root, std also drops the runner's supplementary groups.
        cmd.uid(uid).gid(gid);
    }
    cmd
}

#[cfg(target_os = "linux")]
/// Starts `cmd` confined by `prepared`'s rulesets: from a thread of its
/// own that confines itself first (no new privileges, then each Landlock
/// ruleset: both are a thread's, and a process it starts inherits them),
/// and ends once the step has started. The runner's other threads stay
/// as they were. Confining the child between fork and exec instead (a
/// `pre_exec` hook) rules out `posix_spawn`, and a fork copies the page
/// tables of the whole runner (the daemon's gate instances map thousands
/// of regions) at every step.
fn spawn_confined(cmd: &mut Command, prepared: &confine::Prepared) -> io::Result<std::process::Child> {
    use std::os::fd::AsRawFd;
    let fd = prepared.fd.as_raw_fd();
    let net = prepared.net.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("confined-spawn".into())
            .spawn_scoped(s, || {
                confine::restrict_self(fd, net)?;
                cmd.spawn()
            })?
            .join()
            .unwrap_or_else(|_| {
                Err(io::Error::other(
                    "the thread that starts the confined step panicked",
                ))
            })
    })
}

fn check_cwd(cwd: &Path) -> Result<(), StepError> {
    let source = match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => io::Error::from(io::ErrorKind::NotADirectory),
        Err(e) => e,
    };
    Err(StepError::Cwd {
        path: cwd.to_owned(),
        source,
    })
}

fn resolve_program(program: &OsStr, cwd: &Path) -> PathBuf {
    let path = Path::new(program);
    if path.is_relative() && path.components().count() > 1 {
        cwd.join(path)
    } else {
        path.to_owned()
    }
}

fn spawn_error(program: &Path, e: io::Error) -> StepError {
    let program = program.to_owned();
    match e.kind() {
        io::ErrorKind::NotFound => StepError::NotFound { program },
        io::ErrorKind::PermissionDenied => StepError::NotExecutable { program },
        _ => StepError::Spawn { program, source: e },
    }
}
