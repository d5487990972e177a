//! The guard process that ties a step's process group to the runner's life:
//! whenever the runner goes away, however it goes (even SIGKILL), the group
//! is killed.
//!
//! Per step, the runner forks a tiny guard that becomes the leader of a new
//! process group; the step is then spawned *into* that group. The guard holds
//! only the read end of a pipe whose write end the runner keeps (close-on-exec)
//! and blocks reading it. The kernel closes the write end when the runner
//! dies, the guard reads EOF and kills its whole group, step included.
//!
//! Because the guard leads the group and is reaped last, the group's id stays
//! valid (it cannot be reused by an unrelated group) for as long as the
//! runner signals it, even after the step itself has exited.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, setpgid};

/// A running guard; dropping it kills the whole group and reaps the guard.
pub(super) struct Guard {
    pid: Pid,
    /// The write end of the pipe; the guard sees EOF once every copy is closed.
    pipe: Option<OwnedFd>,
}

impl Guard {
    /// Forks the guard and makes it the leader of a new process group.
    pub(super) fn spawn() -> io::Result<Guard> {
        let (read, write) = cloexec_pipe()?;
        let max_fd = max_fd();
        // SAFETY: in the child only async-signal-safe calls are made (see
        // `guard_main`), which is what fork in a multi-threaded process
        // requires; the parent only records the pid.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => Err(io::Error::last_os_error()),
            // SAFETY: we are the freshly forked child.
            0 => unsafe { guard_main(read.as_raw_fd(), max_fd) },
            pid => {
                drop(read);
                let pid = Pid::from_raw(pid);
                // The child does the same; whichever runs first makes the group
                // exist before the step is spawned into it.
                let _ = setpgid(pid, pid);
                Ok(Guard {
                    pid,
                    pipe: Some(write),
                })
            }
        }
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

/// The guard's whole life, after fork. Only async-signal-safe calls: the
/// parent may have other threads, holding locks this copy can never release.
///
/// # Safety
///
/// Must only be called in a freshly forked child.
unsafe fn guard_main(read_fd: RawFd, max_fd: libc::c_int) -> ! {
    // SAFETY: plain syscalls on our own process; none allocate or take locks.
    unsafe {
        libc::setpgid(0, 0);
        // Ignore every catchable signal, so a step's `kill 0` (a common
        // `trap 'kill 0' EXIT`) or the runner's SIGTERM on timeout cannot
        // take the guard down before the group; only SIGKILL ends it.
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        for sig in 1..65 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::sigaction(sig, &ignore, std::ptr::null_mut());
            }
        }
        libc::chdir(c"/".as_ptr());
        // So operators can tell it from the runner in `ps`.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        libc::prctl(libc::PR_SET_NAME, c"automaton-guard".as_ptr());
        // Keep only the pipe, as fd 0. Every other inherited descriptor must
        // go: another tick's pipe held open here would hide that tick's EOF.
        if read_fd != 0 {
            libc::dup2(read_fd, 0);
        }
        close_from(1, max_fd);
        let mut buf = [0u8; 64];
        loop {
            let n = libc::read(0, buf.as_mut_ptr().cast(), buf.len());
            if n > 0 || (n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)) {
                continue;
            }
            break;
        }
        // EOF: the runner is gone or done. Kill the group, ourselves included.
        libc::kill(0, libc::SIGKILL);
        libc::_exit(0)
    }
}

/// Closes every descriptor from `low` up. Async-signal-safe.
///
/// # Safety
///
/// Only for the forked guard: descriptors owned elsewhere in the process are
/// closed behind their owners' backs.
unsafe fn close_from(low: libc::c_int, max_fd: libc::c_int) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: close_range only closes descriptors of this process.
        let r = unsafe { libc::syscall(libc::SYS_close_range, low as libc::c_uint, libc::c_uint::MAX, 0) };
        if r == 0 {
            return;
        }
    }
    for fd in low..max_fd {
        // SAFETY: closing a descriptor this process no longer needs.
        unsafe { libc::close(fd) };
    }
}

/// The highest descriptor number to close when close_range is unavailable,
/// computed before fork (getrlimit is not on the async-signal-safe list).
fn max_fd() -> libc::c_int {
    use nix::sys::resource::{Resource, getrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => soft.min(1 << 20) as libc::c_int,
        Err(_) => 1 << 16,
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
