//! Connecting to the PostgreSQL store: the URL read into a connection
//! config, with what libpq users expect filled in where the URL is silent
//! (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD`, then
//! `PGPASSFILE` or `~/.pgpass`), TCP keepalives so a dead peer is noticed,
//! and a connect timeout. No TLS: the driver is built without a TLS
//! connector (docs/postgres.md says how to reach a server that needs
//! one). rust-postgres reads none of libpq's environment itself; the
//! `.pgpass` format is written out here because no well-kept crate reads it.
//! The server is asked to probe its end of each TCP connection the same way.
//!
//! Every wait on the server is bounded (docs/postgres.md, "Every wait is
//! bounded"): a connection attempt, the whole of it, by the connect
//! timeout; every call on a connection made, by the call bound, on the
//! client's side ([`super::client`]), whatever the server does. The server
//! is asked to give up a little sooner (`statement_timeout`, and
//! `lock_timeout` for a wait on a table or row lock, set for the session
//! unless the URL's `options` sets them), so one that answers says why.
//! They are set by one statement once connected, not as start-up
//! `options`, which a pooler such as pgbouncer refuses (docs/postgres.md,
//! "Poolers"); that statement also marks the server session as this
//! connection's, and refuses one another connection marked: a pooler that
//! shares server sessions between connections.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_postgres::Config;
use tokio_postgres::config::Host;

pub(super) use super::client::{Client, ConnectError};
use crate::error::{Error, Result};

/// How long a connection attempt may take when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keepalives: a peer silent this long is probed...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// ...this often...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// ...and given up after this many unanswered probes (about a minute in all).
const KEEPALIVE_RETRIES: u32 = 3;
/// The longest a call on a connection waits for its answer.
pub(super) const CALL_BOUND: Duration = Duration::from_secs(30);
/// The longest a statement may wait for a lock on a table or row.
pub(super) const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest bound a command's `--timeout` sets on its server waits.
const MIN_BOUND: Duration = Duration::from_secs(1);

/// How to connect, and the bounds of what is done on a connection.
#[derive(Clone)]
pub(super) struct Connector {
    config: Config,
    /// The whole of a connection attempt.
    within: Duration,
    /// Each call on a connection.
    bound: Duration,
    /// Run once connected: the session's settings.
    setup: Arc<str>,
    /// Whether a connection found the server on another port than the
    /// one it connected to: something (a pooler) is between.
    between: Arc<std::sync::atomic::AtomicBool>,
}

/// The server session a connection was given carries what another
/// connection set in it: a pooler between hands out server sessions per
/// transaction or statement (or does not reset one between clients), and
/// the store keeps state in its sessions.
#[derive(Debug, thiserror::Error)]
#[error(
    "the server session it was given still carries another connection's settings \
     ({MARK} = {0}): a connection pooler in transaction or statement pooling mode (or one that \
     does not reset a session between clients) is between automaton and PostgreSQL, and the \
     store keeps state in its sessions (a loop's advisory lock, its prepared statements, \
     LISTEN); use session pooling (pgbouncer: pool_mode = session, with its default \
     server_reset_query) or connect to the server directly (docs/postgres.md, \"Poolers\")"
)]
pub(crate) struct SharedSession(pub(super) String);

/// The setting each connection marks its server session with: the
/// process and connection that set it.
const MARK: &str = "automaton.session";

/// The server gives up a statement at nine tenths of the call's bound (so
/// a server that answers says why before the client gives up on it), and
/// a wait for a lock at half of it, at most [`LOCK_TIMEOUT`].
fn server_timeouts(bound: Duration) -> (Duration, Duration) {
    (bound * 9 / 10, LOCK_TIMEOUT.min(bound / 2))
}

/// Reads `url` into a connector; `shown` is the redacted URL, for
/// messages. `bound` (a command's `--timeout`, at least 1s) shortens the
/// connect timeout and the call bound where it is shorter than they are.
pub(super) fn config(url: &str, shown: &str, bound: Option<Duration>) -> Result<Connector> {
    let bounded = |default: Duration| bound.map_or(default, |b| default.min(b.max(MIN_BOUND)));
    let mut config: Config = url.parse().map_err(|e: tokio_postgres::Error| Error::Database {
        name: None,
        url: shown.to_owned(),
        action: "the URL does not read".to_owned(),
        lock_wait: false,
        source: Box::new(e),
    })?;
    fill_from_env(&mut config);
    let within = bounded(config.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT));
    let call = bounded(CALL_BOUND);
    config.connect_timeout(within);
    // Data sent and not acknowledged for as long as a call may wait ends
    // the connection (a network that drops every packet).
    config
        .tcp_user_timeout(call)
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES);
    // Set once connected, each unless the URL's own `options` sets it. The
    // server probes its end as the runner probes its own: a session of a
    // runner cut off from it (and the advisory lock it holds) is ended in
    // about a minute, not the two hours of the usual system default.
    let (statement, lock) = server_timeouts(call);
    let ours = [
        ("statement_timeout", format!("{}ms", statement.as_millis())),
        ("lock_timeout", format!("{}ms", lock.as_millis())),
        ("tcp_keepalives_idle", KEEPALIVE_IDLE.as_secs().to_string()),
        (
            "tcp_keepalives_interval",
            KEEPALIVE_INTERVAL.as_secs().to_string(),
        ),
        ("tcp_keepalives_count", KEEPALIVE_RETRIES.to_string()),
    ];
    let theirs = options_set(config.get_options().unwrap_or_default());
    let setup = setup_sql(ours.iter().filter(|(name, _)| !theirs.iter().any(|t| t == name)));
    if config.get_application_name().is_none() {
        config.application_name("automaton");
    }
    if config.get_password().is_none()
        && let Some(p) = password_from_env(&config)
    {
        config.password(p);
    }
    Ok(Connector {
        config,
        within,
        bound: call,
        setup: setup.into(),
        between: Arc::default(),
    })
}

/// The statement run once connected: the mark another connection left in
/// the session (empty on a session of its own), the server's port, then
/// the session marked
/// as this connection's ([`MARK_VALUE`] is replaced by its own mark) and
/// `settings` set for it. PostgreSQL starts every session unmarked, and a
/// session pooler's reset between clients (`DISCARD ALL`) clears the mark.
fn setup_sql<'a>(settings: impl Iterator<Item = &'a (&'a str, String)>) -> String {
    let sets: String = settings
        .map(|(name, value)| format!(", set_config('{name}', '{value}', false)"))
        .collect();
    format!(
        "SELECT coalesce(current_setting('{MARK}', true), ''), current_setting('port'), \
         set_config('{MARK}', '{MARK_VALUE}', false){sets}"
    )
}

/// Where the setup statement takes each connection's own mark.
const MARK_VALUE: &str = "$mark";

/// The settings a URL's `options` sets: `-c name=value`, `-cname=value`,
/// `--name=value` (a backslash escapes a space, as the server reads them),
/// named as the server does (lower case, `_` for `-`).
fn options_set(options: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => words.extend((!word.is_empty()).then(|| std::mem::take(&mut word))),
            c => word.push(c),
        }
    }
    words.extend((!word.is_empty()).then_some(word));
    let mut names = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        let setting = match w.as_str() {
            "-c" => words.next(),
            w => w
                .strip_prefix("--")
                .or_else(|| w.strip_prefix("-c"))
                .map(str::to_owned),
        };
        if let Some((name, _)) = setting.as_deref().and_then(|s| s.split_once('=')) {
            names.push(name.trim().to_lowercase().replace('-', "_"));
        }
    }
    names
}

impl Connector {
    /// Opens one connection, within the connect timeout.
    pub(super) fn connect(&self) -> Result<Client, ConnectError> {
        self.set_up(Client::connect(&self.config, self.within, self.bound)?)
    }

    /// Opens one connection within `bound`, each call on it bounded by
    /// `bound` too.
    pub(super) fn connect_within(&self, bound: Duration) -> Result<Client, ConnectError> {
        self.set_up(Client::connect(
            &self.config,
            bound.min(self.within),
            bound.min(self.bound),
        )?)
    }

    /// Sets the session's settings on a connection just made, refusing a
    /// session that another connection marked.
    fn set_up(&self, mut client: Client) -> Result<Client, ConnectError> {
        static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
        let mark = format!(
            "{}.{}",
            std::process::id(),
            CONNECTIONS.fetch_add(1, Ordering::Relaxed)
        );
        let (found, port) = client
            .set_up(&self.setup.replace(MARK_VALUE, &mark))
            .map_err(ConnectError::Setup)?;
        if !found.is_empty() {
            return Err(ConnectError::Shared(SharedSession(found)));
        }
        let ours = self.config.get_ports().first().copied().unwrap_or(5432);
        if port != ours.to_string() {
            self.between.store(true, Ordering::Relaxed);
        }
        Ok(client)
    }

    /// Whether a connection met the server on another port than the one
    /// it connected to (a pooler's, or a forwarded one).
    pub(super) fn is_between(&self) -> bool {
        self.between.load(Ordering::Relaxed)
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// What libpq would take from the environment where the URL is silent.
fn fill_from_env(config: &mut Config) {
    if config.get_hosts().is_empty() {
        if let Some(h) = var("PGHOST") {
            config.host(&h);
        } else {
            // libpq on Windows connects to localhost over TCP.
            #[cfg(windows)]
            config.host("localhost");
            #[cfg(unix)]
            let socket = ["/var/run/postgresql", "/tmp"]
                .into_iter()
                .find(|d| Path::new(d).is_dir())
                .unwrap_or("/tmp");
            #[cfg(unix)]
            config.host_path(socket);
        }
    }
    if config.get_ports().is_empty()
        && let Some(p) = var("PGPORT").and_then(|p| p.parse().ok())
    {
        config.port(p);
    }
    if config.get_user().is_none() {
        #[cfg(unix)]
        let user = var("PGUSER").or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        });
        #[cfg(windows)]
        let user = var("PGUSER").or_else(|| Some(crate::os::user_name()));
        if let Some(u) = user {
            config.user(&u);
        }
    }
    if config.get_dbname().is_none()
        && let Some(d) = var("PGDATABASE")
    {
        config.dbname(&d);
    }
}

/// `PGPASSWORD`, else the first matching line of the password file.
fn password_from_env(config: &Config) -> Option<String> {
    if let Some(p) = var("PGPASSWORD") {
        return Some(p);
    }
    let file = var("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".pgpass")))?;
    password_from_file(&file, config)
}

/// The password for `config` in password file `file`, which, as libpq
/// has it, is not read when others than its owner may read or write it
/// (or it is not a plain file): a warning says so.
fn password_from_file(file: &Path, config: &Config) -> Option<String> {
    let meta = std::fs::metadata(file).ok()?;
    #[cfg(unix)]
    let open = {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o077 != 0
    };
    // Windows: libpq does not check the password file's permissions.
    #[cfg(windows)]
    let open = false;
    if !meta.is_file() || open {
        tracing::warn!(
            "password file {} is not read: it is not a plain file that only its owner \
             may read and write (chmod 600 it)",
            file.display()
        );
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        // libpq matches a Unix socket against `localhost`.
        _ => "localhost".to_owned(),
    };
    pgpass_lookup(&text, [host.as_str(), &port, db, user])
}

/// The password of the first `host:port:database:user:password` line whose
/// fields match `want` (`*` matches anything; `\:` and `\\` are escapes).
fn pgpass_lookup(text: &str, want: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_escaped(line);
        if fields.len() != 5 {
            continue;
        }
        if fields[..4].iter().zip(want).all(|(f, w)| f == "*" || f == w) {
            return Some(fields[4].clone());
        }
    }
    None
}

fn split_escaped(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    fields.last_mut().expect("one field").push(n);
                }
            }
            // The password is the rest of the line, colons and all.
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_password_file_others_may_read_is_not_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(&file, "*:*:*:ann:secret\n").unwrap();
        let mut config = Config::new();
        config.user("ann").host("db.example");
        for (mode, read) in [(0o600, true), (0o400, true), (0o640, false), (0o604, false)] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let password = password_from_file(&file, &config);
            assert_eq!(password.is_some(), read, "mode {mode:o}");
        }
        assert_eq!(password_from_file(dir.path(), &config), None, "a directory");
    }

    #[test]
    fn the_urls_own_options_keep_their_settings_and_ours_fill_the_rest() {
        assert_eq!(
            options_set(
                r"-c statement_timeout=0 -clock_timeout=2s --TCP-keepalives-idle=5 -c search_path=a\ b"
            ),
            [
                "statement_timeout",
                "lock_timeout",
                "tcp_keepalives_idle",
                "search_path"
            ]
        );
        assert!(options_set("").is_empty());
        let connector = config(
            "postgresql://ann@db.example/x?options=-c%20lock_timeout%3D2s",
            "shown",
            None,
        )
        .unwrap();
        assert_eq!(connector.config.get_options(), Some("-c lock_timeout=2s"));
        assert_eq!(
            &*connector.setup,
            "SELECT coalesce(current_setting('automaton.session', true), ''), current_setting('port'), \
             set_config('automaton.session', '$mark', false), \
             set_config('statement_timeout', '27000ms', false), \
             set_config('tcp_keepalives_idle', '30', false), \
             set_config('tcp_keepalives_interval', '10', false), \
             set_config('tcp_keepalives_count', '3', false)"
        );
        let plain = config("postgresql://ann@db.example/x", "shown", None).unwrap();
        assert_eq!(
            plain.config.get_options(),
            None,
            "no start-up options a pooler refuses"
        );
        assert!(
            plain
                .setup
                .contains("set_config('lock_timeout', '10000ms', false)")
        );
    }

    #[test]
    fn pgpass_lines_match_field_by_field() {
        let text = "# comment\n\
                    db.example:5432:prod:ann:first\n\
                    *:*:*:bob:b\\:ob:pw\n\
                    localhost:5433:*:*:sock\n";
        assert_eq!(
            pgpass_lookup(text, ["db.example", "5432", "prod", "ann"]).as_deref(),
            Some("first")
        );
        assert_eq!(
            pgpass_lookup(text, ["x", "1", "y", "bob"]).as_deref(),
            Some("b:ob:pw")
        );
        assert_eq!(
            pgpass_lookup(text, ["localhost", "5433", "any", "carl"]).as_deref(),
            Some("sock")
        );
        assert_eq!(pgpass_lookup(text, ["db.example", "5432", "prod", "dan"]), None);
    }
}
