//! Supervising a running step from the calling thread alone: one `poll`
//! over the step's exit, its output pipes and the cancel pipe, with the
//! timeout as poll's. A timeout or a cancel stops the step's group (SIGTERM,
//! the grace period, then SIGKILL); a kill asks for SIGKILL at once.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;

use super::{CancelPipe, KILL, exit, guard, output};

/// What the supervising loop knows of the step's time and of stopping its
/// group.
pub(super) struct Supervisor<'a> {
    guard: &'a guard::Guard,
    grace: Duration,
    /// When the step's time is up, if it has a timeout.
    deadline: Option<Instant>,
    /// Whether the deadline passed before anything else stopped the step.
    pub(super) timed_out: bool,
    /// When the SIGKILL is due, once the SIGTERM is sent.
    kill_at: Option<Instant>,
    killed: bool,
}

impl<'a> Supervisor<'a> {
    pub(super) fn new(guard: &'a guard::Guard, deadline: Option<Instant>, grace: Duration) -> Supervisor<'a> {
        Supervisor {
            guard,
            grace,
            deadline,
            timed_out: false,
            kill_at: None,
            killed: false,
        }
    }

    /// Watches the step until it exits, reading its output into `drains` as
    /// it comes and acting on the clock and the cancel pipe. Returns once
    /// `watch` says the step has exited (it is not reaped yet), or with the
    /// error of a `poll` that failed.
    pub(super) fn until_exit(
        &mut self,
        watch: &exit::Watch,
        cancel: &CancelPipe,
        drains: &mut [output::Drain],
        buf: &mut [u8],
    ) -> nix::Result<()> {
        loop {
            let now = Instant::now();
            self.on_time(now);
            let mut fds = vec![
                PollFd::new(watch.fd(), PollFlags::POLLIN),
                PollFd::new(cancel.read.as_fd(), PollFlags::POLLIN),
            ];
            let streams: Vec<usize> = (0..drains.len()).filter(|&i| drains[i].fd().is_some()).collect();
            for &i in &streams {
                fds.push(PollFd::new(drains[i].fd().expect("open"), PollFlags::POLLIN));
            }
            match poll(&mut fds, self.poll_timeout(now)) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            for (k, &i) in streams.iter().enumerate() {
                if ready[2 + k] {
                    drains[i].read_ready(buf);
                }
            }
            if ready[1] {
                self.on_cancel(cancel, buf);
            }
            if ready[0] {
                return Ok(());
            }
        }
    }

    /// Stops the group once the deadline has passed, and kills it once the
    /// grace period after a stop has run out.
    fn on_time(&mut self, now: Instant) {
        if !self.timed_out && self.kill_at.is_none() && self.deadline.is_some_and(|d| now >= d) {
            self.timed_out = true;
            self.stop(now);
        }
        self.kill_if_due(now);
    }

    /// How long `poll` may wait: until the deadline (while no stop is under
    /// way) or the SIGKILL that is due, whichever comes first.
    fn poll_timeout(&self, now: Instant) -> PollTimeout {
        let wake = match (
            self.deadline.filter(|_| self.kill_at.is_none()),
            self.kill_at.filter(|_| !self.killed),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match wake {
            None => PollTimeout::NONE,
            Some(at) => {
                // Rounded up, so a wake-up is never early.
                let ms = at.saturating_duration_since(now).as_micros().div_ceil(1000);
                PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
            }
        }
    }

    /// Acts on what the cancel pipe holds: SIGKILL now if any byte asks for
    /// it, else a stop as a timeout does it (unless one is under way).
    fn on_cancel(&mut self, cancel: &CancelPipe, buf: &mut [u8]) {
        let mut kill = false;
        while let Ok(n @ 1..) = nix::unistd::read(&cancel.read, buf) {
            kill |= buf[..n].contains(&KILL);
        }
        if kill {
            self.kill_now(Instant::now());
        } else if self.kill_at.is_none() {
            self.stop(Instant::now());
        }
    }

    fn stop(&mut self, now: Instant) {
        tracing::debug!(pgid = self.guard.pgid().as_raw(), "stopping step group");
        self.guard.signal_group(Signal::SIGTERM);
        self.kill_at = Some(now + self.grace);
    }

    fn kill_now(&mut self, now: Instant) {
        tracing::debug!(pgid = self.guard.pgid().as_raw(), "killing step group");
        self.guard.signal_group(Signal::SIGKILL);
        self.killed = true;
        self.kill_at.get_or_insert(now);
    }

    fn kill_if_due(&mut self, now: Instant) {
        if !self.killed && self.kill_at.is_some_and(|at| now >= at) {
            self.guard.signal_group(Signal::SIGKILL);
            self.killed = true;
        }
    }
}
