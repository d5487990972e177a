//! Sockets and connections: the accept loop, each connection served by
//! hyper with a bound on reading its headers (a client that sends half a
//! request holds only its own connection, and not for long), the one
//! `Router` with its layers (a time bound on every request but the live
//! stream, a bound on bodies, headers that keep pages to themselves), the
//! connections admitted ([`super::conns`]: capped per address and in all),
//! and the drain on SIGTERM or SIGINT: stop accepting, let requests in flight
//! finish within the grace, end the live streams, return. It listens on a
//! TCP address, or on a Unix socket (`--listen unix:PATH`), made with the
//! root's file mode (0600, or 0660 in a group's root), whose peers are
//! known by their uid.

use std::net::SocketAddr;
#[cfg(unix)]
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::handler::Handler;
use axum::http::Method;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, get, on, post};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
#[cfg(unix)]
use tokio::net::{UnixListener, UnixStream};

/// A Unix socket listener as std makes it.
#[cfg(unix)]
pub(super) type StdUnixListener = std::os::unix::net::UnixListener;

/// Windows: `--listen unix:PATH` is refused ([`bind_unix`]), so no Unix
/// socket ever exists.
#[cfg(windows)]
pub(super) enum NoSocket {}
#[cfg(windows)]
pub(super) type StdUnixListener = NoSocket;
#[cfg(windows)]
type UnixListener = NoSocket;
#[cfg(windows)]
type UnixStream = NoSocket;
use tower_service::Service;

use super::conns::{self, Conns, Slot};
use super::tls::Tls;
use super::{App, BODY_LIMIT, api, auth, live, pages};

/// How long a client has to send a request's headers; hyper starts it
/// again when a kept-alive connection waits for its next request, so it
/// also closes an idle connection.
const HEADER_READ: Duration = Duration::from_secs(5);

/// The peer of a request's connection: its address (a Unix socket's
/// peers share `0.0.0.0:0`), and, on a Unix socket, its uid.
#[derive(Debug, Clone, Copy)]
pub(super) struct Peer(pub SocketAddr, pub Option<u32>);

/// Where the server listens.
pub(super) enum Listener {
    Tcp(TcpListener),
    #[cfg_attr(windows, allow(dead_code))]
    Unix(UnixListener),
}

/// Makes the Unix socket `path` with `mode`: the file is never open wider
/// than that, not even for an instant (the process's umask is narrowed
/// around the bind). A socket left by a server that has gone is replaced;
/// one a live server answers on, or any other file, is refused.
#[cfg(windows)]
pub(super) fn bind_unix(_: &Path, _: u32) -> std::io::Result<StdUnixListener> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "a Unix socket needs Unix: listen on HOST:PORT",
    ))
}

#[cfg(unix)]
pub(super) fn bind_unix(path: &Path, mode: u32) -> std::io::Result<StdUnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let stale = meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_err();
        if !stale {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "the path is taken (a live server's socket, or not a socket)",
            ));
        }
        std::fs::remove_file(path)?;
    }
    let narrow = nix::sys::stat::Mode::from_bits_truncate((0o777 & !mode) as nix::libc::mode_t);
    let old = nix::sys::stat::umask(narrow);
    let bound = std::os::unix::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// One route of the API: its method, its path, and what answers it.
type ApiRoute = (Method, &'static str, MethodRouter<Arc<App>>);

/// The route `method` `path`, answered by `handler`.
fn api_route<H, T>(method: Method, path: &'static str, handler: H) -> ApiRoute
where
    H: Handler<T, Arc<App>>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).expect("a method a route can take");
    (method, path, on(filter, handler))
}

/// The API's routes (and the liveness check): what its OpenAPI document
/// (`/api/openapi.json`) describes, and a test holds the two to each
/// other both ways, methods too.
fn api_routes() -> Vec<ApiRoute> {
    vec![
        api_route(Method::GET, "/healthz", healthz),
        api_route(Method::GET, "/api/openapi.json", api::openapi),
        api_route(Method::GET, "/metrics", super::scrape::metrics),
        api_route(Method::GET, "/api/loops", api::list),
        api_route(Method::GET, "/api/loops/{name}", api::one),
        api_route(Method::GET, "/api/loops/{name}/history", api::history),
        api_route(Method::GET, "/api/loops/{name}/review", api::review),
        api_route(Method::GET, "/api/loops/{name}/runs/{tick}/logs", api::logs),
        api_route(Method::POST, "/api/loops/{name}/{verb}", api::change),
    ]
}

/// Every route, in one place.
pub(super) fn router(app: Arc<App>, timeout: Duration) -> Router {
    let api = api_routes()
        .into_iter()
        .fold(Router::new(), |r, (_, path, method)| r.route(path, method))
        .route_layer(middleware::from_fn(api::refuse_declared_too_large));
    let bounded = api
        .route("/", get(pages::list))
        .route("/loops/{name}", get(pages::one))
        .route("/loops/{name}/review", get(pages::review))
        .route("/loops/{name}/runs/{tick}", get(pages::run))
        .route("/loops/{name}/runs/{tick}/output", get(pages::output))
        .route("/loops/{name}/{verb}", post(pages::change))
        .route("/signin", get(auth::signin_page).post(auth::signin))
        .route("/signout", post(auth::signout))
        .route("/assets/{file}", get(pages::asset))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            bound(timeout, req, next)
        }));
    bounded
        .route("/events", get(live::events))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), auth::check_host))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), strict_transport))
        .layer(middleware::from_fn(guard))
        .with_state(app)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn not_found(req: Request) -> Response {
    match req.uri().path().starts_with("/api/") {
        true => api::ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint").into_response(),
        false => (StatusCode::NOT_FOUND, "not found\n").into_response(),
    }
}

/// A request that takes longer than `timeout` is answered 503.
async fn bound(timeout: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => api::ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            &format!("the request took longer than {timeout:?}"),
        )
        .into_response(),
    }
}

/// Headers on every response: no framing, no sniffing, no referrer, no
/// script or style but the console's own; and one line a request logged at
/// debug (method, path, status: never a query, a header or a body).
async fn guard(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let mut response = next.run(req).await;
    tracing::debug!("{method} {path} {}", response.status().as_u16());
    let h = response.headers_mut();
    let set = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ];
    for (name, value) in set {
        h.insert(name, HeaderValue::from_static(value));
    }
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Under TLS, tells browsers to use HTTPS only for this host from now on
/// (a year): a later `http://` link or a stripped redirect is not
/// followed in the clear.
async fn strict_transport(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
    req: Request,
    next: Next,
) -> Response {
    let mut response = next.run(req).await;
    if app.auth.secure() {
        response.headers_mut().insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    response
}

/// Accepts connections until `signal` resolves ([`shutdown_signal`]),
/// then drains: requests in flight finish (within `grace`), the live
/// streams end, and `stop` says so.
pub(super) async fn serve(
    listener: Listener,
    router: Router,
    tls: Option<Tls>,
    grace: Duration,
    signal: impl std::future::Future<Output = ()>,
    stop: tokio::sync::watch::Sender<bool>,
) {
    let graceful = GracefulShutdown::new();
    let conns = Conns::new(conns::descriptor_limit());
    let mut signal = std::pin::pin!(signal);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener) => accepted,
            () = &mut signal => break,
        };
        match accepted {
            Ok(Accepted::Tcp(stream, peer)) => {
                // Past a limit, closed before anything is read.
                let Some(slot) = conns.admit(Some(peer.ip())) else {
                    tracing::debug!("connection from {} closed: too many held", peer.ip());
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection(
                    stream,
                    Peer(peer, None),
                    router.clone(),
                    tls.clone(),
                    (graceful.watcher(), slot),
                ));
            }
            #[cfg(windows)]
            Ok(Accepted::Unix(never)) => match never {},
            #[cfg(unix)]
            Ok(Accepted::Unix(stream)) => {
                let Some(slot) = conns.admit(None) else {
                    tracing::debug!("connection on the socket closed: too many held");
                    continue;
                };
                let uid = stream.peer_cred().ok().map(|c| c.uid());
                let peer = Peer(SocketAddr::from(([0, 0, 0, 0], 0)), uid);
                tokio::spawn(plain(stream, peer, router.clone(), (graceful.watcher(), slot)));
            }
            Err(e) => {
                // Out of descriptors, say: breathe, then go on.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    tracing::info!("stopping: finishing the requests in flight");
    let _ = stop.send(true);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still in flight after {grace:?}; stopping anyway");
    }
}

/// A connection accepted.
enum Accepted {
    Tcp(TcpStream, SocketAddr),
    #[cfg_attr(windows, allow(dead_code))]
    Unix(UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    match listener {
        Listener::Tcp(l) => l.accept().await.map(|(s, a)| Accepted::Tcp(s, a)),
        #[cfg(unix)]
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Accepted::Unix(s)),
        #[cfg(windows)]
        Listener::Unix(never) => match *never {},
    }
}

/// One TCP connection: its TLS handshake when there is TLS, then its
/// requests; counted (its slot) until it ends.
async fn connection(
    stream: TcpStream,
    peer: Peer,
    router: Router,
    tls: Option<Tls>,
    watcher: (Watcher, Slot),
) {
    match tls {
        None => plain(stream, peer, router, watcher).await,
        Some(tls) => {
            if let Some(stream) = tls.accept(stream).await {
                plain(stream, peer, router, watcher).await;
            }
        }
    }
}

/// A connection's requests, each told its peer; its slot is given back
/// when it ends.
async fn plain<S>(stream: S, peer: Peer, router: Router, (watcher, _slot): (Watcher, Slot))
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(peer);
        let mut router = router.clone();
        async move { router.call(req.map(Body::new)).await }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEADER_READ);
    if let Err(e) = watcher
        .watch(http.serve_connection(TokioIo::new(stream), service))
        .await
    {
        tracing::debug!("connection from {}: {e}", peer.0);
    }
}

/// A future that resolves at SIGTERM or SIGINT. The handlers are in place
/// when this returns (it is called before the server says it listens), so
/// a signal sent as soon as a client is answered is never the default
/// one, which would end the process without its drain. Called within the
/// runtime.
#[cfg(windows)]
pub(super) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::windows::{ctrl_break, ctrl_c};
    let brk = ctrl_break().ok();
    let c = ctrl_c().ok();
    async move {
        let brk = async {
            match brk {
                Some(mut s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        let c = async {
            match c {
                Some(mut s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = brk => {}
            _ = c => {}
        }
    }
}

#[cfg(unix)]
pub(super) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    wait_for_signal(term, int)
}

#[cfg(unix)]
async fn wait_for_signal(
    mut term: Option<tokio::signal::unix::Signal>,
    mut int: Option<tokio::signal::unix::Signal>,
) {
    let term = async {
        match &mut term {
            Some(s) => s.recv().await,
            None => std::future::pending().await,
        }
    };
    let int = async {
        match &mut int {
            Some(s) => s.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = int => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::api_routes;
    use crate::serve::api::Verb;

    /// Whether the route `path` (whose `{x}` segments take any one) serves
    /// the documented `doc`; a `{verb}` segment only the verbs the API
    /// takes.
    fn serves(path: &str, doc: &str) -> bool {
        let (route, doc): (Vec<&str>, Vec<&str>) = (path.split('/').collect(), doc.split('/').collect());
        route.len() == doc.len()
            && route.iter().zip(&doc).all(|(r, d)| match *r {
                "{verb}" => Verb::parse(d).is_some(),
                r if r.starts_with('{') => d.starts_with('{'),
                r => r == *d,
            })
    }

    #[test]
    fn the_openapi_document_describes_every_route_and_no_other() {
        let doc: serde_json::Value = serde_json::from_str(include_str!("openapi.json")).unwrap();
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, ops)| {
                let methods = ops.as_object().unwrap().keys();
                methods.map(move |m| (m.to_uppercase(), path.clone()))
            })
            .collect();
        let routes: Vec<(String, &str)> = api_routes()
            .into_iter()
            .map(|(m, path, _)| (m.as_str().to_owned(), path))
            .collect();
        for (method, path) in &documented {
            assert!(
                routes.iter().any(|(m, r)| m == method && serves(r, path)),
                "{method} {path} is documented, and no route serves it"
            );
        }
        for (method, route) in &routes {
            let mut verbs = Verb::ALL.iter().map(|v| route.replace("{verb}", v.as_str()));
            let wanted: Vec<String> = match route.contains("{verb}") {
                true => verbs.by_ref().collect(),
                false => vec![(*route).to_owned()],
            };
            for path in wanted {
                assert!(
                    documented.contains(&(method.clone(), path.clone())),
                    "{method} {path} is served, and the document does not describe it"
                );
            }
        }
    }
}
