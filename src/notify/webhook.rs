//! `[notify] webhook`: the notice POSTed as JSON. One delivery takes at
//! most its bound (`webhook_timeout`, 10 s by default), every attempt
//! included: up to [`ATTEMPTS`] attempts, again after a connection error,
//! a timeout of the attempt or a 5xx answer, with a doubling pause between
//! them. No redirect is followed (a 3xx, like a 4xx, is a failure). A
//! failure is logged with the loop's name and the URL masked, never the
//! tick's or the command's that notified.
//!
//! A command delivers after its output, on a thread of its own that it
//! waits for at most [`COMMAND_WAIT`]: a receiver that hangs never holds
//! the command past it (the notice is then left, and said so). The daemon
//! and the console start a [`Queue`], whose threads deliver the notices
//! handed to them within the whole `webhook_timeout`, so no worker or
//! request waits on a receiver (`queue.rs`).

use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) use super::queue::Queue;
use crate::config::notify::HttpUrl;

/// A delivery's bound when loop.toml sets none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at one delivery, at most.
pub(crate) const ATTEMPTS: u32 = 3;
/// The pause after the first failed attempt; it doubles after each.
const BACKOFF: Duration = Duration::from_millis(500);

/// One notice on its way.
pub(super) struct Delivery {
    pub url: HttpUrl,
    pub body: String,
    pub bound: Duration,
    pub loop_name: String,
}

/// How long a command waits for one webhook after its output, at most.
pub(crate) const COMMAND_WAIT: Duration = Duration::from_secs(2);

/// Sends `delivery`: on the queue when one is started, else now, waited
/// for at most [`COMMAND_WAIT`].
pub(super) fn send(delivery: Delivery) {
    if let Some(delivery) = super::queue::offer(delivery) {
        deliver_within(delivery, COMMAND_WAIT);
    }
}

/// Delivers `d` on a thread of its own and waits for it at most `wait`;
/// one still on its way then is left to end with the process, and said so.
fn deliver_within(d: Delivery, wait: Duration) {
    if d.bound <= wait {
        deliver(&d);
        return;
    }
    let (name, url) = (d.loop_name.clone(), d.url.masked());
    let (done, finished) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("automaton-webhook".into())
        .spawn(move || {
            deliver(&d);
            let _ = done.send(());
        });
    if let Err(e) = spawned {
        tracing::warn!("loop {name:?}: webhook {url} not delivered: cannot start a thread: {e}");
        return;
    }
    if finished.recv_timeout(wait).is_err() {
        tracing::warn!(
            "loop {name:?}: webhook {url} not answered within {}; left undelivered as the command \
             ends (the daemon and the console deliver within webhook_timeout)",
            crate::duration::format(wait)
        );
    }
}

/// What one attempt came to.
enum Attempt {
    Delivered,
    /// Worth another attempt: a connection error, a timeout, a 5xx.
    Again(String),
    /// Not worth one: the receiver refused it, or the URL cannot be used.
    Failed(String),
}

/// Delivers `d`, within its bound; logs a failure.
pub(super) fn deliver(d: &Delivery) {
    let until = Instant::now() + d.bound;
    let mut pause = BACKOFF;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match post(d, left) {
            Attempt::Delivered => {
                tracing::debug!("loop {:?}: webhook {}: delivered", d.loop_name, d.url.masked());
                return;
            }
            Attempt::Failed(why) => {
                last = why;
                break;
            }
            Attempt::Again(why) => {
                tracing::debug!(
                    "loop {:?}: webhook {}: attempt {attempt}: {why}",
                    d.loop_name,
                    d.url.masked()
                );
                last = why;
            }
        }
        if attempt < ATTEMPTS {
            std::thread::sleep(pause.min(until.saturating_duration_since(Instant::now())));
            pause *= 2;
        }
    }
    tracing::warn!(
        "loop {:?}: webhook {} not delivered: {}",
        d.loop_name,
        d.url.masked(),
        d.url.scrub(&last)
    );
}

/// One POST, given at most `left`.
fn post(d: &Delivery, left: Duration) -> Attempt {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(left))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("automaton/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let sent = agent
        .post(d.url.as_str())
        .header("content-type", "application/json")
        .send(d.body.as_bytes());
    match sent {
        Ok(r) if r.status().is_success() => Attempt::Delivered,
        Ok(r) if r.status().is_server_error() => Attempt::Again(format!("it answered {}", r.status())),
        Ok(r) => Attempt::Failed(format!("it answered {}", r.status())),
        Err(
            e @ (ureq::Error::Io(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Timeout(_)),
        ) => Attempt::Again(e.to_string()),
        Err(e) => Attempt::Failed(e.to_string()),
    }
}
