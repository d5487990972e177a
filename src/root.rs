//! Finding the root (README, "Layout on disk") and the store it uses, and validating loop
//! names before any file is touched.

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The directory that holds `loops/` and `cache/`, and the store its loops
/// live in.
#[derive(Debug, Clone)]
pub struct Root {
    path: PathBuf,
    store: StoreChoice,
    /// What the command's `--timeout` bounds every wait on a shared
    /// store's server by, where it sets one (docs/postgres.md).
    server_bound: Option<std::time::Duration>,
    settings: Arc<Settings>,
}

/// What the root's automaton.toml says of people: who may act for whom,
/// and the roles every loop has unless its loop.toml says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// OS users automaton.toml names as delegates: honoured only as far
    /// as an admin recorded them (`automaton delegate add`, src/admin.rs).
    pub delegates: Vec<String>,
    /// The root-wide `[access]` lists.
    pub access: crate::access::Access,
    /// `[access] admins`: who may administer the root (its console users,
    /// its delegates); `None`: the owner of the root directory alone.
    pub admins: Option<Vec<String>>,
    /// Where people reach the console, for every loop that does not say.
    pub server: crate::config::notify::Server,
    /// `[metrics]`: who may scrape `/metrics` besides the console's users.
    pub metrics: crate::config::scrape::ScrapeAccess,
    /// `[gates]`: the signatures every loop's gates need, and the trust
    /// file (absolute) they are checked against.
    pub gates: Gates,
    /// `[[budget]]`: the root's budgets (docs/budgets.md).
    pub budgets: Vec<crate::budget::BudgetSpec>,
    /// `[pricing]`: the price of each reported metric (tokens) in a budget's
    /// metric (`cost_usd`), for steps that report tokens but no cost.
    pub pricing: crate::budget::Pricing,
}

/// The root's `[gates]`, its paths made absolute.
#[derive(Debug, Clone, Default)]
pub struct Gates {
    pub signing: crate::config::Signing,
    /// The trust file, in OpenSSH's `allowed_signers` format:
    /// `<root>/allowed_signers` unless set.
    pub allowed_signers: PathBuf,
    /// Revoked public keys, one a line, when set.
    pub revoked_keys: Option<PathBuf>,
}

/// Where a root's loops live: in its `loops/` directory (the default), or
/// in a PostgreSQL database (docs/postgres.md).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreChoice {
    File,
    /// A `postgres://` or `postgresql://` URL, which may carry a password:
    /// shown only through [`redact`].
    Postgres(String),
}

impl fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::File => f.write_str("File"),
            StoreChoice::Postgres(url) => write!(f, "Postgres({})", redact(url)),
        }
    }
}

impl StoreChoice {
    /// Reads a `--store` value: `file`, a PostgreSQL URL, or a libpq
    /// `key=value` connection string (`host=/run/pg dbname=automaton`).
    pub fn parse(value: &str, from: &str) -> Result<StoreChoice> {
        let value = value.trim();
        if value == "file" {
            Ok(StoreChoice::File)
        } else if value.starts_with("postgres://") || value.starts_with("postgresql://") || is_conninfo(value)
        {
            Ok(StoreChoice::Postgres(value.to_owned()))
        } else {
            Err(Error::BadStore {
                value: redact(value),
                from: from.to_owned(),
            })
        }
    }
}

/// Whether `value` reads as a libpq `key=value` connection string: its
/// first word is a key followed by `=`.
fn is_conninfo(value: &str) -> bool {
    let key: String = value
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    !key.is_empty() && value[key.len()..].trim_start().starts_with('=')
}

/// A store URL or `key=value` connection string with its password replaced
/// by `***`, for every message that names it: the password of the URL's
/// user-info part (whatever it holds: `/`, `?`, `@`, percent escapes), of
/// a `password=` query parameter (its name percent-encoded or not), and of
/// a `password=` pair of a connection string (quoted or not). What cannot
/// be told apart from a password is masked with it.
pub(crate) fn redact(url: &str) -> String {
    match url.find("://") {
        Some(scheme_end) => redact_url(url, scheme_end + 3),
        None => redact_conninfo(url),
    }
}

fn redact_url(url: &str, rest_start: usize) -> String {
    let mut out = url.to_owned();
    // The user-info part ends at an `@` followed by a host list (no `@`,
    // `=` or `&` before the next `/` or `?`): the last such `@` whose user
    // info holds a `:`, so a password holding `/`, `?` or `@` is masked
    // whole. Masking more than the password (never less) is the price of
    // an odd URL.
    let rest = &url[rest_start..];
    let host_follows = |at: usize| {
        let after = &rest[at + 1..];
        let host = &after[..after.find(['/', '?']).unwrap_or(after.len())];
        !host.contains(['@', '=', '&'])
    };
    let at = rest
        .match_indices('@')
        .map(|(i, _)| i)
        .rfind(|&i| host_follows(i));
    let mut query_from = 0;
    if let Some(at) = at
        && let Some(colon) = rest[..at].find(':')
    {
        out.replace_range(rest_start + colon + 1..rest_start + at, "***");
        query_from = rest_start + colon + 1 + "***".len() + 1;
    }
    let Some(q) = out[query_from..].find('?').map(|q| query_from + q) else {
        return out;
    };
    let (head, query) = out.split_at(q + 1);
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if percent_decode(k).trim().eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{head}{}", query.join("&"))
}

/// `%XX` escapes decoded (an invalid one is kept as it is).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `key=value` connection string with each `password` value masked,
/// read as libpq reads it: a value is single-quoted (with `\'` and `\\`
/// inside) or runs to the next blank, `\` escaping the next character.
/// From a part that does not read so on, everything after a `password`
/// key is masked.
fn redact_conninfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let blank = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..blank]);
        rest = &rest[blank..];
        if rest.is_empty() {
            return out;
        }
        let key_len = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..key_len];
        let after_key = &rest[key_len..];
        let Some(value) = after_key.trim_start().strip_prefix('=') else {
            // Not a pair: masked from here on if a password may follow.
            if rest.to_ascii_lowercase().contains("password") {
                out.push_str("***");
            } else {
                out.push_str(rest);
            }
            return out;
        };
        let value = value.trim_start();
        let prefix_len = rest.len() - value.len();
        let value_len = conninfo_value_len(value);
        out.push_str(&rest[..prefix_len]);
        if key.eq_ignore_ascii_case("password") {
            out.push_str("***");
        } else {
            out.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
}

/// The length of the value that starts `text`, quoted or not.
fn conninfo_value_len(text: &str) -> usize {
    let mut chars = text.char_indices();
    let quoted = text.starts_with('\'');
    if quoted {
        chars.next();
    }
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return i + 1,
            c if c.is_whitespace() && !quoted => return i,
            _ => {}
        }
    }
    text.len()
}

impl Gates {
    /// What a loop whose loop.toml says `signing` requires of its gates:
    /// signatures when either file requires them, by the most signers
    /// either asks for.
    pub fn policy(&self, signing: &crate::config::Signing) -> crate::gate::trust::Policy {
        let signers = [self.signing.signers, signing.signers]
            .into_iter()
            .flatten()
            .map(std::num::NonZeroU32::get)
            .max()
            .unwrap_or(1);
        crate::gate::trust::Policy {
            required: self.signing.require_signed || signing.require_signed,
            signers,
            allowed_signers: self.allowed_signers.clone(),
            revoked_keys: self.revoked_keys.clone(),
        }
    }
}

/// `<root>/automaton.toml`: settings of the root itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootConfig {
    /// `file`, or a PostgreSQL URL.
    store: Option<String>,
    /// OS users who may act for the person `$AUTOMATON_USER` names (a bot's
    /// service account), once an admin has recorded them; anyone else acts
    /// as themselves.
    #[serde(default)]
    delegates: Vec<String>,
    /// The roles of every loop whose loop.toml leaves them unset, and the
    /// root's own `admins`.
    #[serde(default)]
    access: RootAccess,
    /// The console's address, for the links notifications carry.
    #[serde(default)]
    server: crate::config::notify::Server,
    /// Who may scrape `/metrics` besides the console's users.
    #[serde(default)]
    metrics: crate::config::scrape::ScrapeAccess,
    /// Signed gates: required or not, by how many, against which trust
    /// file (docs/writing-gates.md, "Signing a gate").
    #[serde(default)]
    gates: RootGates,
    #[serde(default, rename = "budget")]
    budgets: Vec<crate::budget::BudgetSpec>,
    #[serde(default)]
    pricing: crate::budget::Pricing,
}

/// The root's `[gates]`: a loop's `[gates]`, and the trust file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootGates {
    #[serde(default)]
    require_signed: bool,
    #[serde(default)]
    signers: Option<std::num::NonZeroU32>,
    /// Relative to the root.
    #[serde(default)]
    allowed_signers: Option<PathBuf>,
    #[serde(default)]
    revoked_keys: Option<PathBuf>,
}

/// The root's `[access]`: a loop's roles, and `admins`, which only a root
/// has.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootAccess {
    #[serde(default)]
    approvers: Option<Vec<String>>,
    #[serde(default)]
    operators: Option<Vec<String>>,
    #[serde(default)]
    viewers: Option<Vec<String>>,
    /// May `user add`, `user rotate`, `user remove`, `delegate add` and
    /// `delegate remove` (src/admin.rs).
    #[serde(default)]
    admins: Option<Vec<String>>,
}

impl RootConfig {
    /// What the file says of people and of gates; paths are taken from
    /// the root at `root`.
    fn settings(self, root: &Path) -> Settings {
        let RootAccess {
            approvers,
            operators,
            viewers,
            admins,
        } = self.access;
        Settings {
            delegates: self.delegates,
            access: crate::access::Access {
                approvers,
                operators,
                viewers,
            },
            admins,
            server: self.server,
            metrics: self.metrics,
            gates: Gates {
                signing: crate::config::Signing {
                    require_signed: self.gates.require_signed,
                    signers: self.gates.signers,
                },
                allowed_signers: root.join(
                    self.gates
                        .allowed_signers
                        .unwrap_or_else(|| PathBuf::from("allowed_signers")),
                ),
                revoked_keys: self.gates.revoked_keys.map(|p| root.join(p)),
            },
            budgets: self.budgets,
            pricing: self.pricing,
        }
    }
}

/// The root's config file.
pub(crate) const ROOT_CONFIG: &str = "automaton.toml";

/// What the command line says of the root: `--root` and `--store`, each
/// first among the ways a root and its store are chosen.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags<'a> {
    pub root: Option<&'a Path>,
    pub store: Option<&'a str>,
    /// The command's `--timeout`, which also bounds its waits on a shared
    /// store's server.
    pub server_bound: Option<std::time::Duration>,
}

/// Where a root was found, for messages and `init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Flag,
    Env,
    Discovered,
    Default,
}

impl Root {
    /// Resolves the root: `--root`, else `$AUTOMATON_ROOT`, else the nearest
    /// `.automaton/` in the working directory or its parents, else
    /// `$XDG_DATA_HOME/automaton` (`~/.local/share/automaton`). The path is
    /// made absolute; nothing is created.
    pub(crate) fn locate(flags: Flags<'_>) -> Result<(Root, Origin)> {
        let cwd = env::current_dir().map_err(Error::io("reading the working directory", "."))?;
        let (path, origin) = if let Some(p) = flags.root {
            (p.to_path_buf(), Origin::Flag)
        } else if let Some(p) = env::var_os("AUTOMATON_ROOT").filter(|v| !v.is_empty()) {
            (PathBuf::from(p), Origin::Env)
        } else if let Some(p) = cwd.ancestors().map(|d| d.join(".automaton")).find(|d| d.is_dir()) {
            (p, Origin::Discovered)
        } else {
            (default_root(), Origin::Default)
        };
        let path = cwd.join(path);
        let server_bound = flags.server_bound;
        let config = read_config(&path)?;
        let store = choose_store(&path, flags.store, config.store.as_deref())?;
        let settings = Arc::new(config.settings(&path));
        Ok((
            Root {
                path,
                store,
                server_bound,
                settings,
            },
            origin,
        ))
    }

    /// Resolves the root and checks that it has been initialised.
    pub fn open(flags: Flags<'_>) -> Result<Root> {
        let (root, _) = Root::locate(flags)?;
        match std::fs::metadata(root.loops_dir()) {
            Ok(m) if m.is_dir() => Ok(root),
            // A root of a group this user is not in: the OS said no.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(Error::io("opening the root", root.loops_dir())(e))
            }
            _ => Err(Error::NoRoot { path: root.path }),
        }
    }

    /// The root at `path`, with the file store.
    pub fn at(path: impl Into<PathBuf>) -> Root {
        Root {
            path: path.into(),
            store: StoreChoice::File,
            server_bound: None,
            settings: Arc::default(),
        }
    }

    /// The root at `path`, with the file store, and what its
    /// automaton.toml says of people.
    pub(crate) fn at_with_people(path: impl Into<PathBuf>) -> Result<Root> {
        let mut root = Root::at(path);
        root.settings = Arc::new(read_config(&root.path)?.settings(&root.path));
        Ok(root)
    }

    /// The path of the root's automaton.toml, for messages.
    pub(crate) fn config_file(&self) -> PathBuf {
        self.path.join(ROOT_CONFIG)
    }

    /// What the root's automaton.toml says of people.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The same root with another store.
    pub(crate) fn with_store(mut self, store: StoreChoice) -> Root {
        self.store = store;
        self
    }

    /// The store the root's loops live in.
    pub fn store(&self) -> &StoreChoice {
        &self.store
    }

    /// What bounds every wait on a shared store's server besides its
    /// defaults: the command's `--timeout`, if it has one.
    pub(crate) fn server_bound(&self) -> Option<std::time::Duration> {
        self.server_bound
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn loops_dir(&self) -> PathBuf {
        self.path.join("loops")
    }

    pub(crate) fn cache_dir(&self) -> PathBuf {
        self.path.join("cache")
    }
}

/// The store for the root at `path`: `--store`, else `$AUTOMATON_STORE`,
/// else the `store` key of `<root>/automaton.toml` (`from_file`), else the
/// file store.
fn choose_store(path: &Path, flag: Option<&str>, from_file: Option<&str>) -> Result<StoreChoice> {
    if let Some(flag) = flag {
        return StoreChoice::parse(flag, "--store");
    }
    if let Some(v) = env::var("AUTOMATON_STORE").ok().filter(|v| !v.trim().is_empty()) {
        return StoreChoice::parse(&v, "$AUTOMATON_STORE");
    }
    match from_file {
        Some(v) => StoreChoice::parse(v, &path.join(ROOT_CONFIG).display().to_string()),
        None => Ok(StoreChoice::File),
    }
}

/// `<root>/automaton.toml`, or its defaults when there is none. It is
/// read as every loop file is: a FIFO, a device or a link is refused at
/// once (never waited on), as is a file past [`crate::rules::ROOT_MAX`].
fn read_config(path: &Path) -> Result<RootConfig> {
    let file = path.join(ROOT_CONFIG);
    let Some(bytes) = crate::fsx::read_regular(&file, crate::rules::ROOT_MAX)? else {
        return Ok(RootConfig::default());
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::io("reading", file.clone())(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    })?;
    toml::from_str(&text).map_err(|e| crate::config::ConfigError::toml(&text, &file, &e).into())
}

/// Where a user's compiled gates are kept when no root is at hand (`gate
/// test` and `gate compile` in a gate's project folder):
/// `$XDG_CACHE_HOME/automaton`, else `~/.cache/automaton`; `None` when
/// neither variable is set.
pub(crate) fn user_cache_dir() -> Option<PathBuf> {
    let base = env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    // Windows: `%LOCALAPPDATA%\automaton\cache`, beside the default root.
    #[cfg(windows)]
    if base.is_none() {
        return local_app_data().map(|d| d.join("automaton").join("cache"));
    }
    Some(base?.join("automaton"))
}

fn default_root() -> PathBuf {
    let data = env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")));
    // Windows: `%LOCALAPPDATA%\automaton` (the user's own, not roamed).
    #[cfg(windows)]
    let data = data.or_else(local_app_data);
    data.unwrap_or_else(|| PathBuf::from(".")).join("automaton")
}

/// `%LOCALAPPDATA%`, the user's local application data on Windows.
#[cfg(windows)]
fn local_app_data() -> Option<PathBuf> {
    env::var_os("LOCALAPPDATA")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A validated loop name: `^[a-z0-9][a-z0-9._-]{0,63}$`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LoopName(String);

impl LoopName {
    pub fn new(name: &str) -> Result<LoopName> {
        let refuse = |reason| {
            Err(Error::InvalidName {
                name: name.to_owned(),
                reason,
            })
        };
        let mut chars = name.chars();
        match chars.next() {
            None => return refuse("it is empty"),
            Some(c) if !(c.is_ascii_lowercase() || c.is_ascii_digit()) => {
                return refuse("it must start with a lower-case letter or a digit");
            }
            Some(_) => {}
        }
        if name.len() > 64 {
            return refuse("it is longer than 64 characters");
        }
        if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')) {
            return refuse("only a-z, 0-9, '.', '_' and '-' are allowed");
        }
        Ok(LoopName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LoopName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_wherever_a_url_carries_them() {
        assert_eq!(redact("postgres://ann:s3cret@db/x"), "postgres://ann:***@db/x");
        assert_eq!(redact("postgres://ann@db/x"), "postgres://ann@db/x");
        assert_eq!(
            redact("postgresql:///x?host=/run&password=s3cret&user=a"),
            "postgresql:///x?host=/run&password=***&user=a"
        );
        assert_eq!(redact("postgres://a:p@ss@h:5/d"), "postgres://a:***@h:5/d");
        // A password that holds what ends a URL's parts.
        assert_eq!(redact("postgres://ann:pa/ss?w@db/x"), "postgres://ann:***@db/x");
        assert_eq!(
            redact("postgres://ann:p%2Fw%3F@db/x?a=1"),
            "postgres://ann:***@db/x?a=1"
        );
        assert_eq!(
            redact("postgres://ann@db/x?application_name=a&%70assword=s3cret"),
            "postgres://ann@db/x?application_name=a&%70assword=***"
        );
        // key=value connection strings, quoted or not.
        assert_eq!(
            redact("host=/run/pg password=s3cret dbname=x"),
            "host=/run/pg password=*** dbname=x"
        );
        assert_eq!(
            redact("host=db password = 'it\\'s a secret' user=ann"),
            "host=db password = *** user=ann"
        );
        assert_eq!(
            redact("user=ann PASSWORD=a\\ b port=5"),
            "user=ann PASSWORD=*** port=5"
        );
        assert_eq!(redact("host=db oops password s3cret"), "host=db ***");
        for secret in [
            "postgres://ann:pa/ss?w@db/x",
            "host=db password='a b c'",
            "postgresql://u:%73%33cret@h/d",
        ] {
            let shown = redact(secret);
            assert!(
                !shown.contains("ss?w") && !shown.contains("a b c") && !shown.contains("%73%33"),
                "{shown}"
            );
        }
        assert!(!format!("{:?}", StoreChoice::Postgres("postgres://a:pw@h/d".into())).contains("pw"));
    }

    #[test]
    fn accepts_plain_names() {
        for ok in ["a", "fix-flaky-tests", "0day", "a.b_c-d", &"x".repeat(64)] {
            assert!(LoopName::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_paths_and_odd_names() {
        for bad in [
            "",
            "../x",
            "A",
            "a/b",
            ".x",
            "-x",
            "_x",
            "a b",
            "é",
            "x\0",
            &"x".repeat(65),
        ] {
            assert!(LoopName::new(bad).is_err(), "{bad:?}");
        }
    }
}
