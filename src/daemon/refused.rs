//! A server that refuses new connections (its `max_connections` reached:
//! "too many clients"): the daemon stops starting ticks rather than start
//! ones that could not take their lock, and says so once. The ticks
//! running go on (their lock sessions and the lease renewals' connection
//! are already made). After a pause, one tick is tried; the pause doubles,
//! up to [`MAX_PAUSE`], while the server still refuses, and ends the
//! moment a tick gets its connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dispatch::Dispatcher;
use crate::error::{Error, with_causes};

/// The first pause after a refusal.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// The server refused this daemon a connection: no tick starts until
/// `until`, and then one at a time until one is let in.
pub(super) struct Refused {
    until: Instant,
    pause: Duration,
    /// The tick started to try the server again, until it ends.
    trying: Option<Arc<str>>,
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
    /// How many more ticks may start now: the free workers, none while the
    /// server refuses connections, one to try it again after the pause.
    pub(super) fn room(&self) -> usize {
        let free = self.max.saturating_sub(self.running.len());
        match &self.refused {
            None => free,
            Some(r) if r.trying.is_some() || Instant::now() < r.until => 0,
            Some(_) => free.min(1),
        }
    }

    /// A tick was handed out: while refused, it is the one trying.
    pub(super) fn started_one(&mut self, name: &Arc<str>) {
        if let Some(r) = &mut self.refused {
            r.trying = Some(Arc::clone(name));
        }
    }

    /// When the pause ends, if the daemon is pausing.
    pub(super) fn refused_until(&self) -> Option<Instant> {
        self.refused
            .as_ref()
            .filter(|r| r.trying.is_none())
            .map(|r| r.until)
    }

    /// Takes in how a tick (`name`) or a claim (`None`) that needed a
    /// connection went: `error`, what it failed with, if it did. A refusal
    /// stops ticks starting (said once); while stopped, only the outcome
    /// of the tick started to try again counts: refused, the pause
    /// doubles; let in, ticks start again.
    pub(super) fn connection_answer(&mut self, name: Option<&Arc<str>>, error: Option<&Error>) {
        let refused = error.is_some_and(crate::store::refuses_connections);
        let Some(r) = &mut self.refused else {
            if refused {
                tracing::warn!(
                    "the PostgreSQL server refuses new connections (too many clients): no tick is \
                     started until it accepts one again (tried again in {}, then less often); \
                     the ticks running go on",
                    crate::duration::format(FIRST_PAUSE)
                );
                self.refused = Some(Refused {
                    until: Instant::now() + FIRST_PAUSE,
                    pause: FIRST_PAUSE,
                    trying: None,
                });
            }
            return;
        };
        // The ticks started before the refusal end as they may: only the
        // try tells (or a claim refused again).
        let the_try = match name {
            Some(n) => r.trying.as_ref() == Some(n),
            None => refused,
        };
        if !the_try {
            return;
        }
        if refused {
            r.pause = (r.pause * 2).min(MAX_PAUSE);
            r.until = Instant::now() + r.pause;
            r.trying = None;
            tracing::debug!(
                "a connection is still refused; the next try in {}",
                crate::duration::format(r.pause)
            );
        } else {
            tracing::info!("the PostgreSQL server accepts connections again: ticks start again");
            self.refused = None;
        }
    }
}
