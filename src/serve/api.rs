//! The JSON API (docs/api.md, `/api/openapi.json`): each endpoint runs the
//! library function of its CLI command with `--json`, as the signed-in
//! user, and answers with what the command prints. Errors are
//! `{code, message}` with the status that says what went wrong; a request
//! refused before the command runs (no user, a bad body, a missing CSRF
//! token) writes nothing, and one the roles refuse is recorded as the
//! command line records it.

use std::io::Write;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::auth::{ApiUser, Who};
use super::{App, blocking};
use crate::access::{self, Access, Action, Denied};
use crate::cli::{
    ApproveArgs, CancelArgs, HistoryArgs, JsonArg, LogsArgs, LoopArgs, PauseArgs, RejectArgs, ResumeArgs,
    ReviewArgs, WaitArgs,
};
use crate::commands::{approve, cancel, history, logs, ops, review, status};
use crate::error::{Class, Error, Exit, Result};
use crate::root::Root;
use crate::store::LoopStore;
use crate::who::Actor;

/// An error as the API answers it.
#[derive(Debug)]
pub struct ApiError {
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
    pub fn new(status: StatusCode, code: &'static str, message: &str) -> ApiError {
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

/// `text` with each absolute path (a word that starts with `/`) cut to
/// its last part.
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
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || ")\"'`,;".contains(c))
            .map_or(rest.len(), |n| at + n);
        let path = rest[at..end].trim_end_matches(['.', ':']);
        out.push_str(path.rsplit('/').find(|p| !p.is_empty()).unwrap_or("/"));
        rest = &rest[at + path.len()..];
    }
    out.push_str(rest);
    out
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

/// What a command printed, as a JSON response.
fn json(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// Runs a command with its output captured.
pub fn capture(run: impl FnOnce(&mut dyn Write) -> Result<Exit>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    run(&mut out)?;
    Ok(out)
}

/// `--json`, on.
fn on() -> JsonArg {
    JsonArg { json: true }
}

/// Refuses `actor` a loop it may not see (its `viewers`); a reading
/// refused is not recorded, as reading writes nothing.
pub fn may_view(app: &App, actor: &Actor, name: &str) -> Result<()> {
    let dir = app.stores.get(name)?;
    may_see(actor, &view_rules(&app.root, dir.as_ref())).map_err(|d| Error::NotAllowed {
        name: name.to_owned(),
        command: "view",
        user: actor.user.clone(),
        role: d.role.as_str(),
        holders: d.holders,
        record: Box::new(crate::access::Record::Unasked),
    })
}

/// The lists that say who may see loop `dir`: its own over the root's,
/// the root's alone when its loop.toml does not load.
pub fn view_rules(root: &Root, dir: &dyn LoopStore) -> Access {
    access::rules(dir, &root.settings().access)
}

/// Whether `actor` may see a loop under `rules`: the one rule the API,
/// the pages and the live feed apply.
pub fn may_see(actor: &Actor, rules: &Access) -> std::result::Result<(), Denied> {
    access::check(actor, Action::View, rules)
}

/// Whether `actor` may see a listed loop.
pub fn sees(app: &App, actor: &Actor, listed: &status::Listed<'_>) -> bool {
    let defaults = &app.root.settings().access;
    let rules = match listed {
        status::Listed::Loop(v) => v
            .access
            .as_ref()
            .map_or_else(|| defaults.clone(), |a| a.over(defaults)),
        status::Listed::Unreadable { .. } => defaults.clone(),
    };
    may_see(actor, &rules).is_ok()
}

pub async fn openapi() -> Response {
    json(include_str!("openapi.json").as_bytes().to_vec())
}

/// `GET /api/loops`: `list --json`, the loops the user may see.
pub async fn list(State(app): State<Arc<App>>, ApiUser(who): ApiUser) -> Result<Response, ApiError> {
    let actor = who.actor.clone();
    let body = blocking(Some(who.actor), move || {
        let mut reading = status::read(&*app.stores)?;
        let listed: Vec<_> = reading
            .listing()
            .into_iter()
            .filter(|l| sees(&app, &actor, l))
            .collect();
        let mut text = serde_json::to_vec_pretty(&listed).expect("output serialises");
        text.push(b'\n');
        Ok(text)
    })
    .await?;
    Ok(json(body))
}

/// Runs `read` for loop `name` as `who`, once they may see it.
async fn read(
    app: Arc<App>,
    who: Who,
    name: String,
    read: impl FnOnce(&App, &str, &mut dyn Write) -> Result<Exit> + Send + 'static,
) -> Result<Response, ApiError> {
    let actor = who.actor.clone();
    let body = blocking(Some(who.actor), move || {
        may_view(&app, &actor, &name)?;
        capture(|out| read(&app, &name, out))
    })
    .await?;
    Ok(json(body))
}

/// `GET /api/loops/NAME`: `status NAME --json`.
pub async fn one(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    read(app, who, name, |app, name, out| {
        status::one(&app.root, &app.stores, name, true, out)
    })
    .await
}

#[derive(Deserialize)]
pub struct HistoryQuery {
    limit: Option<usize>,
}

/// `GET /api/loops/NAME/history[?limit=N]`: `history NAME --json`.
pub async fn history(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path(name): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Response, ApiError> {
    read(app, who, name, move |app, name, out| {
        let args = HistoryArgs {
            name: name.to_owned(),
            limit: q.limit,
            json: on(),
        };
        history::run(&app.stores, &args, out)
    })
    .await
}

#[derive(Deserialize)]
pub struct ReviewQuery {
    #[serde(default)]
    diff: bool,
}

/// `GET /api/loops/NAME/review[?diff=true]`: `review NAME --json`.
pub async fn review(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path(name): Path<String>,
    Query(q): Query<ReviewQuery>,
) -> Result<Response, ApiError> {
    read(app, who, name, move |app, name, out| {
        let args = ReviewArgs {
            name: name.to_owned(),
            diff: q.diff,
            json: on(),
        };
        review::run(&app.root, &app.stores, &args, out)
    })
    .await
}

#[derive(Deserialize)]
pub struct LogsQuery {
    #[serde(default)]
    stderr: bool,
    #[serde(default)]
    verifier: bool,
}

/// `GET /api/loops/NAME/runs/N/logs[?stderr=true][&verifier=true]`: what
/// `logs NAME N` prints, as text.
pub async fn logs(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path((name, tick)): Path<(String, String)>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let tick: u64 = tick
        .parse()
        .map_err(|_| ApiError::new(StatusCode::NOT_FOUND, "no_such_tick", "a tick is a number"))?;
    let actor = who.actor.clone();
    let body = blocking(Some(who.actor), move || {
        may_view(&app, &actor, &name)?;
        capture(|out| logs::run(&app.stores, &log_args(&name, tick, q.stderr, q.verifier), out))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}

pub fn log_args(name: &str, tick: u64, stderr: bool, verifier: bool) -> LogsArgs {
    LogsArgs {
        name: name.to_owned(),
        tick: Some(tick),
        stderr,
        verifier,
        follow: false,
        gates: false,
    }
}

/// What a change may say: each verb takes some of these.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub note: Option<String>,
    pub reason: Option<String>,
    #[serde(rename = "await")]
    pub await_id: Option<String>,
    pub reset_budget: Option<bool>,
}

/// A change to a loop, by its verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Approve,
    Reject,
    Pause,
    Resume,
    Cancel,
}

impl Verb {
    pub fn parse(s: &str) -> Option<Verb> {
        Some(match s {
            "approve" => Verb::Approve,
            "reject" => Verb::Reject,
            "pause" => Verb::Pause,
            "resume" => Verb::Resume,
            "cancel" => Verb::Cancel,
            _ => return None,
        })
    }

    /// The fields of [`Change`] it takes.
    fn takes(self, c: &Change) -> std::result::Result<(), &'static str> {
        let (note, reason, awaited, reset) = match self {
            Verb::Approve => (true, false, true, false),
            Verb::Reject => (false, true, true, false),
            Verb::Pause => (false, true, false, false),
            Verb::Resume => (false, false, false, true),
            Verb::Cancel => (false, false, false, false),
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

/// Runs `verb` on loop `name` with `change`, as the command line would
/// (the caller has made this thread the user's); returns its `--json`.
pub fn apply(app: &App, verb: Verb, name: &str, change: Change) -> Result<Vec<u8>> {
    let target = LoopArgs {
        name: name.to_owned(),
        wait: WaitArgs {
            timeout: Some(app.lock_wait),
            no_wait: false,
        },
        json: on(),
    };
    let (root, stores) = (&app.root, &app.stores);
    capture(|out| match verb {
        Verb::Approve => {
            let args = ApproveArgs {
                target,
                note: change.note,
                ahead: false,
                await_id: change.await_id,
                run: false,
            };
            approve::run(root, stores, &args, out)
        }
        Verb::Reject => {
            let args = RejectArgs {
                target,
                reason: change.reason,
                await_id: change.await_id,
                halt: false,
            };
            ops::reject(root, stores, &args, out)
        }
        Verb::Pause => ops::pause(
            root,
            stores,
            &PauseArgs {
                target,
                reason: change.reason,
            },
            out,
        ),
        Verb::Resume => {
            let args = ResumeArgs {
                target,
                reset_budget: change.reset_budget.unwrap_or(false),
            };
            ops::resume(root, stores, &args, out)
        }
        Verb::Cancel => {
            let args = CancelArgs {
                name: name.to_owned(),
                grace: app.lock_wait / 3,
                timeout: Some(app.lock_wait),
                json: on(),
            };
            cancel::run(root, stores, &args, out)
        }
    })
}

/// `POST /api/loops/NAME/VERB` with a JSON body (or none).
pub async fn change(
    State(app): State<Arc<App>>,
    ApiUser(who): ApiUser,
    Path((name, verb)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Body,
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
    let change = parse_body(&headers, read_body(&headers, body).await?, verb)?;
    let body = blocking(Some(who.actor), move || apply(&app, verb, &name, change)).await?;
    Ok(json(body))
}

/// A request's body, up to [`super::BODY_LIMIT`] bytes: one that says it
/// is longer is refused before any of it is read.
async fn read_body(headers: &HeaderMap, body: axum::body::Body) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            &format!("the body is larger than {} bytes", super::BODY_LIMIT),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > super::BODY_LIMIT as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, super::BODY_LIMIT).await.map_err(|e| {
        match std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) {
            true => too_large(),
            false => ApiError::new(StatusCode::BAD_REQUEST, "bad_body", &e.to_string()),
        }
    })
}

/// The body of a change: none, or a JSON object of the fields its verb takes.
fn parse_body(headers: &HeaderMap, body: Bytes, verb: Verb) -> Result<Change, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Change::default());
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not_json",
            "send the body as Content-Type: application/json",
        ));
    }
    let change: Change = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", &e.to_string()))?;
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
    }
}
