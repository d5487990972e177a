//! `automaton serve`: the web console and its JSON API over either store.
//! The only code that knows axum, hyper and tokio. One file a concern:
//! `server` (sockets, connections, the router and its layers, the drain
//! on SIGTERM), `tls` (HTTPS), `auth` (tokens, sessions, the trusted
//! proxy, CSRF, the sign-in limit), `api` (the JSON API), `pages` (the
//! HTML), `live` (server-sent events from the store's changes).
//!
//! Handlers are thin: each runs the library function its CLI command runs
//! (`status`, `history`, `review`, `logs`, `approve`, ...), given the store
//! the server opened at its start, on a blocking thread lent to the
//! signed-in user ([`crate::who::acting_as`]), so the role check, the
//! records and the JSON are the CLI's own.

mod api;
mod auth;
mod live;
mod pages;
pub mod ports;
mod server;
mod tls;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::ServeArgs;
use crate::error::{Error, Exit, Result};
use crate::root::Root;
use crate::store::Stores;
use crate::who::Actor;

/// The largest request body read (a note, a reason).
pub const BODY_LIMIT: usize = 64 * 1024;

/// What every request shares.
pub struct App {
    pub root: Root,
    pub stores: Stores,
    pub auth: auth::Auth,
    pub live: live::Live,
    /// How long a change waits for the loop's lock: within the request's
    /// own bound, so a busy loop is answered, not timed out.
    pub lock_wait: Duration,
}

pub fn run(root: &Root, args: &ServeArgs, out: &mut dyn Write) -> Result<Exit> {
    // Opened once: every request is given this store (a shared store's
    // server is not connected to afresh for each).
    let stores = Stores::open(root)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::config(cert, key)?),
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("automaton-serve")
        .build()
        .map_err(Error::io("starting the server's runtime for", root.path()))?;
    let stop = tokio::sync::watch::channel(false);
    let app = Arc::new(App {
        root: root.clone(),
        live: live::Live::start(root.clone(), stores.clone(), stop.1.clone()),
        stores,
        auth: auth::Auth::new(args, tls.is_some())?,
        lock_wait: args.request_timeout / 2,
    });
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|source| Error::Listen {
                addr: args.listen.to_string(),
                source,
            })?;
        let bound = listener.local_addr().map_err(|source| Error::Listen {
            addr: args.listen.to_string(),
            source,
        })?;
        // Steps are denied connections to it while it serves.
        let _listening = ports::Listening::record(root.path(), bound.port())?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let line = format!("listening on {scheme}://{bound}\n");
        out.write_all(line.as_bytes())
            .and_then(|()| out.flush())
            .map_err(Error::Output)?;
        let router = server::router(Arc::clone(&app), args.request_timeout);
        server::serve(listener, router, tls, args.grace, stop.0).await;
        Ok::<(), Error>(())
    })?;
    // Blocking work still running (a cancel's wait) is not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(Exit::Ok)
}

/// Runs `work` on a blocking thread as `actor`: the store's calls block.
pub async fn blocking<T: Send + 'static>(
    actor: Option<Actor>,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let joined = tokio::task::spawn_blocking(move || match &actor {
        Some(actor) => crate::who::acting_as(actor, work),
        None => work(),
    })
    .await;
    match joined {
        Ok(result) => result,
        // A panic in the library: the request fails, the server goes on.
        Err(e) => Err(Error::Io {
            action: "serving a request for",
            path: "the console".into(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}
