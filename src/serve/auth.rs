//! Who is asking. A request names its user by one of three means, tried in
//! order: the trusted proxy's header (believed only from the proxy: from
//! its address, from its uid on a Unix socket, and with its shared secret,
//! as many of the three as the server was told), `Authorization: Bearer
//! TOKEN` (the token's hash looked up
//! among the users), or the session cookie a browser got by signing in
//! with a token once. Sessions live in this process; each is checked
//! against the users on every request, so removing a user or rotating its
//! token ends its sessions at once. Failed sign-ins (a bad token, by form
//! or header) are limited per client: its address, or the address the
//! trusted proxy names in `X-Forwarded-For` for a request it passes on;
//! only failures are limited, so a correct token is never refused. A
//! request whose `Host` is not the console's (an address, `localhost`, or
//! a name `--allowed-host` gives) is refused: a name an attacker's DNS
//! points at this server (DNS rebinding) gets no answer. A form is
//! accepted only with the CSRF token of its session; under TLS its
//! cookies carry the `__Host-` prefix. No token or session
//! id is logged, shown, or kept but as a hash.

use std::collections::HashMap;
use std::net::IpAddr;
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::api::ApiError;
use super::server::Peer;
use super::{App, blocking};
use crate::cli::{Listen, ServeArgs};
use crate::error::{Error, Result};
use crate::users::{self, User};
use crate::who::{self, Actor, Via};

/// The session cookie, and the one a sign-in form is checked against.
const SESSION: &str = "automaton_session";
const PRE: &str = "automaton_signin";
/// The header a proxy carries its shared secret in (`--proxy-secret-file`).
const SECRET_HEADER: &str = "x-automaton-proxy-secret";
/// The shortest shared secret accepted.
const SECRET_MIN: usize = 32;

/// Failed sign-ins one client address may make in [`WINDOW`].
const FAILURES: u32 = 10;
const WINDOW: Duration = Duration::from_mins(1);

/// The server's sessions, failures, and what it trusts.
pub(crate) struct Auth {
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    /// The key CSRF tokens of proxied users are derived with.
    key: [u8; 32],
    ttl: Duration,
    /// Whether cookies are marked `Secure` (the server speaks HTTPS).
    secure: bool,
    proxy: Option<Proxy>,
    /// The host names requests may name besides addresses and
    /// `localhost`, lower-case.
    hosts: Vec<String>,
}

/// The proxy whose header names the user, and how it is told from any
/// other client: each that is set must hold.
struct Proxy {
    header: HeaderName,
    /// Its address (TCP).
    addr: Option<IpAddr>,
    /// Its uid (a Unix socket's peer).
    uid: Option<u32>,
    /// The secret it sends in [`SECRET_HEADER`].
    secret: Option<Vec<u8>>,
}

impl Proxy {
    /// Whether a request from `peer` with `headers` comes from the proxy.
    fn trusts(&self, peer: &Peer, headers: &HeaderMap) -> bool {
        let addr_ok = self.addr.is_none_or(|a| peer.1.is_none() && peer.0.ip() == a);
        let uid_ok = self.uid.is_none_or(|u| peer.1 == Some(u));
        let secret_ok = self.secret.as_ref().is_none_or(|want| {
            headers
                .get(SECRET_HEADER)
                .is_some_and(|got| users::same(got.as_bytes(), want))
        });
        addr_ok && uid_ok && secret_ok
    }
}

/// The proxy `args` describe, checked: what identifies it must suit the
/// listener, and at least one thing must.
fn proxy(args: &ServeArgs) -> Result<Option<Proxy>> {
    let Some(header) = &args.trust_header else {
        return Ok(None);
    };
    check_means(args)?;
    let uid = args.trusted_proxy_user.as_deref().map(uid_of).transpose()?;
    let secret = args.proxy_secret_file.as_deref().map(read_secret).transpose()?;
    if let (Some(addr), None) = (args.trusted_proxy, &secret) {
        tracing::warn!(
            "--trust-header over TCP without --proxy-secret-file: any process on {addr} may send \
             {header} (docs/console.md, \"Behind a proxy\")"
        );
    }
    Ok(Some(Proxy {
        header: HeaderName::try_from(header.as_str()).map_err(|e| Error::ServeSetup {
            reason: format!("--trust-header {header:?}: {e}"),
        })?,
        addr: args.trusted_proxy,
        uid,
        secret,
    }))
}

/// Refuses a `--trust-header` with nothing to tell the proxy by, or with
/// a means its listener cannot check.
fn check_means(args: &ServeArgs) -> Result<()> {
    let unix = matches!(args.listen, Listen::Unix(_));
    let reason = if args.trusted_proxy.is_none()
        && args.trusted_proxy_user.is_none()
        && args.proxy_secret_file.is_none()
    {
        "--trust-header needs the proxy it is believed from: --trusted-proxy ADDR, \
         --trusted-proxy-user USER (with --listen unix:PATH) or --proxy-secret-file FILE"
    } else if unix && args.trusted_proxy.is_some() {
        "a Unix socket's peers have no address: name the proxy with --trusted-proxy-user USER"
    } else if !unix && args.trusted_proxy_user.is_some() {
        "--trusted-proxy-user needs --listen unix:PATH (a TCP peer's user is not known)"
    } else {
        return Ok(());
    };
    Err(Error::ServeSetup {
        reason: reason.to_owned(),
    })
}

/// The uid of the OS user `name`.
#[cfg(windows)]
fn uid_of(name: &str) -> Result<u32> {
    Err(Error::ServeSetup {
        reason: format!("--trusted-proxy-user {name:?}: a Unix socket's peer user needs Unix"),
    })
}

#[cfg(unix)]
fn uid_of(name: &str) -> Result<u32> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok(user.uid.as_raw()),
        _ => Err(Error::ServeSetup {
            reason: format!("--trusted-proxy-user {name:?}: no such OS user"),
        }),
    }
}

/// The shared secret in `path`: its first line, at least [`SECRET_MIN`]
/// bytes, from a regular file others may not read.
fn read_secret(path: &Path) -> Result<Vec<u8>> {
    let bad = |reason: String| Error::ServeSetup {
        reason: format!("--proxy-secret-file {}: {reason}", path.display()),
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".to_owned()));
    }
    #[cfg(unix)]
    if meta.permissions().mode() & 0o007 != 0 {
        return Err(bad(format!(
            "others may read it (mode {:o}); `chmod o-rwx` it",
            meta.permissions().mode() & 0o777
        )));
    }
    let text = crate::fsx::read_regular(path, 64 * 1024)?.unwrap_or_default();
    let secret = String::from_utf8_lossy(&text)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    if secret.len() < SECRET_MIN || !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(format!(
            "the secret must be one line of at least {SECRET_MIN} printable characters \
             (`openssl rand -hex 32` makes one)"
        )));
    }
    Ok(secret.into_bytes())
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
pub(super) struct Who {
    pub actor: Actor,
    pub csrf: Option<String>,
    /// The hash of the token it was identified by (a bearer's, or the
    /// one its session signed in with); none through the trusted proxy,
    /// which names its users itself.
    pub token_sha256: Option<String>,
}

impl Who {
    /// Whether `given` is this user's CSRF token (always, for a bearer).
    pub(super) fn csrf_ok(&self, given: Option<&str>) -> bool {
        match (&self.csrf, given) {
            (None, _) => true,
            (Some(want), Some(got)) => users::same(want.as_bytes(), got.as_bytes()),
            (Some(_), None) => false,
        }
    }
}

impl Auth {
    pub(crate) fn new(args: &ServeArgs, secure: bool) -> Result<Auth> {
        let key = users::random()?;
        let proxy = proxy(args)?;
        Ok(Auth {
            sessions: Mutex::default(),
            failures: Mutex::default(),
            key,
            ttl: args.session,
            secure,
            proxy,
            hosts: args
                .allowed_hosts
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .collect(),
        })
    }

    /// The client a request is counted against: the address the trusted
    /// proxy names last in `X-Forwarded-For` (the one it saw) for a
    /// request it passed on, else the peer's address.
    fn client(&self, peer: Option<Peer>, headers: &HeaderMap) -> IpAddr {
        let direct = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0.ip());
        let Some(peer) = peer else { return direct };
        if !self.proxy.as_ref().is_some_and(|p| p.trusts(&peer, headers)) {
            return direct;
        }
        headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .next_back()
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or(direct)
    }

    /// Whether a request naming `host` (its `Host` header) is for this
    /// console: an address, `localhost`, or a name `--allowed-host` gave.
    pub(crate) fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host).trim_end_matches('.').to_ascii_lowercase();
        name.parse::<IpAddr>().is_ok() || name == "localhost" || self.hosts.contains(&name)
    }

    /// Whether `ip` has failed to sign in too often lately.
    fn limited(&self, ip: IpAddr) -> bool {
        let mut f = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        f.retain(|_, (_, since)| now.duration_since(*since) < WINDOW);
        f.get(&ip).is_some_and(|(n, _)| *n >= FAILURES)
    }

    fn failed(&self, ip: IpAddr) {
        let mut f = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
        let mut all = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        all.retain(|_, s| s.expires > now);
        all.insert(users::hash(&id), session);
        Ok(id)
    }

    fn close(&self, id: &str) {
        let mut all = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.remove(&users::hash(id));
    }

    /// The live session `id` names: its user, token hash and CSRF token.
    fn session(&self, id: &str) -> Option<(String, String, String)> {
        let all = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let s = all.get(&users::hash(id)).filter(|s| s.expires > Instant::now())?;
        Some((s.user.clone(), s.token_sha256.clone(), s.csrf.clone()))
    }

    /// `Set-Cookie` for a session id (or, with `None`, its removal).
    /// Whether the server speaks HTTPS.
    pub(crate) fn secure(&self) -> bool {
        self.secure
    }

    /// A cookie's name as sent: under TLS with the `__Host-` prefix, which
    /// a browser keeps only from a secure origin, for this host and path
    /// `/`, so no other site or subdomain can set it.
    fn cookie_name(&self, name: &str) -> String {
        match self.secure {
            true => format!("__Host-{name}"),
            false => name.to_owned(),
        }
    }

    /// The cookie `name` holding `value` for `max_age` (with `None`, its
    /// removal): for the whole site, never read by scripts, never sent
    /// from another site, and under TLS only over HTTPS.
    fn cookie(&self, name: &str, value: Option<&str>, max_age: Duration) -> Cookie<'static> {
        let (value, age) = match value {
            Some(v) => (v.to_owned(), max_age),
            None => (String::new(), Duration::ZERO),
        };
        let secs = i64::try_from(age.as_secs()).unwrap_or(i64::MAX);
        Cookie::build((self.cookie_name(name), value))
            .path("/")
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.secure)
            .max_age(cookie::time::Duration::seconds(secs))
            .build()
    }

    /// The value of the cookie `name` (as sent) in `jar`.
    fn cookie_value(&self, jar: &CookieJar, name: &str) -> Option<String> {
        jar.get(&self.cookie_name(name)).map(|c| c.value().to_owned())
    }
}

/// Why a request has no user.
#[derive(Debug)]
pub(super) enum NoUser {
    /// Nothing names one.
    Missing,
    /// A token, or a session, that signs no one in.
    Bad,
    /// Too many failed sign-ins from this address.
    Limited,
    /// The users could not be read.
    Failed(crate::Error),
}

/// Who the request comes from: see the module's header for the order.
pub(super) async fn identify(app: &Arc<App>, parts: &Parts) -> std::result::Result<Who, NoUser> {
    let from = parts.extensions.get::<Peer>().copied();
    let auth = &app.auth;
    if let (Some(proxy), Some(from)) = (&auth.proxy, from)
        && let Some(name) = parts.headers.get(&proxy.header).and_then(|v| v.to_str().ok())
    {
        let name = name.trim();
        if proxy.trusts(&from, &parts.headers) && users::check_name(name).is_ok() {
            return Ok(Who {
                actor: who::served(name, Via::Proxy),
                csrf: Some(auth.proxy_csrf(name)),
                token_sha256: None,
            });
        }
        tracing::debug!(
            "passed over {} from {} (uid {:?}), which is not the trusted proxy",
            proxy.header,
            from.0.ip(),
            from.1
        );
    }
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.strip_prefix("Bearer ").unwrap_or("").trim().to_owned());
    if let Some(token) = bearer {
        // A correct token is never refused: only failures count.
        let users = read_users(app).await?;
        if let Some(u) = users::find(&users, &token) {
            return Ok(Who {
                actor: who::served(&u.name, Via::Token),
                csrf: None,
                token_sha256: Some(u.token_sha256.clone()),
            });
        }
        let client = auth.client(from, &parts.headers);
        if auth.limited(client) {
            return Err(NoUser::Limited);
        }
        auth.failed(client);
        return Err(NoUser::Bad);
    }
    let jar = CookieJar::from_headers(&parts.headers);
    let Some(id) = auth.cookie_value(&jar, SESSION) else {
        return Err(NoUser::Missing);
    };
    let id = id.as_str();
    let (user, hash, csrf) = auth.session(id).ok_or(NoUser::Bad)?;
    let users = read_users(app).await?;
    // A user removed, or its token rotated, since: the session is over.
    if !still_holds(&users, &user, &hash) {
        auth.close(id);
        return Err(NoUser::Bad);
    }
    Ok(Who {
        actor: who::served(&user, Via::Token),
        csrf: Some(csrf),
        token_sha256: Some(hash),
    })
}

/// Whether `user` is still a user, its token still the one hashed `hash`:
/// not removed, nor rotated since.
pub(super) fn still_holds(users: &[User], user: &str, hash: &str) -> bool {
    users.iter().any(|u| u.name == user && u.token_sha256 == hash)
}

async fn read_users(app: &Arc<App>) -> std::result::Result<Vec<User>, NoUser> {
    let stores = app.stores.clone();
    blocking(move || stores.users()).await.map_err(NoUser::Failed)
}

/// The user of an API request; refused with a JSON error.
pub(super) struct ApiUser(pub Who);

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

/// The host of a `Host` header, without its port (`[::1]:8080` is `::1`).
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Refuses a request whose `Host` is not this console's (421), before
/// anything reads a cookie or a token.
pub(super) async fn check_host(
    State(app): State<Arc<App>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}"));
    match host.is_none_or(|h| app.auth.host_allowed(h)) {
        true => next.run(req).await,
        false => (
            StatusCode::MISDIRECTED_REQUEST,
            "this server does not answer for that host name; its operator lists the names it \
             is reached by with --allowed-host\n",
        )
            .into_response(),
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
pub(super) struct PageUser(pub Who);

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
pub(super) async fn signin_page(State(app): State<Arc<App>>) -> Response {
    signin_form(&app, StatusCode::OK, None)
}

fn signin_form(app: &App, status: StatusCode, error: Option<&str>) -> Response {
    let Ok(value) = users::new_token() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let jar = CookieJar::new().add(app.auth.cookie(PRE, Some(&value), Duration::from_mins(10)));
    let page = super::pages::signin(&value, error);
    (status, jar, page).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct SigninForm {
    token: String,
    csrf: String,
}

pub(super) async fn signin(
    State(app): State<Arc<App>>,
    peer: Option<axum::Extension<Peer>>,
    headers: HeaderMap,
    jar: CookieJar,
    form: std::result::Result<axum::Form<SigninForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let ip = app.auth.client(peer.map(|p| p.0), &headers);
    let Ok(axum::Form(form)) = form else {
        return signin_form(
            &app,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("the form was not filled in"),
        );
    };
    let pre = app.auth.cookie_value(&jar, PRE).unwrap_or_default();
    if pre.is_empty() || !users::same(pre.as_bytes(), form.csrf.as_bytes()) {
        return signin_form(
            &app,
            StatusCode::FORBIDDEN,
            Some("the form expired; sign in again"),
        );
    }
    let stores = app.stores.clone();
    let found = match blocking(move || stores.users()).await {
        Ok(all) => users::find(&all, form.token.trim()).cloned(),
        Err(e) => return ApiError::from(e).into_response(),
    };
    let Some(user) = found else {
        // Only failures are limited: a correct token signs in.
        if app.auth.limited(ip) {
            return limited().into_response();
        }
        app.auth.failed(ip);
        return signin_form(&app, StatusCode::UNAUTHORIZED, Some("that token signs no one in"));
    };
    let Ok(id) = app.auth.open(&user) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    tracing::info!("{} signed in from {ip}", user.name);
    let jar = jar
        .add(app.auth.cookie(SESSION, Some(&id), app.auth.ttl))
        .add(app.auth.cookie(PRE, None, Duration::ZERO));
    (jar, Redirect::to("/")).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: Option<String>,
}

pub(super) async fn signout(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    jar: CookieJar,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if !who.csrf_ok(form.csrf.as_deref()) {
        return (
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong\n",
        )
            .into_response();
    }
    if let Some(id) = app.auth.cookie_value(&jar, SESSION) {
        app.auth.close(&id);
    }
    let jar = jar.add(app.auth.cookie(SESSION, None, Duration::ZERO));
    (
        StatusCode::SEE_OTHER,
        jar,
        [(header::LOCATION, "/signin".to_owned())],
    )
        .into_response()
}
