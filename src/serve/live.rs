//! Live pages: one thread watches the store and tells every open page
//! which loop changed, as a server-sent event (`GET /events`). On a store
//! that notifies (PostgreSQL), its own change signal; on the file store,
//! each loop's commit marker looked at every [`POLL`] (one `stat` a loop,
//! as the daemon watches awaits), and the list of loops with it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::Stream;
use serde::Deserialize;
use tokio::sync::{broadcast, watch};

use super::App;
use super::auth::PageUser;
use crate::store::Stores;

/// How often the file store's commit markers are looked at.
const POLL: Duration = Duration::from_millis(250);
/// What a page is sent when loops came or went (not one loop's change).
const ANY: &str = "*";

/// The change feed.
pub struct Live {
    tx: broadcast::Sender<String>,
    stop: watch::Receiver<bool>,
}

impl Live {
    /// Starts the watching thread; it ends once `stop` says so.
    pub fn start(stores: Stores, stop: watch::Receiver<bool>) -> Live {
        let (tx, _) = broadcast::channel(1024);
        let feed = tx.clone();
        let until = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("automaton-live".into())
            .spawn(move || watch_store(&stores, &feed, &until));
        if let Err(e) = spawned {
            tracing::warn!("pages will not update by themselves: cannot start a thread: {e}");
        }
        Live { tx, stop }
    }
}

fn watch_store(stores: &Stores, feed: &broadcast::Sender<String>, stop: &watch::Receiver<bool>) {
    if let Some(listening) = stores.listen() {
        match listening {
            Ok(mut changes) => {
                while !*stop.borrow() {
                    match changes.wait(Duration::from_secs(1)) {
                        Ok(changes) => changes.into_iter().for_each(|c| drop(feed.send(c.name))),
                        Err(e) => {
                            tracing::warn!("pages will not update by themselves: {e}");
                            return;
                        }
                    }
                }
                return;
            }
            Err(e) => tracing::warn!("cannot listen for changes ({e}); looking at the loops instead"),
        }
    }
    let mut seen: HashMap<String, Option<SystemTime>> = HashMap::new();
    while !*stop.borrow() {
        let now = markers(stores);
        if now.len() != seen.len() || now.keys().any(|k| !seen.contains_key(k)) {
            let _ = feed.send(ANY.to_owned());
        }
        for (name, at) in &now {
            if seen.get(name).is_some_and(|was| was != at) {
                let _ = feed.send(name.clone());
            }
        }
        seen = now;
        std::thread::sleep(POLL);
    }
}

/// Every loop's commit marker's modification time.
fn markers(stores: &Stores) -> HashMap<String, Option<SystemTime>> {
    let Ok(dirs) = stores.list() else {
        return HashMap::new();
    };
    dirs.iter()
        .map(|d| {
            let marker: Option<PathBuf> = d.commit_marker();
            let at = marker.and_then(|m| std::fs::metadata(m).and_then(|m| m.modified()).ok());
            (d.name().to_string(), at)
        })
        .collect()
}

#[derive(Deserialize)]
pub struct Watch {
    /// One loop's changes only; every loop's without it.
    #[serde(rename = "loop")]
    name: Option<String>,
}

/// `GET /events[?loop=NAME]`: `change` events whose data is the loop's name
/// (`*` when loops came or went), until the server stops.
pub async fn events(
    State(app): State<Arc<App>>,
    PageUser(_who): PageUser,
    Query(w): Query<Watch>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = app.live.tx.subscribe();
    let stop = app.live.stop.clone();
    let stream = futures_util::stream::unfold((rx, stop, w.name), |(mut rx, mut stop, only)| async move {
        loop {
            if *stop.borrow() {
                return None;
            }
            let name = tokio::select! {
                got = rx.recv() => match got {
                    Ok(n) => n,
                    // Fell behind: something changed.
                    Err(broadcast::error::RecvError::Lagged(_)) => ANY.to_owned(),
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = stop.changed() => return None,
            };
            if only.as_ref().is_none_or(|o| *o == name || name == ANY) {
                let event = Event::default().event("change").data(name);
                return Some((Ok(event), (rx, stop, only)));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
