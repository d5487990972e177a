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
    settings: Arc<Settings>,
}

/// What the root's automaton.toml says of people: who may act for whom,
/// and the roles every loop has unless its loop.toml says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// OS users who may act for the person `$AUTOMATON_USER` names.
    pub delegates: Vec<String>,
    /// The root-wide `[access]` lists.
    pub access: crate::access::Access,
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
    /// Reads a `--store` value: `file`, or a PostgreSQL URL.
    pub fn parse(value: &str, from: &str) -> Result<StoreChoice> {
        let value = value.trim();
        if value == "file" {
            Ok(StoreChoice::File)
        } else if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            Ok(StoreChoice::Postgres(value.to_owned()))
        } else {
            Err(Error::BadStore {
                value: redact(value),
                from: from.to_owned(),
            })
        }
    }
}

/// A store URL with its password (in the user-info part or a `password=`
/// parameter) replaced by `***`, for every message that names it.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(rest_start + colon + 1..rest_start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// `<root>/automaton.toml`: settings of the root itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootConfig {
    /// `file`, or a PostgreSQL URL.
    store: Option<String>,
    /// OS users who may act for the person `$AUTOMATON_USER` names (a bot's
    /// service account); anyone else acts as themselves.
    #[serde(default)]
    delegates: Vec<String>,
    /// The roles of every loop whose loop.toml leaves them unset.
    #[serde(default)]
    access: crate::access::Access,
}

/// The root's config file.
pub const ROOT_CONFIG: &str = "automaton.toml";

/// What the command line says of the root: `--root` and `--store`, each
/// first among the ways a root and its store are chosen.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags<'a> {
    pub root: Option<&'a Path>,
    pub store: Option<&'a str>,
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
    pub fn locate(flags: Flags<'_>) -> Result<(Root, Origin)> {
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
        let config = read_config(&path)?;
        let store = choose_store(&path, flags.store, config.store.as_deref())?;
        let settings = Arc::new(Settings {
            delegates: config.delegates,
            access: config.access,
        });
        crate::who::set_delegates(&settings.delegates);
        Ok((
            Root {
                path,
                store,
                settings,
            },
            origin,
        ))
    }

    /// Resolves the root and checks that it has been initialised.
    pub fn open(flags: Flags<'_>) -> Result<Root> {
        let (root, _) = Root::locate(flags)?;
        if !root.loops_dir().is_dir() {
            return Err(Error::NoRoot { path: root.path });
        }
        Ok(root)
    }

    /// The root at `path`, with the file store.
    pub fn at(path: impl Into<PathBuf>) -> Root {
        Root {
            path: path.into(),
            store: StoreChoice::File,
            settings: Arc::default(),
        }
    }

    /// What the root's automaton.toml says of people.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The same root with another store.
    pub fn with_store(mut self, store: StoreChoice) -> Root {
        self.store = store;
        self
    }

    /// The store the root's loops live in.
    pub fn store(&self) -> &StoreChoice {
        &self.store
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn loops_dir(&self) -> PathBuf {
        self.path.join("loops")
    }

    pub fn cache_dir(&self) -> PathBuf {
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

/// `<root>/automaton.toml`, or its defaults when there is none.
fn read_config(path: &Path) -> Result<RootConfig> {
    let file = path.join(ROOT_CONFIG);
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RootConfig::default()),
        Err(e) => return Err(Error::io("reading", file)(e)),
    };
    toml::from_str(&text).map_err(|e| {
        crate::config::ConfigError::Invalid {
            path: file.clone(),
            line: e.span().map_or(1, |s| text[..s.start].matches('\n').count() + 1),
            column: 1,
            message: e.message().trim_end().to_owned(),
        }
        .into()
    })
}

/// Where a user's compiled gates are kept when no root is at hand (`gate
/// test` and `gate compile` in a gate's project folder):
/// `$XDG_CACHE_HOME/automaton`, else `~/.cache/automaton`; `None` when
/// neither variable is set.
pub fn user_cache_dir() -> Option<PathBuf> {
    let base = env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("automaton"))
}

fn default_root() -> PathBuf {
    let data = env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("automaton")
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
