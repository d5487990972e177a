//! Live pages: one thread watches the store and tells every open page
//! which loop changed, as a server-sent event (`GET /events`), of the
//! loops its user may see. On a store that notifies (PostgreSQL), its own
//! change signal; on the file store, each loop's commit marker looked at
//! every [`POLL`] (one `stat` a loop, as the daemon watches awaits), and
//! the list of loops with it. The thread reads a changed loop's lists
//! once, for every stream; each stream checks its own user against them
//! with the API's rule ([`may_see`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::Stream;
use serde::Deserialize;
use tokio::sync::{broadcast, watch};

use super::App;
use super::api::{may_see, view_rules};
use super::auth::PageUser;
use crate::access::Access;
use crate::root::Root;
use crate::store::{Changes, LoopStore, Stores};
use crate::who::Actor;

/// How often the file store's commit markers are looked at.
const POLL: Duration = Duration::from_millis(250);
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

/// Each loop's commit marker's modification time, by the loop's name.
type Marks = HashMap<String, Option<SystemTime>>;

/// The change feed.
pub struct Live {
    tx: Feed,
    stop: watch::Receiver<bool>,
}

/// How the watching thread learns of changes.
enum Watcher {
    /// The store's own change signal.
    Listening(Box<dyn Changes>),
    /// The commit markers as last looked at.
    Polling(Marks),
}

impl Live {
    /// Starts watching: the store's change signal is listened to, or the
    /// commit markers first looked at, before this returns, so every
    /// change committed after it is told. The watching thread ends once
    /// `stop` says so.
    pub fn start(root: Root, stores: Stores, stop: watch::Receiver<bool>) -> Live {
        let (tx, _) = broadcast::channel(1024);
        let watcher = match stores.listen() {
            Some(Ok(changes)) => Watcher::Listening(changes),
            Some(Err(e)) => {
                tracing::warn!("cannot listen for changes ({e}); looking at the loops instead");
                Watcher::Polling(markers(&stores).0)
            }
            None => Watcher::Polling(markers(&stores).0),
        };
        let feed = tx.clone();
        let until = stop.clone();
        let spawned =
            std::thread::Builder::new()
                .name("automaton-live".into())
                .spawn(move || match watcher {
                    Watcher::Listening(changes) => listen(&root, &stores, changes, &feed, &until),
                    Watcher::Polling(seen) => poll(&root, &stores, seen, &feed, &until),
                });
        if let Err(e) = spawned {
            tracing::warn!("pages will not update by themselves: cannot start a thread: {e}");
        }
        Live { tx, stop }
    }
}

/// Tells of each change the store signals, with the loop's lists read
/// once for all streams. A lost connection is made again (every
/// [`RELISTEN`]), and the gap it left told as `*`: pages reload.
fn listen(
    root: &Root,
    stores: &Stores,
    mut changes: Box<dyn Changes>,
    feed: &Feed,
    stop: &watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        match changes.wait(Duration::from_secs(1)) {
            Ok(changed) => {
                for change in changed {
                    let notice = match stores.get(&change.name) {
                        Ok(dir) => Notice::Loop {
                            viewers: view_rules(root, dir.as_ref()),
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
                let Some(again) = listen_again(stores, stop) else {
                    return;
                };
                changes = again;
                tracing::info!("listening for changes again");
                let _ = feed.send(Arc::new(Notice::Any));
            }
        }
    }
}

/// How often a lost notification connection is tried again.
const RELISTEN: Duration = Duration::from_secs(1);

/// The store listened to again, once it can be; `None` if the server
/// stops first.
fn listen_again(stores: &Stores, stop: &watch::Receiver<bool>) -> Option<Box<dyn Changes>> {
    loop {
        std::thread::sleep(RELISTEN);
        if *stop.borrow() {
            return None;
        }
        match stores.listen()? {
            Ok(changes) => return Some(changes),
            Err(e) => tracing::debug!("cannot listen for changes yet: {e}"),
        }
    }
}

/// Looks at every loop's commit marker every [`POLL`]; tells of each one
/// that moved, with its lists, and of loops that came or went.
fn poll(root: &Root, stores: &Stores, mut seen: Marks, feed: &Feed, stop: &watch::Receiver<bool>) {
    while !*stop.borrow() {
        std::thread::sleep(POLL);
        let (now, dirs) = markers(stores);
        if now.len() != seen.len() || now.keys().any(|k| !seen.contains_key(k)) {
            let _ = feed.send(Arc::new(Notice::Any));
        }
        for dir in &dirs {
            let name = dir.name().as_str();
            if seen.get(name).is_some_and(|was| now.get(name) != Some(was)) {
                let notice = Notice::Loop {
                    name: name.to_owned(),
                    viewers: view_rules(root, dir.as_ref()),
                };
                let _ = feed.send(Arc::new(notice));
            }
        }
        seen = now;
    }
}

/// Every loop's commit marker's modification time, and the loops.
fn markers(stores: &Stores) -> (Marks, Vec<Box<dyn LoopStore>>) {
    let Ok(dirs) = stores.list() else {
        return (HashMap::new(), Vec::new());
    };
    let times = dirs
        .iter()
        .map(|d| {
            let at = d
                .commit_marker()
                .and_then(|m| std::fs::metadata(m).and_then(|m| m.modified()).ok());
            (d.name().to_string(), at)
        })
        .collect();
    (times, dirs)
}

#[derive(Deserialize)]
pub struct Watch {
    /// One loop's changes only; every loop's without it.
    #[serde(rename = "loop")]
    name: Option<String>,
}

/// `GET /events[?loop=NAME]`: `change` events whose data is the loop's name
/// (`*` when loops came or went), of the loops the user may see, until
/// the server stops.
pub async fn events(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Query(w): Query<Watch>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = app.live.tx.subscribe();
    let stop = app.live.stop.clone();
    let watching = Watching {
        rx,
        stop,
        only: w.name,
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
            };
            if let Some(name) = w.told(&notice) {
                let event = Event::default().event("change").data(name);
                return Some((Ok(event), w));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// One open stream: its user and the loop it watches, if one.
struct Watching {
    rx: broadcast::Receiver<Arc<Notice>>,
    stop: watch::Receiver<bool>,
    only: Option<String>,
    actor: Actor,
}

impl Watching {
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
