//! Finding the root (SPEC §3) and validating loop names before any file is
//! touched.

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The directory that holds `loops/` and `cache/`.
#[derive(Debug, Clone)]
pub struct Root {
    path: PathBuf,
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
    pub fn locate(flag: Option<&Path>) -> Result<(Root, Origin)> {
        let cwd = env::current_dir().map_err(Error::io("reading the working directory", "."))?;
        let (path, origin) = if let Some(p) = flag {
            (p.to_path_buf(), Origin::Flag)
        } else if let Some(p) = env::var_os("AUTOMATON_ROOT").filter(|v| !v.is_empty()) {
            (PathBuf::from(p), Origin::Env)
        } else if let Some(p) = cwd.ancestors().map(|d| d.join(".automaton")).find(|d| d.is_dir()) {
            (p, Origin::Discovered)
        } else {
            (default_root(), Origin::Default)
        };
        Ok((Root { path: cwd.join(path) }, origin))
    }

    /// Resolves the root and checks that it has been initialised.
    pub fn open(flag: Option<&Path>) -> Result<Root> {
        let (root, _) = Root::locate(flag)?;
        if !root.loops_dir().is_dir() {
            return Err(Error::NoRoot { path: root.path });
        }
        Ok(root)
    }

    pub fn at(path: impl Into<PathBuf>) -> Root {
        Root { path: path.into() }
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
