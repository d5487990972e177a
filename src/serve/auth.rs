//! Who is asking. A request names its user by one of three means, tried in
//! order: the trusted proxy's header (believed only from the proxy's own
//! address), `Authorization: Bearer TOKEN` (the token's hash looked up
//! among the users), or the session cookie a browser got by signing in
//! with a token once. Sessions live in this process; each is checked
//! against the users on every request, so removing a user or rotating its
//! token ends its sessions at once. Failed sign-ins (a bad token, by form
//! or header) are limited per client address. A form is accepted only
//! with the CSRF token of its session. No token or session id is logged,
//! shown, or kept but as a hash.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::api::ApiError;
use super::server::Peer;
use super::{App, blocking};
use crate::cli::ServeArgs;
use crate::error::Result;
use crate::users::{self, User};
use crate::who::{self, Actor, Via};

/// The session cookie, and the one a sign-in form is checked against.
const SESSION: &str = "automaton_session";
const PRE: &str = "automaton_signin";
/// Failed sign-ins one client address may make in [`WINDOW`].
const FAILURES: u32 = 10;
const WINDOW: Duration = Duration::from_secs(60);

/// The server's sessions, failures, and what it trusts.
pub struct Auth {
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    /// The key CSRF tokens of proxied users are derived with.
    key: [u8; 32],
    ttl: Duration,
    /// Whether cookies are marked `Secure` (the server speaks HTTPS).
    secure: bool,
    proxy: Option<(HeaderName, IpAddr)>,
}

/// A signed-in browser, kept under the hash of its id.
struct Session {
    user: String,
    /// The hash of the token it signed in with: a rotated token ends it.
    token_sha256: String,
    expires: Instant,
    csrf: String,
}

/// The user of a request, and the CSRF token its forms must carry (none
/// for a bearer token, which a browser does not send by itself).
#[derive(Debug, Clone)]
pub struct Who {
    pub actor: Actor,
    pub csrf: Option<String>,
}

impl Who {
    /// Whether `given` is this user's CSRF token (always, for a bearer).
    pub fn csrf_ok(&self, given: Option<&str>) -> bool {
        match (&self.csrf, given) {
            (None, _) => true,
            (Some(want), Some(got)) => users::same(want.as_bytes(), got.as_bytes()),
            (Some(_), None) => false,
        }
    }
}

impl Auth {
    pub fn new(args: &ServeArgs, secure: bool) -> Result<Auth> {
        let key = users::random()?;
        // The command line checked the name.
        let proxy = match (&args.trust_header, args.trusted_proxy) {
            (Some(h), Some(addr)) => HeaderName::try_from(h.as_str()).ok().map(|h| (h, addr)),
            _ => None,
        };
        Ok(Auth {
            sessions: Mutex::default(),
            failures: Mutex::default(),
            key,
            ttl: args.session,
            secure,
            proxy,
        })
    }

    /// Whether `ip` has failed to sign in too often lately.
    fn limited(&self, ip: IpAddr) -> bool {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        f.retain(|_, (_, since)| now.duration_since(*since) < WINDOW);
        f.get(&ip).is_some_and(|(n, _)| *n >= FAILURES)
    }

    fn failed(&self, ip: IpAddr) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let entry = f.entry(ip).or_insert((0, Instant::now()));
        entry.0 += 1;
        tracing::info!("a failed sign-in from {ip} ({} in the last minute)", entry.0);
    }

    /// The CSRF token of a user a proxy names: derived, so it needs no
    /// session.
    fn proxy_csrf(&self, user: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(b"csrf\0");
        mac.update(user.as_bytes());
        users::hex(&mac.finalize().into_bytes())
    }

    /// Opens a session for `user`; returns its id (for the cookie).
    fn open(&self, user: &User) -> Result<String> {
        let id = users::new_token()?;
        let session = Session {
            user: user.name.clone(),
            token_sha256: user.token_sha256.clone(),
            expires: Instant::now() + self.ttl,
            csrf: users::new_token()?,
        };
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        all.retain(|_, s| s.expires > now);
        all.insert(users::hash(&id), session);
        Ok(id)
    }

    fn close(&self, id: &str) {
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        all.remove(&users::hash(id));
    }

    /// The live session `id` names: its user, token hash and CSRF token.
    fn session(&self, id: &str) -> Option<(String, String, String)> {
        let all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let s = all.get(&users::hash(id)).filter(|s| s.expires > Instant::now())?;
        Some((s.user.clone(), s.token_sha256.clone(), s.csrf.clone()))
    }

    /// `Set-Cookie` for a session id (or, with `None`, its removal).
    fn cookie(&self, name: &str, value: Option<&str>, max_age: Duration) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        match value {
            Some(v) => format!(
                "{name}={v}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
                max_age.as_secs()
            ),
            None => format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
        }
    }
}

/// Why a request has no user.
#[derive(Debug)]
pub enum NoUser {
    /// Nothing names one.
    Missing,
    /// A token, or a session, that signs no one in.
    Bad,
    /// Too many failed sign-ins from this address.
    Limited,
    /// The users could not be read.
    Failed(crate::Error),
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Who the request comes from: see the module's header for the order.
pub async fn identify(app: &Arc<App>, parts: &Parts) -> std::result::Result<Who, NoUser> {
    let peer = parts.extensions.get::<Peer>().map(|p| p.0.ip());
    let auth = &app.auth;
    if let (Some((header, proxy)), Some(ip)) = (&auth.proxy, peer)
        && let Some(name) = parts.headers.get(header).and_then(|v| v.to_str().ok())
    {
        let name = name.trim();
        if ip == *proxy && users::check_name(name).is_ok() {
            return Ok(Who {
                actor: who::served(name, Via::Proxy),
                csrf: Some(auth.proxy_csrf(name)),
            });
        }
        tracing::debug!("passed over {header} from {ip}, which is not the trusted proxy");
    }
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.strip_prefix("Bearer ").unwrap_or("").trim().to_owned());
    if let Some(token) = bearer {
        let ip = peer.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        if auth.limited(ip) {
            return Err(NoUser::Limited);
        }
        let users = read_users(app).await?;
        return match users::find(&users, &token) {
            Some(u) => Ok(Who {
                actor: who::served(&u.name, Via::Token),
                csrf: None,
            }),
            None => {
                auth.failed(ip);
                Err(NoUser::Bad)
            }
        };
    }
    let Some(id) = cookie(&parts.headers, SESSION) else {
        return Err(NoUser::Missing);
    };
    let (user, hash, csrf) = auth.session(id).ok_or(NoUser::Bad)?;
    let users = read_users(app).await?;
    // A user removed, or its token rotated, since: the session is over.
    if !users.iter().any(|u| u.name == user && u.token_sha256 == hash) {
        auth.close(id);
        return Err(NoUser::Bad);
    }
    Ok(Who {
        actor: who::served(&user, Via::Token),
        csrf: Some(csrf),
    })
}

async fn read_users(app: &Arc<App>) -> std::result::Result<Vec<User>, NoUser> {
    let stores = app.stores.clone();
    blocking(None, move || stores.users())
        .await
        .map_err(NoUser::Failed)
}

/// The user of an API request; refused with a JSON error.
pub struct ApiUser(pub Who);

impl FromRequestParts<Arc<App>> for ApiUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> std::result::Result<Self, ApiError> {
        identify(app, parts).await.map(ApiUser).map_err(|e| match e {
            NoUser::Missing => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "send `Authorization: Bearer TOKEN` (`automaton user add NAME` makes one)",
            ),
            NoUser::Bad => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "that token or session signs no one in",
            ),
            NoUser::Limited => limited(),
            NoUser::Failed(e) => ApiError::from(e),
        })
    }
}

fn limited() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_failures",
        "too many failed sign-ins from this address; try again in a minute",
    )
}

/// The user of a page; one who is not signed in is sent to sign in.
pub struct PageUser(pub Who);

impl FromRequestParts<Arc<App>> for PageUser {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> std::result::Result<Self, Response> {
        match identify(app, parts).await {
            Ok(who) => Ok(PageUser(who)),
            Err(NoUser::Limited) => Err(limited().into_response()),
            Err(NoUser::Failed(e)) => Err(ApiError::from(e).into_response()),
            Err(NoUser::Missing | NoUser::Bad) => Err(Redirect::to("/signin").into_response()),
        }
    }
}

/// The sign-in form, with a fresh value in its cookie and its field that
/// the post must carry both of.
pub async fn signin_page(State(app): State<Arc<App>>) -> Response {
    signin_form(&app, StatusCode::OK, None)
}

fn signin_form(app: &App, status: StatusCode, error: Option<&str>) -> Response {
    let Ok(value) = users::new_token() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let cookie = app.auth.cookie(PRE, Some(&value), Duration::from_secs(600));
    let page = super::pages::signin(&value, error);
    (status, [(header::SET_COOKIE, cookie)], page).into_response()
}

#[derive(serde::Deserialize)]
pub struct SigninForm {
    token: String,
    csrf: String,
}

pub async fn signin(
    State(app): State<Arc<App>>,
    peer: Option<axum::Extension<Peer>>,
    headers: HeaderMap,
    form: std::result::Result<axum::Form<SigninForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let ip = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0.0.ip());
    let Ok(axum::Form(form)) = form else {
        return signin_form(
            &app,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("the form was not filled in"),
        );
    };
    let pre = cookie(&headers, PRE).unwrap_or("");
    if pre.is_empty() || !users::same(pre.as_bytes(), form.csrf.as_bytes()) {
        return signin_form(
            &app,
            StatusCode::FORBIDDEN,
            Some("the form expired; sign in again"),
        );
    }
    if app.auth.limited(ip) {
        return limited().into_response();
    }
    let stores = app.stores.clone();
    let found = match blocking(None, move || stores.users()).await {
        Ok(all) => users::find(&all, form.token.trim()).cloned(),
        Err(e) => return ApiError::from(e).into_response(),
    };
    let Some(user) = found else {
        app.auth.failed(ip);
        return signin_form(&app, StatusCode::UNAUTHORIZED, Some("that token signs no one in"));
    };
    let Ok(id) = app.auth.open(&user) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    tracing::info!("{} signed in from {ip}", user.name);
    let set = app.auth.cookie(SESSION, Some(&id), app.auth.ttl);
    let clear = app.auth.cookie(PRE, None, Duration::ZERO);
    let mut response = Redirect::to("/").into_response();
    for c in [set, clear] {
        if let Ok(v) = c.parse() {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

#[derive(serde::Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: Option<String>,
}

pub async fn signout(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    headers: HeaderMap,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if !who.csrf_ok(form.csrf.as_deref()) {
        return (
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong\n",
        )
            .into_response();
    }
    if let Some(id) = cookie(&headers, SESSION) {
        app.auth.close(id);
    }
    let clear = app.auth.cookie(SESSION, None, Duration::ZERO);
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, clear),
            (header::LOCATION, "/signin".to_owned()),
        ],
    )
        .into_response()
}
