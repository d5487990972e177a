//! The daemon's life, as one state machine: it serves until a stop
//! signal, then drains (no tick starts; running ones have the grace period
//! to finish), then cancels (the steps still running are told to stop and
//! their ticks record it), and stops once no tick runs. A second signal
//! ends the grace at once.

use std::time::{Duration, Instant};

/// Where the daemon is between its start and its exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Firing due ticks.
    Serving,
    /// A stop signal came: no tick starts, and those running have until
    /// `deadline` before their steps are cancelled.
    Draining { deadline: Instant },
    /// The grace ran out with ticks running: their steps were cancelled,
    /// and the daemon waits for the ticks to record that.
    Cancelling,
}

impl Phase {
    /// Whether a stop signal has come.
    pub(super) fn stopping(self) -> bool {
        self != Phase::Serving
    }

    /// Whether the daemon is done: stopping, with no tick running.
    pub(super) fn stopped(self, running: usize) -> bool {
        self.stopping() && running == 0
    }

    /// After a stop signal at `now`: the first starts the grace, a second
    /// ends it.
    pub(super) fn signalled(self, now: Instant, grace: Duration) -> Phase {
        match self {
            Phase::Serving => Phase::Draining {
                deadline: now + grace,
            },
            Phase::Draining { .. } => Phase::Draining { deadline: now },
            Phase::Cancelling => Phase::Cancelling,
        }
    }

    /// Whether the grace is over at `now` with ticks still `running`: their
    /// steps are then cancelled, and the phase becomes [`Phase::Cancelling`].
    pub(super) fn grace_over(self, now: Instant, running: usize) -> bool {
        matches!(self, Phase::Draining { deadline } if now >= deadline && running > 0)
    }

    /// How long a stopping daemon sleeps at most: until its deadline while
    /// draining, `idle` once cancelling; `None` while serving (the
    /// schedule says).
    pub(super) fn wait(self, now: Instant, idle: Duration) -> Option<Duration> {
        match self {
            Phase::Serving => None,
            Phase::Draining { deadline } => Some(deadline.saturating_duration_since(now)),
            Phase::Cancelling => Some(idle),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(30);

    #[test]
    fn a_first_signal_drains_for_the_grace_and_a_second_ends_it() {
        let t0 = Instant::now();
        let draining = Phase::Serving.signalled(t0, GRACE);
        assert_eq!(draining, Phase::Draining { deadline: t0 + GRACE });
        assert!(draining.stopping());
        assert!(!draining.grace_over(t0, 2));
        assert_eq!(draining.wait(t0, Duration::from_secs(1)), Some(GRACE));
        let t1 = t0 + Duration::from_secs(1);
        let now = draining.signalled(t1, GRACE);
        assert_eq!(now, Phase::Draining { deadline: t1 });
        assert!(now.grace_over(t1, 2));
    }

    #[test]
    fn the_grace_is_over_only_with_ticks_running_and_cancelling_stays() {
        let t0 = Instant::now();
        let draining = Phase::Serving.signalled(t0, GRACE);
        assert!(!draining.grace_over(t0 + GRACE, 0));
        assert!(draining.grace_over(t0 + GRACE, 1));
        assert_eq!(Phase::Cancelling.signalled(t0, GRACE), Phase::Cancelling);
        assert!(!Phase::Cancelling.grace_over(t0 + GRACE, 1));
    }

    #[test]
    fn the_daemon_stops_only_when_stopping_with_nothing_running() {
        let draining = Phase::Serving.signalled(Instant::now(), GRACE);
        assert!(!Phase::Serving.stopped(0));
        assert!(!draining.stopped(1));
        assert!(draining.stopped(0));
        assert!(Phase::Cancelling.stopped(0));
        assert_eq!(Phase::Serving.wait(Instant::now(), GRACE), None);
    }
}
