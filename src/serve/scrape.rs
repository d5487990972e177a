//! `GET /metrics` (docs/metrics.md): the root's figures for Prometheus,
//! answered to a signed-in user (the loops they may view), to a scraper
//! that sends automaton.toml's scrape token, or to anyone when
//! `[metrics] anonymous = true` (every loop). The figures are read by
//! [`crate::exposition`] on a blocking thread.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::api::{ApiError, reader};
use super::auth::ApiUser;
use super::{App, blocking};
use crate::exposition::{self, Format};

/// `GET /metrics`: the Prometheus text format, or OpenMetrics when the
/// `Accept` header asks for it.
pub(super) async fn metrics(State(app): State<Arc<App>>, req: Request) -> Result<Response, ApiError> {
    let (mut parts, _) = req.into_parts();
    let value = |name| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let format = Format::from_accept(value(header::ACCEPT).as_deref());
    let scrape = &app.root.settings().metrics;
    let actor = match scrape.anonymous || scrape.token_matches(value(header::AUTHORIZATION).as_deref()) {
        // A scraper the root trusts reads every loop, as the server's own
        // user does.
        true => app.stores.me().clone(),
        false => ApiUser::from_request_parts(&mut parts, &app)
            .await?
            .0
            .actor
            .clone(),
    };
    let body =
        blocking(move || exposition::render(&reader(&app, &actor), &app.metrics, None, format)).await?;
    Ok(([(header::CONTENT_TYPE, format.content_type())], body).into_response())
}
