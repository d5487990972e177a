//! `automaton serve`: the web console and its JSON API over either store.
//! The only code that knows axum, hyper and tokio. One file a concern:
//! `server` (sockets, connections, the router and its layers, the drain
//! on SIGTERM), `conns` (how many connections are held), `tls` (HTTPS), `auth` (tokens, sessions, the trusted
//! proxy, CSRF, the sign-in limit), `api` (the JSON API), `pages` (the
//! HTML), `live` (server-sent events from the store's changes).
//!
//! Handlers are thin: a change calls the core ([`crate::ops`]) with a
//! context naming the signed-in user, a read runs the library function its
//! CLI command runs (`status`, `history`, `review`, `logs`), given the
//! store the server opened at its start, on a blocking thread; so the role
//! check, the records and the JSON are the CLI's own.

mod api;
mod auth;
mod conns;
mod live;
mod pages;
pub(crate) mod ports;
mod scrape;
mod server;
mod tls;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::{Listen, ServeArgs};
use crate::error::{Error, Exit, Result};
use crate::root::Root;
use crate::store::Stores;

/// The largest request body read (a note, a reason).
pub(crate) const BODY_LIMIT: usize = 64 * 1024;

/// What every request shares.
pub(crate) struct App {
    pub root: Root,
    pub stores: Stores,
    pub auth: auth::Auth,
    pub live: live::Live,
    /// How long a change waits for the loop's lock: within the request's
    /// own bound, so a busy loop is answered, not timed out.
    pub lock_wait: Duration,
    /// The refusals recorded lately: one a minute per user and loop is.
    pub refusals: crate::ops::refusal::Refusals,
    /// What `/metrics` keeps between scrapes (src/exposition/figures.rs).
    pub metrics: crate::exposition::Cache,
}

pub(crate) fn run(root: &Root, args: &ServeArgs, out: &mut dyn Write) -> Result<Exit> {
    // Opened once: every request is given this store (a shared store's
    // server is not connected to afresh for each).
    let stores = Stores::open(root)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::config(cert, key)?),
        _ => None,
    };
    let auth = auth::Auth::new(args, tls.is_some())?;
    conns::raise_descriptor_limit();
    // A change is answered once committed: its webhooks go to a queue,
    // so a receiver that hangs never holds the request past its bound.
    let _webhooks = crate::notify::webhook::Queue::start();
    // Its notify commands too: they run after the answer, on their own
    // thread, in order.
    let _commands = crate::notify::later::Commands::start();
    // A Unix socket is made before any thread runs: its mode is set by
    // narrowing the process's umask around the bind.
    let unix = match &args.listen {
        Listen::Unix(path) if tls.is_some() => {
            return Err(Error::ServeSetup {
                reason: format!(
                    "--listen unix:{} serves plain HTTP to the proxy in front; leave TLS to it",
                    path.display()
                ),
            });
        }
        Listen::Unix(path) => {
            Some(
                server::bind_unix(path, socket_mode(root)).map_err(|source| Error::Listen {
                    addr: args.listen.to_string(),
                    source,
                })?,
            )
        }
        Listen::Tcp(_) => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("automaton-serve")
        .build()
        .map_err(Error::io("starting the server's runtime for", root.path()))?;
    let stop = tokio::sync::watch::channel(false);
    let app = Arc::new(App {
        root: root.clone(),
        live: live::Live::start(stores.clone(), stop.1.clone()),
        stores,
        auth,
        lock_wait: args.request_timeout / 2,
        refusals: Default::default(),
        metrics: Default::default(),
    });
    runtime.block_on(async {
        let (listener, line, port) = listen(args, unix, tls.is_some()).await?;
        // Steps are denied connections to a TCP port while it serves.
        let _listening = port
            .map(|p| ports::Listening::record(root.path(), p))
            .transpose()?;
        let signal = server::shutdown_signal();
        out.write_all(line.as_bytes())
            .and_then(|()| out.flush())
            .map_err(Error::Output)?;
        let router = server::router(Arc::clone(&app), args.request_timeout);
        server::serve(listener, router, tls, args.grace, signal, stop.0).await;
        Ok::<(), Error>(())
    })?;
    // The socket is of no use once the server is gone.
    if let Listen::Unix(path) = &args.listen
        && let Err(e) = std::fs::remove_file(path)
    {
        tracing::warn!("cannot remove the socket {}: {e}", path.display());
    }
    // Blocking work still running (a cancel's wait) is not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(Exit::Ok)
}

/// The listener, the line that says where it listens, and its TCP port.
async fn listen(
    args: &ServeArgs,
    unix: Option<server::StdUnixListener>,
    tls: bool,
) -> Result<(server::Listener, String, Option<u16>)> {
    let failed = |source| Error::Listen {
        addr: args.listen.to_string(),
        source,
    };
    match (&args.listen, unix) {
        (Listen::Tcp(addr), _) => {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(failed)?;
            let bound = listener.local_addr().map_err(failed)?;
            let scheme = if tls { "https" } else { "http" };
            Ok((
                server::Listener::Tcp(listener),
                format!("listening on {scheme}://{bound}\n"),
                Some(bound.port()),
            ))
        }
        #[cfg(windows)]
        (Listen::Unix(_), Some(never)) => match never {},
        #[cfg(unix)]
        (Listen::Unix(_), Some(unix)) => {
            let listener = tokio::net::UnixListener::from_std(unix).map_err(failed)?;
            Ok((
                server::Listener::Unix(listener),
                format!("listening on {}\n", args.listen),
                None,
            ))
        }
        (Listen::Unix(_), None) => Err(failed(std::io::Error::other("the socket was not made"))),
    }
}

/// A Unix socket's mode: the root's, 0600, or 0660 in a group's root.
#[cfg(windows)]
fn socket_mode(_: &Root) -> u32 {
    0o600
}

#[cfg(unix)]
fn socket_mode(root: &Root) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(root.path()) {
        Ok(m) if m.permissions().mode() & 0o070 != 0 => 0o660,
        _ => 0o600,
    }
}

/// Runs `work` on a blocking thread: the store's calls block. Whom it
/// acts for is in what it was given (a [`crate::ops::Ctx`]), not in the
/// thread.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let joined = tokio::task::spawn_blocking(work).await;
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
