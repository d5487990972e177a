//! Sockets and connections: the accept loop, each connection served by
//! hyper with a bound on reading its headers (a client that sends half a
//! request holds only its own connection, and not for long), the one
//! `Router` with its layers (a time bound on every request but the live
//! stream, a bound on bodies, headers that keep pages to themselves), and
//! the drain on SIGTERM or SIGINT: stop accepting, let requests in flight
//! finish within the grace, end the live streams, return.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tower_service::Service;

use super::tls::Tls;
use super::{App, BODY_LIMIT, api, auth, live, pages};

/// How long a client has to send a request's headers.
const HEADER_READ: Duration = Duration::from_secs(10);

/// The peer of a request's connection.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Every route, in one place.
pub fn router(app: Arc<App>, timeout: Duration) -> Router {
    let bounded = Router::new()
        .route("/healthz", get(healthz))
        .route("/api/openapi.json", get(api::openapi))
        .route("/api/loops", get(api::list))
        .route("/api/loops/{name}", get(api::one))
        .route("/api/loops/{name}/history", get(api::history))
        .route("/api/loops/{name}/review", get(api::review))
        .route("/api/loops/{name}/runs/{tick}/logs", get(api::logs))
        .route("/api/loops/{name}/{verb}", post(api::change))
        .route("/", get(pages::list))
        .route("/loops/{name}", get(pages::one))
        .route("/loops/{name}/review", get(pages::review))
        .route("/loops/{name}/runs/{tick}", get(pages::run))
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

/// Accepts connections until `stop` fires (SIGTERM, SIGINT), then drains:
/// requests in flight finish (within `grace`), the live streams end.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Tls>,
    grace: Duration,
    stop: tokio::sync::watch::Sender<bool>,
) {
    let graceful = GracefulShutdown::new();
    let mut signal = std::pin::pin!(shutdown_signal());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, say: breathe, then go on.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut signal => break,
        };
        tokio::spawn(connection(
            stream,
            peer,
            router.clone(),
            tls.clone(),
            graceful.watcher(),
        ));
    }
    drop(listener);
    tracing::info!("stopping: finishing the requests in flight");
    let _ = stop.send(true);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still in flight after {grace:?}; stopping anyway");
    }
}

/// One connection: its TLS handshake when there is TLS, then its requests.
async fn connection(stream: TcpStream, peer: SocketAddr, router: Router, tls: Option<Tls>, watcher: Watcher) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(Peer(peer));
        let mut router = router.clone();
        async move { router.call(req.map(Body::new)).await }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEADER_READ);
    let served = match tls {
        None => {
            watcher
                .watch(http.serve_connection(TokioIo::new(stream), service))
                .await
        }
        Some(tls) => {
            let Some(stream) = tls.accept(stream).await else {
                return;
            };
            watcher
                .watch(http.serve_connection(TokioIo::new(stream), service))
                .await
        }
    };
    if let Err(e) = served {
        tracing::debug!("connection from {peer}: {e}");
    }
}

/// Resolves at SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
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
