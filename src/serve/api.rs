//! The JSON API (docs/api.md, `/api/openapi.json`): a change calls the
//! core ([`crate::ops`]) for the signed-in user and answers its outcome,
//! and a read answers the core's typed view ([`crate::ops::views`]) for
//! that user, each as the CLI's `--json` prints it. Errors are
//! `{code, message}` with the status that says what went wrong; a request
//! refused before the command runs (no user, a bad body, a missing CSRF
//! token) writes nothing, and one the roles refuse is recorded as the
//! command line records it.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::auth::ApiUser;
use super::{App, blocking};
use crate::error::{Class, Error, Result};
use crate::lock::Wait;
use crate::ops::views;
use crate::ops::views::history::History;
use crate::ops::views::review::Review;
use crate::ops::views::status::{Listed, LoopView};
use crate::ops::{self, Ctx};
use crate::who::Actor;

/// An error as the API answers it.
#[derive(Debug)]
pub(super) struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &'static str, message: &str) -> ApiError {
        ApiError {
            status,
            code,
            message: message.to_owned(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code,
            message: &self.message,
        };
        let text = serde_json::to_vec(&body).expect("errors serialise");
        (self.status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let (status, code) = classify(&e);
        if status.is_server_error() {
            tracing::warn!("{}", crate::error::with_causes(&e));
        }
        ApiError {
            status,
            code,
            message: public_message(&e),
        }
    }
}

/// What a client is told of a library error: never a path of the
/// server's, only a file's name (the log has the whole error).
fn public_message(e: &Error) -> String {
    match e {
        Error::Hinted { error, .. } => public_message(error),
        Error::NoSuchLoop { name, .. } => format!("no loop named {name:?}"),
        _ => without_paths(&crate::error::with_causes(e)),
    }
}

/// `text` with each absolute path (from a `/` that starts a word) cut to
/// its last part. A path runs to a `: `, a line's end, a closing mark or
/// the next path (` /`), not to the first space: a server path with a
/// space in it loses every part but its last.
fn without_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('/') {
        out.push_str(&rest[..at]);
        let starts_word = out
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "(\"'`=".contains(c));
        if !starts_word {
            out.push('/');
            rest = &rest[at + 1..];
            continue;
        }
        let end = path_end(&rest[at..]).map_or(rest.len(), |n| at + n);
        let path = rest[at..end].trim_end_matches(['.', ':']);
        out.push_str(path.rsplit('/').find(|p| !p.is_empty()).unwrap_or("/"));
        rest = &rest[at + path.len()..];
    }
    out.push_str(rest);
    out
}

/// Where the path that starts `text` ends, if before `text` does.
fn path_end(text: &str) -> Option<usize> {
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|(_, n)| *n);
        let ends = match c {
            '\n' | '\r' | ')' | '"' | '\'' | '`' | ',' | ';' => true,
            ':' => next.is_none_or(char::is_whitespace),
            c if c.is_whitespace() => next.is_none_or(|n| n == '/' || n.is_whitespace()),
            _ => false,
        };
        if ends {
            return Some(i);
        }
    }
    None
}

/// The status and code of a library error.
fn classify(e: &Error) -> (StatusCode, &'static str) {
    match e {
        Error::Hinted { error, .. } => classify(error),
        Error::NoSuchLoop { .. } | Error::InvalidName { .. } => (StatusCode::NOT_FOUND, "no_such_loop"),
        Error::NoOutput { .. } => (StatusCode::NOT_FOUND, "no_output"),
        Error::NotAllowed { .. } => (StatusCode::FORBIDDEN, "forbidden"),
        Error::Refused { .. } => (StatusCode::CONFLICT, "refused"),
        Error::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
        Error::LockNotObtained { .. } => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
        e if e.class() == Class::InvalidState => (StatusCode::INTERNAL_SERVER_ERROR, "invalid_state"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// A JSON request body: axum's `Json` extractor (the body buffered up to
/// the router's limit, its `Content-Type` checked, its fields read), whose
/// rejection is the API's own error.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(super) struct JsonBody<T>(pub T);

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        match r {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "not_json",
                "send the body as Content-Type: application/json",
            ),
            JsonRejection::JsonDataError(_) | JsonRejection::JsonSyntaxError(_) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", &r.body_text())
            }
            r if r.status() == StatusCode::PAYLOAD_TOO_LARGE => too_large(),
            r => ApiError::new(StatusCode::BAD_REQUEST, "bad_body", &r.body_text()),
        }
    }
}

/// A body past [`super::BODY_LIMIT`], refused.
fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        &format!("the body is larger than {} bytes", super::BODY_LIMIT),
    )
}

/// A view as a JSON response, printed as the command line's `--json`
/// prints it.
pub(super) struct Json<T>(pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        let mut text = serde_json::to_vec_pretty(&self.0).expect("views serialise");
        text.push(b'\n');
        json(text)
    }
}

/// The context a view is read in for `actor`: the server's root and store.
pub(super) fn reader<'a>(app: &'a App, actor: &Actor) -> Ctx<'a> {
    Ctx::new(&app.root, &app.stores, actor.clone())
}

/// What a command printed, as a JSON response.
fn json(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// Refuses `actor` a loop it may not see (its `viewers`); a reading
/// refused is not recorded, as reading writes nothing.
pub(super) fn may_view(app: &App, actor: &Actor, name: &str) -> Result<()> {
    let dir = app.stores.get(name)?;
    views::may_view(&reader(app, actor), dir.as_ref())
}

pub(super) use crate::ops::views::{may_see, rules as view_rules};

pub(super) async fn openapi() -> Response {
    json(include_str!("openapi.json").as_bytes().to_vec())
}

/// `GET /api/loops`: `list --json`, the loops the user may see.
pub(super) async fn list(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
) -> Result<Json<Vec<Listed>>, ApiError> {
    let actor = who.actor.clone();
    let listing = blocking(move || views::status::list(&reader(&app, &actor))).await?;
    Ok(Json(listing.loops))
}

/// `GET /api/loops/NAME`: `status NAME --json`.
pub(super) async fn one(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path(name): Path<String>,
) -> Result<Json<LoopView>, ApiError> {
    let actor = who.actor.clone();
    let view = blocking(move || views::status::status(&reader(&app, &actor), &name)).await?;
    Ok(Json(view))
}

#[derive(Deserialize)]
pub(super) struct HistoryQuery {
    limit: Option<usize>,
}

/// How many events `GET /api/loops/NAME/history` answers without a
/// `limit`: the last ones.
pub(super) const HISTORY_DEFAULT: usize = 1_000;

/// The most events one answer holds, whatever `limit` asks.
pub(super) const HISTORY_MAX: usize = 10_000;

/// `GET /api/loops/NAME/history[?limit=N]`: `history NAME --json`, its
/// last [`HISTORY_DEFAULT`] events unless `limit` asks for others (at
/// most [`HISTORY_MAX`]).
pub(super) async fn history(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path(name): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<History>, ApiError> {
    let actor = who.actor.clone();
    let limit = q.limit.unwrap_or(HISTORY_DEFAULT).min(HISTORY_MAX);
    let view = blocking(move || views::history::history(&reader(&app, &actor), &name, Some(limit))).await?;
    Ok(Json(view))
}

#[derive(Deserialize)]
pub(super) struct ReviewQuery {
    #[serde(default)]
    diff: bool,
}

/// `GET /api/loops/NAME/review[?diff=true]`: `review NAME --json`.
pub(super) async fn review(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path(name): Path<String>,
    Query(q): Query<ReviewQuery>,
) -> Result<Json<Review>, ApiError> {
    let actor = who.actor.clone();
    let view = blocking(move || views::review::review(&reader(&app, &actor), &name, q.diff)).await?;
    Ok(Json(view))
}

#[derive(Deserialize)]
pub(super) struct LogsQuery {
    #[serde(default)]
    stderr: bool,
    #[serde(default)]
    verifier: bool,
}

/// `GET /api/loops/NAME/runs/N/logs[?stderr=true][&verifier=true]`: what
/// `logs NAME N` prints, as text: at most [`views::logs::MAX_OUTPUT`]
/// bytes, then `[truncated, N bytes more]`.
pub(super) async fn logs(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path((name, tick)): Path<(String, String)>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let tick: u64 = tick
        .parse()
        .map_err(|_| ApiError::new(StatusCode::NOT_FOUND, "no_such_tick", "a tick is a number"))?;
    let actor = who.actor.clone();
    let output = blocking(move || {
        let req = views::logs::Request {
            tick: Some(tick),
            verifier: q.verifier,
            stderr: q.stderr,
        };
        views::logs::logs(&reader(&app, &actor), &name, req)?.bounded(views::logs::MAX_OUTPUT)
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], output).into_response())
}

/// What a change may say: each verb takes some of these.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Change {
    pub note: Option<String>,
    pub reason: Option<String>,
    #[serde(rename = "await")]
    pub await_id: Option<String>,
    pub reset_budget: Option<bool>,
}

/// A change to a loop, by its verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Approve,
    Reject,
    Pause,
    Resume,
    Cancel,
}

impl Verb {
    /// Every verb the API takes.
    pub(super) const ALL: [Verb; 5] = [
        Verb::Approve,
        Verb::Reject,
        Verb::Pause,
        Verb::Resume,
        Verb::Cancel,
    ];

    /// The verb as a path names it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Verb::Approve => "approve",
            Verb::Reject => "reject",
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Cancel => "cancel",
        }
    }

    pub(super) fn parse(s: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The fields of [`Change`] it takes.
    fn takes(self, c: &Change) -> std::result::Result<(), &'static str> {
        let (note, reason, awaited, reset) = match self {
            Verb::Approve => (true, false, true, false),
            Verb::Reject => (false, true, true, false),
            Verb::Pause => (false, true, false, false),
            Verb::Resume => (false, false, false, true),
            Verb::Cancel => (false, true, false, false),
        };
        let given = [
            ("note", c.note.is_some(), note),
            ("reason", c.reason.is_some(), reason),
            ("await", c.await_id.is_some(), awaited),
            ("reset_budget", c.reset_budget.is_some(), reset),
        ];
        match given.iter().find(|(_, set, ok)| *set && !ok) {
            Some((field, _, _)) => Err(field),
            None => Ok(()),
        }
    }
}

/// An outcome as the API answers it: the `--json` the CLI prints.
fn answer(outcome: &impl Serialize) -> Vec<u8> {
    let mut text = serde_json::to_vec_pretty(outcome).expect("outcomes serialise");
    text.push(b'\n');
    text
}

/// Runs `verb` on loop `name` with `change`, acting for `actor`, through
/// the core; returns its outcome as the CLI's `--json` says it.
pub(super) fn apply(app: &App, actor: Actor, verb: Verb, name: &str, change: Change) -> Result<Vec<u8>> {
    let ctx = Ctx::new(&app.root, &app.stores, actor).limiting(&app.refusals);
    let wait = Wait::For(app.lock_wait);
    let name = name.to_owned();
    Ok(match verb {
        Verb::Pause => {
            let req = ops::pause::Pause {
                name,
                reason: change.reason,
                wait,
            };
            answer(&ops::pause::pause(&ctx, req, &mut |_| Ok(()))?)
        }
        Verb::Resume => {
            let req = ops::resume::Resume {
                name,
                reset_budget: change.reset_budget.unwrap_or(false),
                wait,
            };
            answer(&ops::resume::resume(&ctx, req, &mut |_| Ok(()))?)
        }
        Verb::Reject => {
            let req = ops::reject::Reject {
                name,
                reason: change.reason,
                await_id: change.await_id,
                halt: false,
                wait,
            };
            answer(&ops::reject::reject(&ctx, req, &mut |_| Ok(()))?)
        }
        Verb::Approve => {
            let req = ops::approve::Approve {
                name,
                note: change.note,
                ahead: false,
                await_id: change.await_id,
                then_tick: false,
                wait,
            };
            answer(&ops::approve::approve(&ctx, req, &mut |_| Ok(()))?)
        }
        Verb::Cancel => {
            let req = ops::cancel::Cancel {
                name,
                reason: change.reason,
                grace: app.lock_wait / 3,
                timeout: Some(app.lock_wait),
            };
            answer(&ops::cancel::cancel(&ctx, req, &mut |_| Ok(()))?)
        }
    })
}

/// `POST /api/loops/NAME/VERB` with a JSON body (or none).
pub(super) async fn change(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path((name, verb)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<JsonBody<Change>, ApiError>,
) -> Result<Response, ApiError> {
    let verb = Verb::parse(&verb)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint"))?;
    let given = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
    if !who.csrf_ok(given) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "a request signed in by cookie must carry its X-CSRF-Token",
        ));
    }
    let change = match body {
        Ok(JsonBody(change)) => checked(verb, change)?,
        Err(_) if no_body(&headers) => Change::default(),
        Err(e) => return Err(e),
    };
    let body = blocking(move || apply(&app, who.actor, verb, &name, change)).await?;
    Ok(json(body))
}

/// Refuses a request whose body says it is longer than
/// [`super::BODY_LIMIT`] before any of it is read (a body extractor would
/// wait for bytes a client never sends).
pub(super) async fn refuse_declared_too_large(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > super::BODY_LIMIT as u64) {
        return too_large().into_response();
    }
    next.run(req).await
}

/// Whether the request carries no body: a change may come with none.
fn no_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match length {
        Some(n) => n == 0,
        None => !headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// A verb's body: its fields, each of which it must take.
fn checked(verb: Verb, change: Change) -> Result<Change, ApiError> {
    verb.takes(&change).map_err(|field| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            &format!("`{field}` is not a field this request takes"),
        )
    })?;
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::without_paths;

    #[test]
    fn a_message_keeps_file_names_and_loses_the_servers_paths() {
        assert_eq!(
            without_paths("invalid state in /srv/root/loops/demo/.state.loop: not JSON"),
            "invalid state in .state.loop: not JSON"
        );
        assert_eq!(
            without_paths("reading \"/srv/root/users.json\" (see /x/y.)"),
            "reading \"users.json\" (see y.)"
        );
        assert_eq!(
            without_paths("a/b and http://h/p stay"),
            "a/b and http://h/p stay"
        );
        assert_eq!(
            without_paths("cannot open /srv/my root/loops/demo/.state.loop: denied"),
            "cannot open .state.loop: denied"
        );
        assert_eq!(
            without_paths("renaming /srv/my root/a to /srv/my root/b"),
            "renaming a to b"
        );
    }
}
