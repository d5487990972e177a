//! Live pages: one thread follows the store's change feed
//! ([`crate::store::Store::watch`]) and tells every open page which loop
//! changed, as a server-sent event (`GET /events`), of the loops its user
//! may see. The thread reads a changed loop's lists once, for every
//! stream; each stream checks its own user against them with the API's
//! rule ([`may_see`]). A stream whose user was removed, or whose token was
//! rotated, is ended: before it would be told of a loop, and every
//! [`RECHECK`] while nothing changes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::Stream;
use serde::Deserialize;
use tokio::sync::{broadcast, watch};

use super::api::{may_see, view_rules};
use super::auth::{PageUser, still_holds};
use super::{App, blocking};
use crate::access::Access;
use crate::store::{Changes, Stores};
use crate::who::Actor;

/// What a page is sent when loops came or went (not one loop's change).
const ANY: &str = "*";

/// What the watching thread tells every stream.
#[derive(Debug)]
enum Notice {
    /// Loop `name` changed; `viewers` are its lists, read once for every
    /// stream, which each checks its own user against.
    Loop { name: String, viewers: Access },
    /// Loops came or went, or one the store named could not be read: told
    /// to everyone, as it names no loop.
    Any,
}

type Feed = broadcast::Sender<Arc<Notice>>;

/// The change feed.
pub(crate) struct Live {
    tx: Feed,
    stop: watch::Receiver<bool>,
}

impl Live {
    /// Starts watching: the store's feed is opened before this returns,
    /// so every change committed after it is told. The watching thread
    /// ends once `stop` says so.
    pub(crate) fn start(stores: Stores, stop: watch::Receiver<bool>) -> Live {
        let (tx, _) = broadcast::channel(1024);
        let changes = stores.watch().map_err(|e| {
            tracing::warn!("cannot watch the loops yet ({e}); trying again");
        });
        let feed = tx.clone();
        let until = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("automaton-live".into())
            .spawn(move || {
                let changes = match changes {
                    Ok(c) => c,
                    Err(()) => match watch_again(&stores, &until) {
                        Some(c) => c,
                        None => return,
                    },
                };
                follow(&stores, changes, &feed, &until);
            });
        if let Err(e) = spawned {
            tracing::warn!("pages will not update by themselves: cannot start a thread: {e}");
        }
        Live { tx, stop }
    }
}

/// Tells of each change the feed gives, with the loop's lists read once
/// for all streams. A feed that fails is opened again (every
/// [`REWATCH`]), and the gap it left told as `*`: pages reload.
fn follow(stores: &Stores, mut changes: Box<dyn Changes>, feed: &Feed, stop: &watch::Receiver<bool>) {
    while !*stop.borrow() {
        match changes.wait(Duration::from_secs(1)) {
            Ok(changed) => {
                for change in changed {
                    let notice = match stores.get(&change.name) {
                        Ok(dir) => Notice::Loop {
                            viewers: view_rules(stores, dir.as_ref()),
                            name: change.name,
                        },
                        // Gone (or unreadable): it came or went.
                        Err(_) => Notice::Any,
                    };
                    let _ = feed.send(Arc::new(notice));
                }
            }
            Err(e) => {
                tracing::warn!("{e}; pages are not told of changes until it is made again");
                let Some(again) = watch_again(stores, stop) else {
                    return;
                };
                changes = again;
                tracing::info!("listening for changes again");
                let _ = feed.send(Arc::new(Notice::Any));
            }
        }
    }
}

/// How often a feed that failed is opened again.
const REWATCH: Duration = Duration::from_secs(1);

/// The store's feed opened again, once it can be; `None` if the server
/// stops first.
fn watch_again(stores: &Stores, stop: &watch::Receiver<bool>) -> Option<Box<dyn Changes>> {
    loop {
        std::thread::sleep(REWATCH);
        if *stop.borrow() {
            return None;
        }
        match stores.watch() {
            Ok(changes) => return Some(changes),
            Err(e) => tracing::debug!("cannot watch for changes yet: {e}"),
        }
    }
}

#[derive(Deserialize)]
pub(super) struct Watch {
    /// One loop's changes only; every loop's without it.
    #[serde(rename = "loop")]
    name: Option<String>,
}

/// `GET /events[?loop=NAME]`: `change` events whose data is the loop's name
/// (`*` when loops came or went), of the loops the user may see, until
/// the server stops.
pub(super) async fn events(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Query(w): Query<Watch>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = app.live.tx.subscribe();
    let stop = app.live.stop.clone();
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watching = Watching {
        rx,
        stop,
        recheck,
        app: app.clone(),
        only: w.name,
        token_sha256: who.token_sha256,
        actor: who.actor,
    };
    let stream = futures_util::stream::unfold(watching, |mut w| async move {
        loop {
            if *w.stop.borrow() {
                return None;
            }
            let notice = tokio::select! {
                got = w.rx.recv() => match got {
                    Ok(n) => n,
                    // Fell behind: something changed.
                    Err(broadcast::error::RecvError::Lagged(_)) => Arc::new(Notice::Any),
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = w.stop.changed() => return None,
                _ = w.recheck.tick() => {
                    if !w.still_signed_in().await {
                        return None;
                    }
                    continue;
                }
            };
            let Some(name) = w.told(&notice) else { continue };
            if !w.still_signed_in().await {
                return None;
            }
            let event = Event::default().event("change").data(name);
            return Some((Ok(event), w));
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// How often a stream told nothing checks that its user still holds the
/// token it was opened with.
const RECHECK: Duration = Duration::from_secs(5);

/// One open stream: its user and the loop it watches, if one.
struct Watching {
    rx: broadcast::Receiver<Arc<Notice>>,
    stop: watch::Receiver<bool>,
    recheck: tokio::time::Interval,
    app: Arc<App>,
    only: Option<String>,
    actor: Actor,
    /// The token the stream was opened with; none through the trusted
    /// proxy, which answers for its users itself.
    token_sha256: Option<String>,
}

impl Watching {
    /// Whether the stream's user is still a user with the token it was
    /// opened with. Users that cannot be read end the stream too: it
    /// cannot tell that they may see anything.
    async fn still_signed_in(&self) -> bool {
        let Some(hash) = self.token_sha256.clone() else {
            return true;
        };
        let user = self.actor.user.clone();
        let stores = self.app.stores.clone();
        match blocking(move || stores.users()).await {
            Ok(users) => still_holds(&users, &user, &hash),
            Err(e) => {
                tracing::warn!("ending {user}'s live stream: {e}");
                false
            }
        }
    }

    /// What this stream is told of `notice`: nothing of a loop its user
    /// may not see, or that it does not watch.
    fn told<'a>(&self, notice: &'a Notice) -> Option<&'a str> {
        match notice {
            Notice::Any => Some(ANY),
            Notice::Loop { name, viewers } => {
                let watched = self.only.as_ref().is_none_or(|o| o == name);
                (watched && may_see(&self.actor, viewers).is_ok()).then_some(name.as_str())
            }
        }
    }
}
