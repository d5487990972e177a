//! The loop's git worktree: made with `git worktree add` on first use and
//! reused after, and snapshotted before and after the step so the tick knows
//! whether the step changed anything (and what an approval with `bind =
//! "commit"` is bound to: [`Snapshot::digest`]). Git runs as a real process,
//! hardened against the repository's own settings and bounded in time
//! (src/worktree/git.rs), with its stderr carried in the errors.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use thiserror::Error;

mod git;
#[cfg(all(test, unix))]
mod tests;

use git::{Git, check, stderr};

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ensured {
    /// The worktree was added now.
    Created,
    /// The worktree was already there, on the branch.
    Existed,
}

#[derive(Debug, Error)]
pub(crate) enum WorktreeError {
    #[error("git is not installed (cannot run {})", program.to_string_lossy())]
    GitNotFound { program: OsString },
    #[error("cannot run git in {}", dir.display())]
    Spawn {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is not a git repository: {stderr}", repo.display())]
    NotARepo { repo: PathBuf, stderr: String },
    #[error("invalid branch name {branch:?}")]
    BadBranch { branch: String },
    #[error("branch {branch:?} is already checked out at {}", at.display())]
    CheckedOutElsewhere { branch: String, at: PathBuf },
    #[error("{} is a worktree on {found}, not on branch {branch:?}", path.display())]
    OtherBranch {
        path: PathBuf,
        branch: String,
        found: String,
    },
    #[error("`git {args}` failed in {}: {stderr}", dir.display())]
    Git {
        dir: PathBuf,
        args: String,
        stderr: String,
    },
    #[error("`git {args}` in {} did not end within {}s and was killed", dir.display(), after.as_secs())]
    Timeout {
        dir: PathBuf,
        args: String,
        after: Duration,
    },
}

/// The state of a worktree at one moment; two snapshots differ when anything
/// in the worktree changed between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The commit checked out; none on an unborn branch.
    pub head: Option<String>,
    /// `git status --porcelain=v1 -z --untracked-files=all`.
    pub status: String,
    /// The blob ids of the files `status` lists, so that editing an already
    /// modified file again is a change too.
    pub contents: String,
    /// The tracked files git is told not to look at (`update-index
    /// --assume-unchanged` or `--skip-worktree`), which `status` does not
    /// list, that differ from their index entry: `TAG INDEX NOW\tPATH`
    /// each, ended by a NUL (`NOW` is `-` for a file that is not there).
    pub hidden: String,
}

impl Snapshot {
    /// The sha256 of the whole snapshot, in hex: what an approval given
    /// with `bind = "commit"` records, and what voids it when it differs.
    pub(crate) fn digest(&self) -> String {
        let mut h = Sha256::new();
        let head = self.head.as_deref().unwrap_or("");
        for part in [head, &self.status, &self.contents, &self.hidden] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The uncommitted changes and untracked files, one `XY path` line
    /// each as `git status --short` has them (`??` for untracked; a rename
    /// as `R  new <- old`); empty for a clean worktree.
    pub(crate) fn dirty(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut fields = self.status.split('\0').filter(|f| !f.is_empty());
        while let Some(entry) = fields.next() {
            let (Some(xy), Some(name)) = (entry.get(..2), entry.get(3..)) else {
                continue;
            };
            match xy.as_bytes()[0] {
                b'R' | b'C' => lines.push(format!("{xy} {name} <- {}", fields.next().unwrap_or(""))),
                _ => lines.push(format!("{xy} {name}")),
            }
        }
        for entry in self.hidden.split('\0').filter(|f| !f.is_empty()) {
            let (meta, name) = entry.split_once('\t').unwrap_or(("", entry));
            let (flag, change) = match (meta.as_bytes().first(), meta.ends_with(" -")) {
                (Some(b'S' | b's'), _) => ("skip-worktree", " M"),
                (_, true) => ("assume-unchanged", " D"),
                _ => ("assume-unchanged", " M"),
            };
            lines.push(format!("{change} {name} (marked {flag})"));
        }
        lines
    }

    /// The untracked files `status` lists.
    fn untracked(&self) -> impl Iterator<Item = &str> {
        self.status.split('\0').filter_map(|f| f.strip_prefix("?? "))
    }
}

/// Makes sure a worktree of `repo` on `branch` is at `path`: adds it on first
/// use, creating `branch` from `repo`'s HEAD if it does not exist; does
/// nothing when it is already there.
pub(crate) fn ensure(repo: &Path, branch: &str, path: &Path) -> Result<Ensured, WorktreeError> {
    ensure_with(&Git::default(), repo, branch, path)
}

/// Records the state of the worktree at `path`.
pub(crate) fn snapshot(path: &Path) -> Result<Snapshot, WorktreeError> {
    snapshot_with(&Git::default(), path)
}

/// The most uncommitted changes and untracked files an
/// `approvals-dropped` event lists.
pub(crate) const MAX_DIRTY_LISTED: usize = 100;

/// Where the worktree at `path` stands, for an await or an approval: its
/// HEAD, and with `whole` (`bind = "commit"`) the digest of its whole
/// snapshot, returned too. What git cannot read is none, which an
/// approval bound to it does not match.
pub(crate) fn at(path: &Path, whole: bool) -> (crate::state::At, Option<Snapshot>) {
    if !whole {
        return (crate::state::At::head(head(path).ok().flatten()), None);
    }
    match snapshot(path) {
        Ok(s) => {
            let at = crate::state::At {
                head: s.head.clone(),
                snapshot: Some(s.digest()),
            };
            (at, Some(s))
        }
        Err(e) => {
            tracing::warn!("cannot snapshot the worktree {}: {e}", path.display());
            (crate::state::At::default(), None)
        }
    }
}

/// The commit checked out in the worktree at `path`; none on a branch with
/// no commit yet.
pub(crate) fn head(path: &Path) -> Result<Option<String>, WorktreeError> {
    let git = Git::default().for_worktree(path);
    let out = git.output(path, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], None)?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

/// `git log --oneline from..to` in the worktree at `path`, newest first.
pub(crate) fn log(path: &Path, from: &str, to: &str) -> Result<Vec<String>, WorktreeError> {
    let range = format!("{from}..{to}");
    let out = Git::default().for_worktree(path).run(
        path,
        &[
            "log",
            "--oneline",
            "--no-decorate",
            "--no-color",
            "--no-show-signature",
            &range,
            "--",
        ],
    )?;
    Ok(String::from_utf8_lossy(&out).lines().map(str::to_owned).collect())
}

/// The most bytes of a patch (or diffstat) [`diff`] returns: the rest is
/// counted, never held, and said in one line ([`truncated`]).
pub(crate) const MAX_PATCH: usize = 1024 * 1024;

/// `git diff --stat=80 from to` (`stat`), or the patch, in the worktree at
/// `path`: at most [`MAX_PATCH`] bytes, then `[truncated, N bytes more]`.
pub(crate) fn diff(path: &Path, from: &str, to: &str, stat: bool) -> Result<String, WorktreeError> {
    let mut args = DIFF.to_vec();
    if stat {
        args.push("--stat=78");
    }
    args.extend([from, to, "--"]);
    let out = Git::default()
        .for_worktree(path)
        .bounded(path, &args, MAX_PATCH)?;
    Ok(truncated(out.kept, out.more))
}

/// A patch cut at a byte bound, as text: a character the cut split is
/// left out with its bytes counted, and what was left out said at the end.
fn truncated(mut kept: Vec<u8>, mut more: u64) -> String {
    if more == 0 {
        return String::from_utf8_lossy(&kept).into_owned();
    }
    let valid = match std::str::from_utf8(&kept) {
        Ok(_) => kept.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => kept.len(),
    };
    more += (kept.len() - valid) as u64;
    kept.truncate(valid);
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text + &format!("[truncated, {more} bytes more]\n")
}

/// How every diff is asked for: no colour, no external diff program, no
/// textconv.
const DIFF: [&str; 4] = ["diff", "--no-color", "--no-ext-diff", "--no-textconv"];

/// The most bytes of the uncommitted patch [`uncommitted_diff`] returns.
pub(crate) const MAX_UNCOMMITTED_PATCH: usize = 256 * 1024;

/// The uncommitted changes of the worktree at `path` as a patch: `git diff
/// HEAD` for the tracked files, then each untracked file `snapshot` lists
/// as added, cut at [`MAX_UNCOMMITTED_PATCH`] bytes (saying so).
pub(crate) fn uncommitted_diff(path: &Path, snapshot: &Snapshot) -> Result<String, WorktreeError> {
    let git = Git::default().for_worktree(path).without_filters(path)?;
    let mut patch = Vec::new();
    if snapshot.head.is_some() {
        let mut args = DIFF.to_vec();
        args.extend(["HEAD", "--"]);
        patch = git.run(path, &args)?;
    }
    for name in snapshot.untracked() {
        if patch.len() >= MAX_UNCOMMITTED_PATCH {
            break;
        }
        let mut args = DIFF.to_vec();
        args.extend(["--no-index", "--", "/dev/null", name]);
        let out = git.output(path, &args, None)?;
        // `--no-index` exits 1 when the files differ, as they do here.
        if out.status.code() != Some(1) {
            check(path, &args, &out)?;
        }
        patch.extend_from_slice(&out.stdout);
    }
    let mut text = String::from_utf8_lossy(&patch).into_owned();
    if text.len() > MAX_UNCOMMITTED_PATCH {
        let mut cut = MAX_UNCOMMITTED_PATCH;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text += &format!("\n[uncommitted patch cut at {MAX_UNCOMMITTED_PATCH} bytes]\n");
    }
    Ok(text)
}

fn ensure_with(git: &Git, repo: &Path, branch: &str, path: &Path) -> Result<Ensured, WorktreeError> {
    let probe = git.output(repo, &["rev-parse", "--git-dir"], None)?;
    if !probe.status.success() {
        return Err(WorktreeError::NotARepo {
            repo: repo.to_owned(),
            stderr: stderr(&probe),
        });
    }
    let bad_branch = || WorktreeError::BadBranch {
        branch: branch.to_owned(),
    };
    if branch.starts_with('-') {
        return Err(bad_branch());
    }
    if !git
        .output(repo, &["check-ref-format", "--branch", branch], None)?
        .status
        .success()
    {
        return Err(bad_branch());
    }
    let path = std::path::absolute(path).map_err(|source| WorktreeError::Spawn {
        dir: path.to_owned(),
        source,
    })?;
    let want_ref = format!("refs/heads/{branch}");

    let mut entries = list(git, repo)?;
    let stale =
        |e: &Entry| !e.path.exists() && (same_path(&e.path, &path) || e.branch.as_deref() == Some(&want_ref));
    if entries.iter().any(stale) {
        // A worktree deleted by hand is still registered; forget it first.
        git.run(repo, &["worktree", "prune"])?;
        entries = list(git, repo)?;
    }
    if let Some(here) = entries.iter().find(|e| same_path(&e.path, &path)) {
        return match &here.branch {
            Some(found) if *found == want_ref => Ok(Ensured::Existed),
            found => Err(WorktreeError::OtherBranch {
                path,
                branch: branch.to_owned(),
                found: match found {
                    Some(r) => format!("branch {:?}", r.trim_start_matches("refs/heads/")),
                    None => "a detached HEAD".to_owned(),
                },
            }),
        };
    }
    if let Some(other) = entries.iter().find(|e| e.branch.as_deref() == Some(&want_ref)) {
        return Err(WorktreeError::CheckedOutElsewhere {
            branch: branch.to_owned(),
            at: other.path.clone(),
        });
    }

    let exists = git
        .output(repo, &["rev-parse", "--verify", "--quiet", &want_ref], None)?
        .status
        .success();
    // Checking out runs smudge filters: none of the repository's.
    let git = &git.without_filters(repo)?;
    tracing::debug!(repo = %repo.display(), branch, path = %path.display(), new_branch = !exists, "adding worktree");
    let path_arg = path.as_os_str();
    if exists {
        git.run(
            repo,
            &["worktree".as_ref(), "add".as_ref(), path_arg, branch.as_ref()],
        )?;
    } else {
        let args: [&OsStr; 6] = [
            "worktree".as_ref(),
            "add".as_ref(),
            "-b".as_ref(),
            branch.as_ref(),
            path_arg,
            "HEAD".as_ref(),
        ];
        git.run(repo, &args)?;
    }
    Ok(Ensured::Created)
}

fn snapshot_with(git: &Git, path: &Path) -> Result<Snapshot, WorktreeError> {
    let git = &git.for_worktree(path);
    let status = git
        .without_filters(path)?
        .run(path, &["status", "--porcelain=v1", "-z", "--untracked-files=all"])?;
    let head = git.output(path, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], None)?;
    let head = head
        .status
        .success()
        .then(|| String::from_utf8_lossy(&head.stdout).trim().to_owned());

    // Files that exist now, among those status lists (renames list the old
    // name too; deleted files have no content).
    let mut files = Vec::new();
    let mut fields = status.split(|&b| b == 0).filter(|f| !f.is_empty());
    while let Some(entry) = fields.next() {
        if entry.len() < 4 {
            continue;
        }
        if matches!(entry[0], b'R' | b'C') {
            fields.next();
        }
        let name = &entry[3..];
        if is_file(path, name) {
            files.extend_from_slice(name);
            files.push(b'\n');
        }
    }
    let contents = hash_files(git, path, &files)?;
    Ok(Snapshot {
        head,
        status: String::from_utf8_lossy(&status).into_owned(),
        contents,
        hidden: hidden_changes(git, path)?,
    })
}

/// Whether `name` (relative to `path`) is a regular file that
/// `hash-object --stdin-paths` can be given.
fn is_file(path: &Path, name: &[u8]) -> bool {
    std::str::from_utf8(name)
        .ok()
        .filter(|n| !n.contains('\n'))
        .and_then(|n| std::fs::symlink_metadata(path.join(n)).ok())
        .is_some_and(|m| m.is_file())
}

/// The blob ids of `files` (newline-ended names), as stored, one a line.
fn hash_files(git: &Git, path: &Path, files: &[u8]) -> Result<String, WorktreeError> {
    if files.is_empty() {
        return Ok(String::new());
    }
    let args = ["hash-object", "--no-filters", "--stdin-paths"];
    let out = git.output(path, &args, Some(files))?;
    check(path, &args, &out)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`Snapshot::hidden`]: the index entries flagged assume-unchanged
/// (`ls-files -v` tags them in lower case) or skip-worktree (`S`) whose
/// file differs from the entry. A skip-worktree file that is not there is
/// a sparse checkout's, not a change.
fn hidden_changes(git: &Git, path: &Path) -> Result<String, WorktreeError> {
    let listed = git.run(path, &["ls-files", "-v", "-s", "-z"])?;
    let mut flagged = Vec::new();
    for entry in listed.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let tag = entry[0];
        if tag.is_ascii_uppercase() && tag != b'S' {
            continue;
        }
        let text = String::from_utf8_lossy(entry);
        if let Some((meta, name)) = text.split_once('\t') {
            let index = meta.split(' ').nth(2).unwrap_or("").to_owned();
            flagged.push((tag, index, name.to_owned()));
        }
    }
    let present: Vec<bool> = flagged
        .iter()
        .map(|(_, _, n)| is_file(path, n.as_bytes()))
        .collect();
    let mut files = Vec::new();
    for ((_, _, name), _) in flagged.iter().zip(&present).filter(|(_, p)| **p) {
        files.extend_from_slice(name.as_bytes());
        files.push(b'\n');
    }
    let hashed = hash_files(git, path, &files)?;
    let mut ids = hashed.lines();
    let mut hidden = String::new();
    for ((tag, index, name), present) in flagged.iter().zip(present) {
        let now = if present { ids.next().unwrap_or("") } else { "-" };
        let sparse = matches!(tag, b'S' | b's') && !present;
        if now != index && !sparse {
            hidden += &format!("{} {index} {now}\t{name}\0", *tag as char);
        }
    }
    Ok(hidden)
}

/// One entry of `git worktree list --porcelain`.
struct Entry {
    path: PathBuf,
    /// `refs/heads/...`; none when detached or bare.
    branch: Option<String>,
}

fn list(git: &Git, repo: &Path) -> Result<Vec<Entry>, WorktreeError> {
    let out = git.run(repo, &["worktree", "list", "--porcelain"])?;
    let mut entries = Vec::new();
    for line in String::from_utf8_lossy(&out).lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            entries.push(Entry {
                path: PathBuf::from(p),
                branch: None,
            });
        } else if let (Some(b), Some(last)) = (line.strip_prefix("branch "), entries.last_mut()) {
            last.branch = Some(b.to_owned());
        }
    }
    Ok(entries)
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
