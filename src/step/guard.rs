//! The guard process that ties a step's process group to the runner's life:
//! whenever the runner goes away, however it goes (even SIGKILL), the group
//! is killed.
//!
//! Per step, the runner starts a tiny guard that leads a new process group;
//! the step is then spawned *into* that group. The guard holds the read end
//! of a pipe whose write end the runner keeps (close-on-exec), blocks reading
//! it until the kernel closes the write end, when the runner dies or is done,
//! and then kills its whole group (`kill(0, SIGKILL)`), step included.
//!
//! On Linux x86_64 the guard is a `clone` of the runner that shares its
//! memory and execs nothing: a few raw system calls on a stack of its own
//! (no C library, no allocation, no thread-local state), named
//! `automaton-guard` (its `comm`). Starting it costs a process, not a
//! program: no exec, no dynamic loader, no copy of the runner's page tables.
//! Elsewhere the guard is `/bin/sh` running `read line; kill -KILL 0`,
//! started with `posix_spawn` (a vfork: the runner's memory is never
//! copied).
//!
//! Either way it starts with every signal blocked and keeps them blocked: a
//! step's `kill 0` (a common `trap 'kill 0' EXIT`) or the runner's SIGTERM on
//! timeout cannot take the guard down before the group, from its first
//! instruction on; only SIGKILL ends it. It holds no other descriptor and
//! runs in `/`.
//!
//! The cloned guard also keeps a deadline, when the runner gives it one
//! ([`Deadline`]: the lock's lease, which only its holder can renew): each
//! message on the pipe is the time left, in milliseconds, and the guard
//! arms a timer on `CLOCK_BOOTTIME` (a clock that counts the time the host
//! was suspended) for it. When the timer fires before the next message the
//! guard kills the group (a message sent before it fired counts, however
//! late the guard wakes to read it), whatever became of the runner: stopped with
//! SIGSTOP, suspended, or too starved to renew, the step never outlives
//! the lease. The shell guard keeps no deadline (the runner's own
//! watchdog still kills the step when it can).
//!
//! Because the guard leads the group and is reaped last, the group's id stays
//! valid (it cannot be reused by an unrelated group) for as long as the
//! runner signals it, even after the step itself has exited.

use std::io;
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Weak};
use std::time::Instant;

use nix::errno::Errno;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// Whether process `pid` runs what a guard of the runner `runner` runs,
/// as `/proc` tells: the runner's own program (a cloned guard execs
/// nothing), or the shell named `automaton-guard`. False where there is no
/// `/proc`.
pub(super) fn runs_as_guard(pid: i32, runner: u32) -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let guard = crate::procfs::exe(pid);
        guard.is_some() && guard == crate::procfs::exe(runner as i32)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = runner;
        crate::procfs::argv0(pid).is_some_and(|a| a == b"automaton-guard")
    }
}

/// A running guard; dropping it kills the whole group and reaps the guard.
pub(super) struct Guard {
    pid: Pid,
    /// The write end of the pipe; the guard sees EOF once every copy is
    /// closed. [`Deadline`]s hold it weakly: never open past the guard.
    pipe: Option<Arc<OwnedFd>>,
    /// The stack the cloned guard runs on; once the guard is reaped it
    /// serves the thread's next guard.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    stack: Option<cloned::Stack>,
}

impl Guard {
    /// Starts the guard as the leader of a new process group. The group
    /// exists when this returns.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pub(super) fn spawn() -> io::Result<Guard> {
        let (read, write) = cloexec_pipe()?;
        let (pid, stack) = cloned::spawn(&read, &write)?;
        Ok(Guard {
            pid,
            pipe: Some(Arc::new(write)),
            stack: Some(stack),
        })
    }

    /// Starts the guard as the leader of a new process group. The group
    /// exists when this returns.
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    pub(super) fn spawn() -> io::Result<Guard> {
        let (read, write) = cloexec_pipe()?;
        let pid = shell::spawn_guard(read.as_raw_fd())?;
        Ok(Guard {
            pid,
            pipe: Some(Arc::new(write)),
        })
    }

    /// The id of the process group the step must join.
    pub(super) fn pgid(&self) -> Pid {
        self.pid
    }

    /// A handle that gives the guard its deadline.
    pub(super) fn deadline(&self) -> Deadline {
        Deadline(self.pipe.as_ref().map_or_else(Weak::new, Arc::downgrade))
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
        let reaped = loop {
            match waitpid(self.pid, None) {
                Err(Errno::EINTR) => continue,
                result => break result.is_ok(),
            }
        };
        // A guard not known to be gone may still be running on its stack;
        // a reaped one's stack serves this thread's next guard.
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if let Some(stack) = self.stack.take() {
            match reaped {
                true => cloned::Stack::put_back(stack),
                false => std::mem::forget(stack),
            }
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        let _ = reaped;
    }
}

/// Gives a step's guard the deadline by which it kills the group unless
/// given a later one; it does nothing once the guard is gone, and nothing
/// where the guard is the shell.
#[derive(Debug, Clone)]
pub struct Deadline(Weak<OwnedFd>);

impl Deadline {
    /// The group is killed at `at` (by `CLOCK_BOOTTIME` from now) unless
    /// a later deadline comes first.
    pub fn until(&self, at: Instant) {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if let Some(pipe) = self.0.upgrade() {
            let ms = millis_until(at, Instant::now());
            // One write of 8 bytes (under PIPE_BUF): the guard reads whole
            // messages. A guard gone already (EPIPE) needs no deadline.
            let _ = nix::unistd::write(&*pipe, &ms.to_ne_bytes());
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        let _ = (at, &self.0);
    }
}

/// The milliseconds from `now` to `at`, rounded up, and at least one: the
/// guard's timer, armed for them when the guard reads them (never before
/// `now`), never fires before `at`. A step the guard killed is then one
/// the runner finds killed after its deadline, so it says the lock was
/// lost and commits nothing, instead of taking a kill a moment early for
/// a step that failed and sending a commit the server may never answer.
#[cfg_attr(not(all(target_os = "linux", target_arch = "x86_64")), allow(dead_code))]
fn millis_until(at: Instant, now: Instant) -> u64 {
    let left = at.saturating_duration_since(now);
    u64::try_from(left.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The guard as a clone of the runner sharing its memory (Linux x86_64).
///
/// The child runs `guard_main` on a stack mapped for it, with every signal
/// blocked (the mask is inherited from the spawning thread, which blocks
/// everything around the `clone`). It shares the runner's memory but not
/// its descriptor table, so it closes every descriptor but the pipe's read
/// end, the write end included. It must not touch the C library: its thread
/// pointer is the spawning thread's, so `errno`, locks or thread-local
/// storage would be that thread's. It makes raw system calls only and
/// writes nothing but its own stack.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod cloned {
    use std::ffi::{c_int, c_void};
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd, OwnedFd};

    use nix::libc;
    use nix::unistd::Pid;

    /// Room for `guard_main`'s few words of stack, many times over.
    const STACK_SIZE: usize = 64 * 1024;
    /// Below the stack: an inaccessible page, so an overflow faults.
    const GUARD_PAGE: usize = 4096;

    /// The guard's own name (`comm`, 15 bytes at most), seen in `ps`.
    const NAME: &[u8; 16] = b"automaton-guard\0";

    /// What the guard needs, copied onto its stack before it starts.
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct Args {
        read_fd: c_int,
        /// Where the fallback close loop stops, when `close_range` is missing.
        fd_limit: c_int,
    }

    /// A mapping the guard runs on; unmapped on drop.
    pub(super) struct Stack {
        base: *mut c_void,
        len: usize,
    }

    thread_local! {
        /// The stack of this thread's last guard, once that guard was
        /// reaped: the next guard runs on it, so a daemon's worker maps
        /// one stack, not one per step (an unmap interrupts every other
        /// CPU running the process's threads to flush their TLBs).
        static SPARE: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
    }

    // SAFETY: a plain mapping, owned by one `Guard`.
    unsafe impl Send for Stack {}

    impl Drop for Stack {
        fn drop(&mut self) {
            // SAFETY: mapped in `Stack::new`, unmapped once.
            unsafe { libc::munmap(self.base, self.len) };
        }
    }

    impl Stack {
        /// This thread's spare stack, or a new one.
        fn take() -> io::Result<Stack> {
            match SPARE.with(std::cell::Cell::take) {
                Some(stack) => Ok(stack),
                None => Stack::new(),
            }
        }

        /// Keeps the stack of a guard that was reaped for this thread's
        /// next guard (nothing runs on it any more).
        pub(super) fn put_back(stack: Stack) {
            // A spare already there is unmapped as it is dropped.
            drop(SPARE.with(|s| s.replace(Some(stack))));
        }

        fn new() -> io::Result<Stack> {
            let len = STACK_SIZE + GUARD_PAGE;
            // SAFETY: a fresh anonymous mapping; checked below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = Stack { base, len };
            // SAFETY: the lowest page of the mapping just made.
            if unsafe { libc::mprotect(base, GUARD_PAGE, libc::PROT_NONE) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }

        /// The top of the stack, 16-byte aligned, with `args` just above
        /// where the child's frames begin.
        fn top_with(&self, args: Args) -> (*mut c_void, *mut Args) {
            let end = self.base as usize + self.len;
            let args_at = (end - std::mem::size_of::<Args>()) & !15;
            // SAFETY: inside the writable part of the mapping.
            unsafe { std::ptr::write(args_at as *mut Args, args) };
            ((args_at - 64) as *mut c_void, args_at as *mut Args)
        }
    }

    /// Clones the guard; returns its pid (the new group's id) and its stack.
    pub(super) fn spawn(read: &OwnedFd, write: &OwnedFd) -> io::Result<(Pid, Stack)> {
        let _ = write; // closed in the child by the descriptor sweep
        let stack = Stack::take()?;
        let fd_limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft.min(1 << 16) as c_int);
        let (top, args) = stack.top_with(Args {
            read_fd: read.as_raw_fd(),
            fd_limit,
        });

        // Block every signal in this thread for the clone, so the child starts
        // with all of them blocked; restore the mask after.
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises `all`; pthread_sigmask fills `old`.
        let rc = unsafe {
            libc::sigfillset(all.as_mut_ptr());
            libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr())
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: `guard_main` touches only its stack (mapped above, with its
        // arguments on it) and makes raw system calls; SIGCHLD makes it a
        // child this process reaps with waitpid.
        let pid = unsafe { libc::clone(guard_main, top, libc::CLONE_VM | libc::SIGCHLD, args.cast()) };
        let clone_error = io::Error::last_os_error();
        // SAFETY: `old` was filled by the call above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut()) };
        if pid == -1 {
            return Err(clone_error);
        }
        // The child does the same; whichever runs first makes the group, so it
        // exists before the step is spawned into it.
        // SAFETY: a plain system call on our own child.
        if unsafe { libc::setpgid(pid, pid) } != 0 {
            let e = io::Error::last_os_error();
            // EACCES cannot happen (the guard never execs); ESRCH would mean
            // it is gone already. Either way the step must not start.
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return Err(e);
        }
        Ok((Pid::from_raw(pid), stack))
    }

    /// A raw system call with up to three arguments; returns `-errno` on error.
    ///
    /// # Safety
    /// The call and its arguments must be valid for the calling context.
    #[allow(
        clippy::inline_always,
        reason = "inlined into the cloned guard, which makes a few raw calls on a small stack of its own"
    )]
    #[inline(always)]
    unsafe fn sys(n: libc::c_long, a: usize, b: usize, c: usize) -> isize {
        let ret: isize;
        // SAFETY: the x86_64 Linux system call convention; rcx and r11 are
        // clobbered by `syscall`.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") n as isize => ret,
                in("rdi") a,
                in("rsi") b,
                in("rdx") c,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    /// Arms `timer` (a timerfd) to fire once, `ms` milliseconds from now.
    /// Raw system calls only.
    ///
    /// # Safety
    /// `timer` must be a timerfd of the calling process.
    unsafe fn arm(timer: usize, ms: u64) {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ms / 1000).min(i64::MAX as u64) as libc::time_t,
                tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
            },
        };
        // SAFETY: a timerfd of ours and a value on this stack.
        unsafe { sys4(libc::SYS_timerfd_settime, timer, 0, &raw const spec as usize, 0) };
    }

    /// [`sys`] with a fourth argument.
    ///
    /// # Safety
    /// The call and its arguments must be valid for the calling context.
    #[allow(
        clippy::inline_always,
        reason = "inlined into the cloned guard, which makes a few raw calls on a small stack of its own"
    )]
    #[inline(always)]
    unsafe fn sys4(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
        let ret: isize;
        // SAFETY: the x86_64 Linux system call convention (the fourth
        // argument in r10); rcx and r11 are clobbered by `syscall`.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") n as isize => ret,
                in("rdi") a,
                in("rsi") b,
                in("rdx") c,
                in("r10") d,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    /// The guard's whole life. Raw system calls only (see the module's note).
    extern "C" fn guard_main(arg: *mut c_void) -> c_int {
        // SAFETY: `arg` points at the `Args` written on this stack before the
        // clone; every call below is a plain system call on our own state.
        unsafe {
            let args = std::ptr::read(arg.cast::<Args>());
            let fd = args.read_fd as usize;
            sys(
                libc::SYS_prctl,
                libc::PR_SET_NAME as usize,
                NAME.as_ptr() as usize,
                0,
            );
            sys(libc::SYS_setpgid, 0, 0, 0);
            sys(libc::SYS_chdir, c"/".as_ptr() as usize, 0, 0);
            // Every descriptor but the pipe's read end.
            let swept = (fd == 0 || sys(libc::SYS_close_range, 0, fd - 1, 0) == 0)
                && sys(libc::SYS_close_range, fd + 1, u32::MAX as usize, 0) == 0;
            if !swept {
                for other in 0..args.fd_limit.max(0) as usize {
                    if other != fd {
                        sys(libc::SYS_close, other, 0, 0);
                    }
                }
            }
            // The lease's deadline, on a clock that counts suspend; none
            // (-1, which poll passes over) where the kernel has no such timer.
            let timer = sys(
                libc::SYS_timerfd_create,
                libc::CLOCK_BOOTTIME as usize,
                libc::TFD_CLOEXEC as usize,
                0,
            );
            let mut fds = [
                libc::pollfd {
                    fd: fd as c_int,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if timer < 0 { -1 } else { timer as c_int },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Whole messages of 8 bytes: the time left, in milliseconds.
            // A message already sent when the timer fires is read first: a
            // guard that wakes late (starved, stopped) past a deadline the
            // runner had moved before it came keeps the step until the
            // newer one. Arming the timer again clears its expiry.
            let mut buf = [0u8; 16];
            loop {
                fds[0].revents = 0;
                fds[1].revents = 0;
                let n = sys(libc::SYS_poll, fds.as_mut_ptr() as usize, 2, usize::MAX);
                if n < 0 && n != -(libc::EINTR as isize) {
                    break;
                }
                if fds[0].revents == 0 {
                    if fds[1].revents != 0 {
                        break;
                    }
                    continue;
                }
                let n = sys(libc::SYS_read, fd, buf.as_mut_ptr() as usize, buf.len());
                if n == 0 || (n < 0 && n != -(libc::EINTR as isize)) {
                    break;
                }
                if n >= 8 && timer >= 0 {
                    // The last whole message read (n is at most 16): a
                    // plain load, nothing that could panic or call out.
                    let last = ((n as usize) & !7) - 8;
                    let ms = std::ptr::read_unaligned(buf.as_ptr().add(last).cast::<u64>());
                    arm(timer as usize, ms);
                }
            }
            sys(libc::SYS_kill, 0, libc::SIGKILL as usize, 0);
            // Not reached: the kill includes this process.
            sys(libc::SYS_exit, 0, 0, 0);
        }
        0
    }
}

/// The guard as `/bin/sh`, started with `posix_spawn` (where there is no
/// cloned guard).
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod shell {
    use std::ffi::{CStr, c_char};
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::RawFd;

    use nix::libc;
    use nix::unistd::Pid;

    /// The guard's program: a POSIX shell is on every system a step runs on.
    const SHELL: &CStr = c"/bin/sh";
    /// Its `argv[0]`, so operators can tell it from the runner in `ps`.
    const NAME: &CStr = c"automaton-guard";
    /// Its whole life: wait for EOF, then kill the group, itself included.
    const SCRIPT: &CStr = c"cd /; read line; kill -KILL 0";

    /// `posix_spawn`s the guard: `stdin` as its fd 0, `/dev/null` as 1 and 2,
    /// nothing else open (where the C library can close the rest), every
    /// signal blocked, in a new process group it leads.
    pub(super) fn spawn_guard(stdin: RawFd) -> io::Result<Pid> {
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
}

/// A pipe whose ends are both close-on-exec and non-blocking (one system
/// call where the platform has `pipe2`).
pub(super) fn nonblocking_cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        use nix::fcntl::OFlag;
        Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        let (r, w) = cloexec_pipe()?;
        for fd in [&r, &w] {
            super::set_nonblocking(fd)?;
        }
        Ok((r, w))
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_deadline_is_never_armed_to_fire_before_it() {
        let now = Instant::now();
        for (left, ms) in [
            (Duration::ZERO, 1),
            (Duration::from_nanos(1), 1),
            (Duration::from_micros(999), 1),
            (Duration::from_millis(1), 1),
            (Duration::from_micros(1001), 2),
            (Duration::from_micros(2_999_999), 3000),
            (Duration::from_secs(3), 3000),
        ] {
            assert_eq!(millis_until(now + left, now), ms, "{left:?}");
            assert!(Duration::from_millis(ms) >= left, "{left:?}");
        }
        assert_eq!(
            millis_until(now, now + Duration::from_secs(1)),
            1,
            "a deadline passed"
        );
    }
}
