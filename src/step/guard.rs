//! The guard process that ties a step's process group to the runner's life:
//! whenever the runner goes away, however it goes (even SIGKILL), the group
//! is killed.
//!
//! Per step, the runner starts a tiny guard that leads a new process group;
//! the step is then spawned *into* that group. The guard is `/bin/sh`
//! running `read line; kill -KILL 0`: its standard input is the read end of
//! a pipe whose write end the runner keeps (close-on-exec), so it blocks
//! until the kernel closes the write end, when the runner dies or is done,
//! and then kills its whole group, step included.
//!
//! It is started with `posix_spawn` (a vfork: the runner's memory is never
//! copied, however large it is) with every signal blocked, and keeps them
//! blocked: a step's `kill 0` (a common `trap 'kill 0' EXIT`) or the
//! runner's SIGTERM on timeout cannot take the guard down before the group,
//! from its first instruction on; only SIGKILL ends it. It holds no other
//! descriptor and runs in `/`, with an empty environment.
//!
//! Because the guard leads the group and is reaped last, the group's id stays
//! valid (it cannot be reused by an unrelated group) for as long as the
//! runner signals it, even after the step itself has exited.

use std::ffi::{CStr, c_char};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// The guard's program: a POSIX shell is on every system a step runs on.
const SHELL: &CStr = c"/bin/sh";
/// Its `argv[0]`, so operators can tell it from the runner in `ps`.
const NAME: &CStr = c"automaton-guard";
/// Its whole life: wait for EOF, then kill the group, itself included.
const SCRIPT: &CStr = c"cd /; read line; kill -KILL 0";

/// A running guard; dropping it kills the whole group and reaps the guard.
pub(super) struct Guard {
    pid: Pid,
    /// The write end of the pipe; the guard sees EOF once every copy is closed.
    pipe: Option<OwnedFd>,
}

impl Guard {
    /// Starts the guard as the leader of a new process group. The group
    /// exists when this returns.
    pub(super) fn spawn() -> io::Result<Guard> {
        let (read, write) = cloexec_pipe()?;
        let pid = spawn_guard(read.as_raw_fd())?;
        Ok(Guard {
            pid,
            pipe: Some(write),
        })
    }

    /// The id of the process group the step must join.
    pub(super) fn pgid(&self) -> Pid {
        self.pid
    }

    /// Sends `signal` to every process in the group.
    pub(super) fn signal_group(&self, signal: Signal) {
        match killpg(self.pid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pgid = self.pid.as_raw(), %e, "cannot signal step group"),
        }
    }
}

impl Drop for Guard {
    /// Kills whatever is left in the group (the guard with it), then reaps the
    /// guard. Other members, reparented away from us, are reaped by init.
    fn drop(&mut self) {
        self.signal_group(Signal::SIGKILL);
        drop(self.pipe.take());
        while let Err(Errno::EINTR) = waitpid(self.pid, None) {}
    }
}

/// `posix_spawn`s the guard: `stdin` as its fd 0, `/dev/null` as 1 and 2,
/// nothing else open (where the C library can close the rest), every
/// signal blocked, in a new process group it leads.
fn spawn_guard(stdin: RawFd) -> io::Result<Pid> {
    let mut actions = FileActions::new()?;
    // SAFETY: `actions` is initialised; the paths are NUL-terminated.
    unsafe {
        check(libc::posix_spawn_file_actions_adddup2(&mut actions.0, stdin, 0))?;
        check(libc::posix_spawn_file_actions_addopen(
            &mut actions.0,
            1,
            c"/dev/null".as_ptr(),
            libc::O_WRONLY,
            0,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(&mut actions.0, 1, 2))?;
        // Descriptors the runner inherited without close-on-exec; its own
        // are all close-on-exec.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        check(libc::posix_spawn_file_actions_addclosefrom_np(&mut actions.0, 3))?;
    }
    let mut attr = SpawnAttr::new()?;
    // SAFETY: `attr` is initialised; `all` is initialised by sigfillset.
    unsafe {
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        check(libc::posix_spawnattr_setsigmask(&mut attr.0, all.as_ptr()))?;
        check(libc::posix_spawnattr_setpgroup(&mut attr.0, 0))?;
        let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETPGROUP;
        check(libc::posix_spawnattr_setflags(
            &mut attr.0,
            flags as libc::c_short,
        ))?;
    }
    let argv: [*const c_char; 4] = [NAME.as_ptr(), c"-c".as_ptr(), SCRIPT.as_ptr(), std::ptr::null()];
    let envp: [*const c_char; 1] = [std::ptr::null()];
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call; argv and envp are
    // NULL-terminated arrays of NUL-terminated strings that outlive it.
    check(unsafe {
        libc::posix_spawn(
            &mut pid,
            SHELL.as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_ptr().cast(),
            envp.as_ptr().cast(),
        )
    })?;
    Ok(Pid::from_raw(pid))
}

/// `posix_spawn`'s functions return the error number instead of setting errno.
fn check(rc: libc::c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// File actions, destroyed on drop.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<FileActions> {
        let mut a = MaybeUninit::uninit();
        // SAFETY: init fills the value, which is used only once it succeeded.
        unsafe {
            check(libc::posix_spawn_file_actions_init(a.as_mut_ptr()))?;
            Ok(FileActions(a.assume_init()))
        }
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// Spawn attributes, destroyed on drop.
struct SpawnAttr(libc::posix_spawnattr_t);

impl SpawnAttr {
    fn new() -> io::Result<SpawnAttr> {
        let mut a = MaybeUninit::uninit();
        // SAFETY: init fills the value, which is used only once it succeeded.
        unsafe {
            check(libc::posix_spawnattr_init(a.as_mut_ptr()))?;
            Ok(SpawnAttr(a.assume_init()))
        }
    }
}

impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// A pipe whose two ends are close-on-exec, so no step ever inherits them.
pub(super) fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        let (r, w) = nix::unistd::pipe()?;
        for fd in [&r, &w] {
            // SAFETY: sets a flag on a descriptor we own.
            if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok((r, w))
    }
}
