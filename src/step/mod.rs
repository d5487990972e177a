//! Running a loop's step and verifier processes. A step runs in its own
//! process group with its output captured, bounded, to files; a timeout kills
//! the whole group (SIGTERM, a grace period, SIGKILL), and so does the step's
//! end: a step's background processes do not outlive it. If the runner dies,
//! even by SIGKILL, the group dies with it (see `guard`), so two steps of one
//! loop never run at once.
//!
//! Not covered: a process that leaves the group on purpose (`setsid`, or a
//! daemon that detaches) is beyond a process group's reach.

mod guard;
mod output;
#[cfg(test)]
mod tests;

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use thiserror::Error;

use crate::state::ProcessOutcome;

pub use output::MARKER_MAX_LEN;

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
    /// Created (or truncated) with mode 0600 when the stream carries its
    /// first byte: a stream that stays silent leaves no file.
    pub stdout: &'a Path,
    pub stderr: &'a Path,
    /// Bytes kept per stream; the rest is read and dropped, and a one-line
    /// truncation marker is appended.
    pub output_limit: u64,
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
}

impl Started {
    /// A handle that can stop the step from another thread.
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }
}

/// Stops a running step as a timeout would (SIGTERM to the group, the grace
/// period, then SIGKILL). The outcome then reports the signal, not a timeout.
#[derive(Debug, Clone)]
pub struct Canceller(mpsc::Sender<Event>);

impl Canceller {
    /// Asks for the step to be stopped; does nothing once it has ended.
    pub fn cancel(&self) {
        let _ = self.0.send(Event::Cancel);
    }
}

#[derive(Debug)]
enum Event {
    Exited(io::Result<ExitStatus>),
    Cancel,
}

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

/// Like [`run`], calling `on_start` once the step is running (to record its
/// pid, or keep a [`Canceller`]).
pub fn run_with(spec: &StepSpec, on_start: impl FnOnce(&Started)) -> Result<ProcessOutcome, StepError> {
    let program = resolve_program(spec.program, spec.cwd);
    let supervise = |source| StepError::Supervise {
        program: program.clone(),
        source,
    };
    check_cwd(spec.cwd)?;

    // Everything that can fail is set up before the step exists, so an error
    // never leaves a step running or unreaped.
    let (stop_read, stop_write) = guard::cloexec_pipe().map_err(supervise)?;
    let stop = Arc::new(stop_read);
    let mut drains = Vec::with_capacity(2);
    let mut write_ends = Vec::with_capacity(2);
    for path in [spec.stdout, spec.stderr] {
        let (read, write) = guard::cloexec_pipe().map_err(supervise)?;
        let handle =
            output::spawn(read, path.to_owned(), spec.output_limit, stop.clone()).map_err(supervise)?;
        drains.push((handle, path));
        write_ends.push(write);
    }
    let (tx, rx) = mpsc::channel();
    let (child_tx, child_rx) = mpsc::channel::<Child>();
    let waiter = tx.clone();
    std::thread::Builder::new()
        .name("step-wait".into())
        .spawn(move || {
            if let Ok(mut child) = child_rx.recv() {
                let _ = waiter.send(Event::Exited(child.wait()));
            }
        })
        .map_err(supervise)?;
    let guard = guard::Guard::spawn().map_err(supervise)?;

    let [stdout_w, stderr_w]: [OwnedFd; 2] = write_ends.try_into().expect("two streams");
    let mut cmd = command(spec, &program, guard.pgid().as_raw());
    cmd.stdout(stdout_w).stderr(stderr_w);
    let start = Instant::now();
    let spawned = cmd.spawn();
    // The pipes' write ends now live only in the step (and its children).
    drop(cmd);
    let child = spawned.map_err(|e| spawn_error(&program, e))?;
    let pid = child.id();
    child_tx.send(child).expect("the waiter thread is running");
    tracing::debug!(program = %program.display(), pid, pgid = guard.pgid().as_raw(), "step started");
    on_start(&Started {
        pid,
        pgid: guard.pgid().as_raw(),
        canceller: Canceller(tx),
    });

    let deadline = spec.timeout.map(|t| start + t);
    let mut timed_out = false;
    let event = match deadline {
        Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
            Ok(event) => event,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                Event::Cancel
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("a sender is held"),
        },
        None => rx.recv().expect("a sender is held"),
    };
    let status = match event {
        Event::Exited(status) => status,
        Event::Cancel => terminate(&guard, &rx, spec.kill_grace),
    };
    let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::debug!(pid, ?status, timed_out, duration_ms, "step ended");

    // Whatever the step left in its group dies now; then the output threads
    // read what is left in the pipes and stop.
    drop(guard);
    drop(stop_write);
    let mut output_error = None;
    for (handle, path) in drains {
        let result = handle
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("output thread panicked")));
        if let Err(source) = result {
            output_error.get_or_insert(StepError::Output {
                path: path.to_owned(),
                source,
            });
        }
    }
    let status = status.map_err(supervise)?;
    if let Some(e) = output_error {
        return Err(e);
    }
    Ok(ProcessOutcome {
        exit_code: status.code(),
        signal: status.signal(),
        duration_ms,
        timed_out,
    })
}

/// The step's command: its own group (led by the guard) and no stdin. It
/// sets no `pre_exec` hook, so the standard library starts it with
/// `posix_spawn` (a vfork) rather than by copying the runner with `fork`.
fn command(spec: &StepSpec, program: &Path, pgid: i32) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(spec.args)
        .current_dir(spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .process_group(pgid);
    cmd
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

/// SIGTERM to the group, up to `grace` for the step to exit, then SIGKILL.
fn terminate(guard: &guard::Guard, rx: &mpsc::Receiver<Event>, grace: Duration) -> io::Result<ExitStatus> {
    tracing::debug!(pgid = guard.pgid().as_raw(), "stopping step group");
    guard.signal_group(Signal::SIGTERM);
    let until = Instant::now() + grace;
    loop {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Event::Exited(status)) => return status,
            Ok(Event::Cancel) => continue,
            Err(_) => break,
        }
    }
    guard.signal_group(Signal::SIGKILL);
    loop {
        if let Event::Exited(status) = rx.recv().expect("a sender is held") {
            return status;
        }
    }
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

/// Removes all but the newest `keep` run directories in `runs_dir` (named by
/// tick number; other entries are left alone). Returns how many it removed;
/// a missing `runs_dir` has nothing to prune.
pub fn prune_runs(runs_dir: &Path, keep: usize) -> io::Result<usize> {
    let entries = match std::fs::read_dir(runs_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut runs = Vec::new();
    for entry in entries {
        let entry = entry?;
        let tick = entry.file_name().to_str().and_then(|n| n.parse::<u64>().ok());
        if let Some(tick) = tick
            && entry.file_type()?.is_dir()
        {
            runs.push((tick, entry.path()));
        }
    }
    runs.sort_unstable_by_key(|(tick, _)| std::cmp::Reverse(*tick));
    let mut removed = 0;
    for (_, path) in runs.iter().skip(keep) {
        std::fs::remove_dir_all(path)?;
        removed += 1;
    }
    Ok(removed)
}
