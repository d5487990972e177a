//! How automaton runs git: [`Git::command`] builds every git command it
//! runs, hardened against the repository it runs in. A loop's step can
//! write its repository's config (`.git/config`, which a worktree shares),
//! its attributes and its hooks, and none of what it writes there may make
//! automaton's own git calls run a program, hang, or reach the network:
//!
//! - the system and global config are not read (`GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`), no inherited `GIT_*` variable is
//!   passed on (they could name other config, repositories or programs),
//!   and `safe.directory` is never widened;
//! - [`OVERRIDES`] are passed with `-c`, above any file: no hooks, no
//!   fsmonitor, no pager, no signature checks, no transport;
//! - where git may run a clean or smudge filter (`status`, `worktree add`,
//!   a diff against the files), every `filter.<name>` the repository's
//!   config defines is emptied the same way ([`Git::without_filters`]);
//!   `hash-object` takes `--no-filters`, diffs `--no-textconv` and
//!   `--no-ext-diff`, and replace refs are ignored;
//! - the calls about a worktree name it with `--work-tree`, so its config
//!   cannot point them at another directory (`core.worktree`);
//! - each call is bounded ([`TIMEOUT`]), runs in a process group of its
//!   own, and the group is killed when git ends or runs out of time, so
//!   nothing git started outlives the call; what it prints is kept up to
//!   a bound ([`Git::bounded`] for stdout, [`MAX_STDERR`] for stderr) and
//!   the rest only counted, so no output, however large the work, is
//!   held whole in memory.
//!
//! Settings left alone because the commands run here never read them:
//! `core.sshCommand`, `core.askPass`, `core.alternateRefsCommand` and
//! `uploadpack.packObjectsHook` (transports only: none is used),
//! `gpg.program` (nothing is signed, and signatures are not shown),
//! `core.editor`.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
#[cfg(unix)]
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[cfg(unix)]
use nix::sys::signal::{Signal, killpg};
#[cfg(unix)]
use nix::unistd::Pid;

use super::WorktreeError;

/// How long one git call may take before it is killed.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

/// How long the output of a git that ended is waited for once its group
/// was killed: longer only if something left the group holding its pipes.
const DRAIN: Duration = Duration::from_secs(2);

/// The most of a git's stderr kept (the rest is counted and dropped).
const MAX_STDERR: usize = 64 * 1024;

/// What a git call printed on stdout: its first bytes, up to a bound,
/// and how many more it printed.
pub(super) struct Bounded {
    pub(super) kept: Vec<u8>,
    pub(super) more: u64,
}

/// Config every call overrides, above every file.
pub(crate) const OVERRIDES: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    // A file whose content changed is looked at, whatever its size and
    // times: its ctime changed with it.
    "core.trustctime=true",
    "core.checkStat=default",
    "core.ignoreStat=false",
    "core.pager=cat",
    "credential.helper=",
    "protocol.allow=never",
    "log.showSignature=false",
    "submodule.recurse=false",
    "status.submoduleSummary=false",
    "color.ui=false",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// The keys of a `filter.<name>` emptied when filters are off: a filter
/// with no command does nothing, and one not required fails nothing.
const FILTER_KEYS: [(&str, &str); 4] = [
    ("clean", ""),
    ("smudge", ""),
    ("process", ""),
    ("required", "false"),
];

/// How git is run: the program, the config it is given on top of
/// [`OVERRIDES`], and how long a call may take.
#[derive(Debug, Clone)]
pub(super) struct Git {
    pub(super) program: OsString,
    /// More `key=value` settings, passed as `GIT_CONFIG_KEY_n` and
    /// `GIT_CONFIG_VALUE_n` (whose keys are not split on `=`).
    pub(super) extra: Vec<(String, String)>,
    pub(super) timeout: Duration,
    /// `--work-tree`, for the calls about a worktree: where its files are,
    /// whatever its config says (`core.worktree` in `config.worktree`
    /// could point git at another directory).
    pub(super) work_tree: Option<PathBuf>,
}

impl Default for Git {
    fn default() -> Git {
        Git {
            program: "git".into(),
            extra: Vec::new(),
            timeout: TIMEOUT,
            work_tree: None,
        }
    }
}

impl Git {
    /// The one place a git command is built: `git --no-pager -C dir -c ...
    /// args`, with the environment described in the module's header.
    fn command<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("--no-pager")
            .arg("--no-replace-objects")
            .arg("-C")
            .arg(dir);
        if let Some(tree) = &self.work_tree {
            cmd.arg("--work-tree").arg(tree);
        }
        for o in OVERRIDES {
            cmd.arg("-c").arg(o);
        }
        cmd.args(args);
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("GIT_") {
                cmd.env_remove(var);
            }
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_PAGER", "cat")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_CONFIG_COUNT", self.extra.len().to_string());
        for (i, (k, v)) in self.extra.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
                .env(format!("GIT_CONFIG_VALUE_{i}"), v);
        }
        #[cfg(unix)]
        cmd.process_group(0);
        cmd
    }

    /// This git for the worktree at `path`: its files are those under
    /// `path`, whatever the repository's config says.
    pub(super) fn for_worktree(&self, path: &Path) -> Git {
        Git {
            work_tree: Some(std::path::absolute(path).unwrap_or_else(|_| path.to_owned())),
            ..self.clone()
        }
    }

    /// This git with every filter `repo`'s config defines emptied, for the
    /// calls that would run them.
    pub(super) fn without_filters(&self, repo: &Path) -> Result<Git, WorktreeError> {
        let args = ["config", "--name-only", "--get-regexp", r"^filter\."];
        let out = self.output(repo, &args, None)?;
        // Status 1: no filter is defined.
        if !out.status.success() && out.status.code() != Some(1) {
            check(repo, &args, &out)?;
        }
        let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|key| Some(key.strip_prefix("filter.")?.rsplit_once('.')?.0.to_owned()))
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut git = self.clone();
        for name in names {
            for (key, value) in FILTER_KEYS {
                git.extra.push((format!("filter.{name}.{key}"), value.to_owned()));
            }
        }
        Ok(git)
    }

    /// Runs git in `dir`, feeding it `stdin`, within [`Git::timeout`]; the
    /// process group it leads is killed when it ends or runs out of time.
    pub(super) fn output<S: AsRef<OsStr>>(
        &self,
        dir: &Path,
        args: &[S],
        stdin: Option<&[u8]>,
    ) -> Result<Output, WorktreeError> {
        self.output_within(dir, args, stdin, usize::MAX)
            .map(|(out, _)| out)
    }

    /// Runs git and keeps at most `max` bytes of its stdout, counting the
    /// rest; failing is an error.
    pub(super) fn bounded<S: AsRef<OsStr>>(
        &self,
        dir: &Path,
        args: &[S],
        max: usize,
    ) -> Result<Bounded, WorktreeError> {
        let (out, more) = self.output_within(dir, args, None, max)?;
        check(dir, args, &out)?;
        Ok(Bounded {
            kept: out.stdout,
            more,
        })
    }

    /// As [`Git::output`], keeping at most `max` bytes of stdout; how many
    /// more it printed.
    fn output_within<S: AsRef<OsStr>>(
        &self,
        dir: &Path,
        args: &[S],
        stdin: Option<&[u8]>,
        max: usize,
    ) -> Result<(Output, u64), WorktreeError> {
        let mut cmd = self.command(dir, args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let spawn_err = |source: io::Error| match source.kind() {
            io::ErrorKind::NotFound => WorktreeError::GitNotFound {
                program: self.program.clone(),
            },
            _ => WorktreeError::Spawn {
                dir: dir.to_owned(),
                source,
            },
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let io_err = |source: io::Error| WorktreeError::Spawn {
            dir: dir.to_owned(),
            source,
        };
        let (tx, rx) = mpsc::channel();
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // From another thread, so a full stdout pipe cannot deadlock us;
            // a git that is killed closes the pipe, which ends the write.
            let input = input.to_vec();
            std::thread::spawn(move || pipe.write_all(&input));
        }
        let more = mpsc::channel::<u64>();
        for (i, pipe, max) in [
            (
                0,
                child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
                max,
            ),
            (
                1,
                child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
                MAX_STDERR,
            ),
        ] {
            let tx = tx.clone();
            let counted = more.0.clone();
            std::thread::spawn(move || {
                let (buf, past) = pipe.map(|p| read_within(p, max)).unwrap_or_default();
                if i == 0 {
                    let _ = counted.send(past);
                }
                let _ = tx.send((i, buf));
            });
        }
        let timed_out = || WorktreeError::Timeout {
            dir: dir.to_owned(),
            args: joined(args),
            after: self.timeout,
        };
        let mut outputs = [None, None];
        let status = wait_then_kill(&mut child, &rx, &mut outputs, self.timeout).map_err(io_err)?;
        let Some(status) = status else {
            return Err(timed_out());
        };
        let drained = Instant::now() + DRAIN;
        while outputs.iter().any(Option::is_none) {
            let left = drained.saturating_duration_since(Instant::now());
            let (i, buf) = rx.recv_timeout(left).map_err(|_| timed_out())?;
            outputs[i] = Some(buf);
        }
        let [stdout, stderr] = outputs.map(Option::unwrap_or_default);
        let more = more.1.try_recv().unwrap_or(0);
        let out = Output {
            status,
            stdout,
            stderr,
        };
        Ok((out, more))
    }

    /// Runs git and returns its stdout; failing is an error.
    pub(super) fn run<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Result<Vec<u8>, WorktreeError> {
        let out = self.output(dir, args, None)?;
        check(dir, args, &out)?;
        Ok(out.stdout)
    }
}

/// Reads `pipe` to its end, keeping its first `max` bytes; how many more
/// it held.
fn read_within(mut pipe: impl Read, max: usize) -> (Vec<u8>, u64) {
    let mut kept = Vec::new();
    let _ = (&mut pipe).take(max as u64).read_to_end(&mut kept);
    let more = io::copy(&mut pipe, &mut io::sink()).unwrap_or(0);
    (kept, more)
}

/// Waits for `child` (the leader of its own process group) to end, for at
/// most `timeout`, then kills its group: what it started dies with it. The
/// group is killed before the leader is reaped, so its id cannot have been
/// taken by another. Meanwhile takes what the readers of its output send
/// (which wakes it when git closes its output, as it does when it ends).
/// None when it ran out of time.
fn wait_then_kill(
    child: &mut Child,
    rx: &mpsc::Receiver<(usize, Vec<u8>)>,
    outputs: &mut [Option<Vec<u8>>; 2],
    timeout: Duration,
) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = ended(child)? {
            kill_group(child);
            return Ok(Some(match status {
                Some(s) => s,
                None => child.wait()?,
            }));
        }
        let now = Instant::now();
        if now >= deadline {
            kill_group(child);
            child.wait()?;
            return Ok(None);
        }
        let wait = pause.min(deadline - now);
        if outputs.iter().all(Option::is_some) {
            std::thread::sleep(wait);
        } else if let Ok((i, buf)) = rx.recv_timeout(wait) {
            // Its output closed: it is ending, look again soon.
            outputs[i] = Some(buf);
            pause = Duration::from_micros(50);
            continue;
        }
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Kills `child`'s process group (it leads its own): what it started dies
/// with it.
#[cfg(unix)]
fn kill_group(child: &Child) {
    let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
}

/// Kills `child` (Windows: git's own helpers end with it).
#[cfg(windows)]
fn kill_group(child: &mut Child) {
    let _ = child.kill();
}

/// Whether `child` ended: `Some(None)` when it did and is not reaped yet
/// (so its group id is still its own), `Some(Some(status))` where it could
/// only be known by reaping it.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn ended(child: &mut Child) -> io::Result<Option<Option<ExitStatus>>> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let pid = Pid::from_raw(child.id() as i32);
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => Ok(None),
        Ok(_) => Ok(Some(None)),
        Err(e) => Err(io::Error::from(e)),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn ended(child: &mut Child) -> io::Result<Option<Option<ExitStatus>>> {
    Ok(child.try_wait()?.map(Some))
}

/// An error for a git that failed, with what it printed.
pub(super) fn check<S: AsRef<OsStr>>(dir: &Path, args: &[S], out: &Output) -> Result<(), WorktreeError> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = stderr(out);
    #[cfg(unix)]
    let stderr = match out.status.signal() {
        Some(signal) => format!("killed by signal {signal}; {stderr}"),
        None => stderr,
    };
    Err(WorktreeError::Git {
        dir: dir.to_owned(),
        args: joined(args),
        stderr,
    })
}

pub(super) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

fn joined<S: AsRef<OsStr>>(args: &[S]) -> String {
    let args: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    args.join(" ")
}
