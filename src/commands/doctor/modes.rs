//! The modes of a root's files: in a root shared by a group (its directory
//! set-group-ID), what the group's members could not use as automaton does
//! (a file not theirs to read and write, a directory not theirs to search
//! and write, or of another group); in any root, what anyone could write.
//! `--fix` (and `init --group`) gives what is this user's its modes; what
//! belongs to someone else is named for its owner to fix. A directory that
//! holds `.git` is a loop's work, not the store's, and is not walked; nor
//! is a user's own gate cache (`cache/gates/<uid>/`), private by design.

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::fsx::Modes;
use crate::fsx::mode::{Fault, shared_fault, shared_mode};
use crate::store::{Finding, Level};

/// How many paths a finding names before it counts the rest.
const SHOWN: usize = 10;

/// One path whose mode is wrong.
struct Wrong {
    path: PathBuf,
    fault: Fault,
    owner: u32,
    mode: u32,
}

/// What a walk of the root found and did.
#[derive(Default)]
pub(crate) struct Walked {
    wrong: Vec<Wrong>,
    /// Paths whose mode (and group) were fixed.
    pub fixed: usize,
}

impl Walked {
    /// Paths still wrong.
    pub(crate) fn left(&self) -> usize {
        self.wrong.len()
    }
}

/// Walks the root at `root`: for a group's root, every path checked
/// against the group's modes; for another, against others' write. With
/// `fix`, this user's paths are given their modes (and the root's group).
pub(crate) fn walk(root: &Path, fix: bool) -> Walked {
    let group = Modes::of_dir(root).group;
    let mut walked = Walked::default();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let names: Vec<OsString> = entries.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
        if dir != root && names.iter().any(|n| n == ".git") {
            continue;
        }
        for name in names {
            let path = dir.join(name);
            let Ok(meta) = path.symlink_metadata() else {
                continue;
            };
            if meta.file_type().is_symlink() || is_own_gate_cache(root, &path) {
                continue;
            }
            if meta.is_dir() {
                stack.push(path.clone());
            }
            check_one(path, &meta, group, fix, &mut walked);
        }
    }
    if let Ok(meta) = root.symlink_metadata() {
        check_one(root.to_path_buf(), &meta, group, fix, &mut walked);
    }
    walked
}

/// A user's own compiled-gate cache in a group's root: no member's but
/// theirs to read or write.
fn is_own_gate_cache(root: &Path, path: &Path) -> bool {
    path.parent() == Some(root.join("cache").join("gates").as_path())
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn check_one(path: PathBuf, meta: &std::fs::Metadata, group: Option<u32>, fix: bool, walked: &mut Walked) {
    let fault = match group {
        Some(g) => shared_fault(meta, g),
        None => (meta.mode() & 0o002 != 0).then_some(Fault::OthersWrite),
    };
    let Some(fault) = fault else {
        return;
    };
    let mine = meta.uid() == nix::unistd::geteuid().as_raw();
    if fix && mine && repair(&path, meta, group).is_ok() {
        walked.fixed += 1;
        return;
    }
    walked.wrong.push(Wrong {
        path,
        fault,
        owner: meta.uid(),
        mode: meta.mode() & 0o7777,
    });
}

/// Gives one path of this user's the root's group and its mode.
fn repair(path: &Path, meta: &std::fs::Metadata, group: Option<u32>) -> std::io::Result<()> {
    let mode = match group {
        Some(g) => {
            if meta.gid() != g {
                std::os::unix::fs::lchown(path, None, Some(g))?;
            }
            shared_mode(meta)
        }
        None => meta.mode() & 0o7777 & !0o002,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// The findings of a walk of the root at `root`.
pub(crate) fn findings(root: &Path, walked: &Walked) -> Vec<Finding> {
    let group = Modes::of_dir(root).group;
    let mut out = Vec::new();
    if walked.fixed > 0 {
        out.push(Finding::ok(
            "modes",
            format!("gave {} paths their modes", walked.fixed),
        ));
    }
    for w in walked.wrong.iter().take(SHOWN) {
        out.push(finding(w, group));
    }
    if walked.wrong.len() > SHOWN {
        out.push(Finding::new(
            "modes",
            Level::Warning,
            format!(
                "and {} more paths whose modes are wrong",
                walked.wrong.len() - SHOWN
            ),
            "`automaton doctor --json` lists them all once the first are fixed",
        ));
    }
    if out.is_empty() {
        let said = match group {
            Some(g) => format!(
                "shared with group {}: every path its members' to use",
                group_name(g)
            ),
            None => "no path others can write".to_owned(),
        };
        out.push(Finding::ok("modes", said));
    }
    out
}

fn finding(w: &Wrong, group: Option<u32>) -> Finding {
    let path = w.path.display();
    let group = group.map(group_name).unwrap_or_default();
    let message = match w.fault {
        Fault::OthersWrite => format!("{path} can be written by anyone (mode {:o})", w.mode),
        Fault::Group => format!("{path} does not belong to group {group}, so its members cannot use it"),
        Fault::Missing(bits) => format!(
            "{path} lacks the group's {} (mode {:o}), so other members of {group} cannot use it",
            describe(bits),
            w.mode
        ),
    };
    let finding = Finding::new("modes", Level::Warning, message, action(w));
    if w.owner == nix::unistd::geteuid().as_raw() {
        finding.fixable()
    } else {
        finding
    }
}

fn action(w: &Wrong) -> String {
    if w.owner == nix::unistd::geteuid().as_raw() {
        return "`automaton doctor --fix` sets it".to_owned();
    }
    let owner = nix::unistd::User::from_uid(w.owner.into())
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {}", w.owner), |u| u.name);
    format!("its owner ({owner}) runs `automaton doctor --fix`, or root sets it")
}

/// `read and write`, `search and set-group-ID`, ...
fn describe(bits: u32) -> String {
    let mut words = Vec::new();
    for (bit, word) in [
        (0o040, "read"),
        (0o020, "write"),
        (0o010, "search"),
        (0o2000, "set-group-ID"),
    ] {
        if bits & bit != 0 {
            words.push(word);
        }
    }
    words.join(" and ")
}

/// A group's name, or its number when it has none.
pub(crate) fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(gid.into())
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name)
}
