//! A server that refuses new connections (its `max_connections` reached:
//! "too many clients"): the daemon stops starting ticks rather than start
//! ones that could not take their lock, and says so once. The ticks
//! running go on (their lock sessions and the lease renewals' connection
//! are already made). After a pause, one tick is tried; the pause doubles,
//! up to [`MAX_PAUSE`], while the server still refuses, and ends the
//! moment a tick gets its connection. A tick of its own that ends frees a
//! connection the next reuses: one is tried then, without waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dispatch::Dispatcher;
use crate::error::{Error, with_causes};

/// The first pause after a refusal.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// A try still running after this long got its connection (a refused
/// one fails at once): the ceiling is raised without waiting for its end.
const LET_IN: Duration = Duration::from_secs(1);

/// The server refused this daemon a connection: at most `ceiling` ticks
/// run (as many as had their connections then); one more is tried after
/// each pause, and each let in raises the ceiling by one, until the
/// workers are all in use again.
pub(super) struct Refused {
    ceiling: usize,
    until: Instant,
    pause: Duration,
    /// The tick started to try the server again, and when, until it ends
    /// or has run [`LET_IN`].
    trying: Option<(Arc<str>, Instant)>,
}

/// Says `e` as a warning, or, when it is the server refusing a connection
/// (said once, when the daemon stopped starting ticks), for debugging.
pub(super) fn warn(e: &Error) {
    if crate::store::refuses_connections(e) {
        tracing::debug!("{}", with_causes(e));
    } else {
        tracing::warn!("{}", with_causes(e));
    }
}

impl Dispatcher<'_> {
    /// How many more ticks may start now: the free workers; while the
    /// server refuses connections, those under the ceiling, or one to try
    /// it again once the pause is over.
    pub(super) fn room(&self) -> usize {
        let running = self.running.len();
        let free = self.max.saturating_sub(running);
        match &self.refused {
            None => free,
            Some(r) if running < r.ceiling => free.min(r.ceiling - running),
            Some(r) if r.trying.is_none() && Instant::now() >= r.until => free.min(1),
            Some(_) => 0,
        }
    }

    /// Tick `name` was handed out (and counts among those running): past
    /// the ceiling, it is the one trying the server.
    pub(super) fn started_one(&mut self, name: &Arc<str>) {
        let running = self.running.len();
        if let Some(r) = &mut self.refused
            && running > r.ceiling
        {
            r.trying = Some((Arc::clone(name), Instant::now()));
        }
    }

    /// When the dispatcher must look again: the pause ends, or the try
    /// running has run long enough to count as let in.
    pub(super) fn refused_until(&self) -> Option<Instant> {
        let r = self.refused.as_ref()?;
        match &r.trying {
            Some((_, since)) => Some(*since + LET_IN),
            None if self.running.len() >= r.ceiling => Some(r.until),
            None => None,
        }
    }

    /// Takes in how a tick (`name`, still among those running) or a claim
    /// (`None`) that needed a connection went: `error`, what it failed
    /// with, if it did. The first refusal is said, and sets the ceiling at
    /// the ticks that have their connections; a try refused doubles the
    /// pause; a try let in raises the ceiling, and once it reaches the
    /// workers, that is said too.
    pub(super) fn connection_answer(&mut self, name: Option<&Arc<str>>, error: Option<&Error>) {
        let refused = error.is_some_and(crate::store::refuses_connections);
        // Those running that hold their connections: not this one.
        let holding = self.running.len().saturating_sub(usize::from(name.is_some()));
        let Some(r) = &mut self.refused else {
            if refused {
                tracing::warn!(
                    "the PostgreSQL server refuses new connections (too many clients): at most \
                     {holding} ticks run, as many as have their connections, until it accepts \
                     more (one more tried in {}, then less often); the ticks running go on",
                    crate::duration::format(FIRST_PAUSE)
                );
                self.refused = Some(Refused {
                    ceiling: holding,
                    until: Instant::now() + FIRST_PAUSE,
                    pause: FIRST_PAUSE,
                    trying: None,
                });
            }
            return;
        };
        let the_try = match name {
            Some(n) => r.trying.as_ref().is_some_and(|(t, _)| t == n),
            None => refused,
        };
        if refused {
            r.ceiling = r.ceiling.min(holding);
        }
        if !the_try {
            return;
        }
        r.trying = None;
        if !refused {
            self.let_in();
            return;
        }
        r.pause = (r.pause * 2).min(MAX_PAUSE);
        r.until = Instant::now() + r.pause;
        tracing::debug!(
            "a connection is still refused; the next try in {}",
            crate::duration::format(r.pause)
        );
    }

    /// A try that has run [`LET_IN`] got its connection: let in.
    pub(super) fn review_try(&mut self) {
        if let Some(Refused {
            trying: Some((_, since)),
            ..
        }) = &self.refused
            && since.elapsed() >= LET_IN
        {
            self.let_in();
        }
    }

    /// The try was let in: the ceiling rises by one, and the next try may
    /// start at once; at the workers' number, the refusal is over.
    fn let_in(&mut self) {
        let Some(r) = &mut self.refused else { return };
        r.trying = None;
        r.ceiling += 1;
        r.pause = FIRST_PAUSE;
        r.until = Instant::now();
        if r.ceiling >= self.max {
            tracing::info!("the PostgreSQL server accepts connections again: every worker may run a tick");
            self.refused = None;
        }
    }
}
