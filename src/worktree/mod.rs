//! The loop's git worktree: made with `git worktree add` on first use and
//! reused after, and snapshotted before and after the step so the tick knows
//! whether the step changed anything. Git runs as a real process (`git -C`),
//! never prompting, with its stderr carried in the errors.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use thiserror::Error;

#[cfg(test)]
mod tests;

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The worktree was added now.
    Created,
    /// The worktree was already there, on the branch.
    Existed,
}

#[derive(Debug, Error)]
pub enum WorktreeError {
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
}

/// The state of a worktree at one moment; two snapshots differ when anything
/// in the worktree changed between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The commit checked out; none on an unborn branch.
    pub head: Option<String>,
    /// `git status --porcelain=v1 -z --untracked-files=all`.
    pub status: String,
    /// The blob ids of the files `status` lists, so that editing an already
    /// modified file again is a change too.
    pub contents: String,
}

/// Makes sure a worktree of `repo` on `branch` is at `path`: adds it on first
/// use, creating `branch` from `repo`'s HEAD if it does not exist; does
/// nothing when it is already there.
pub fn ensure(repo: &Path, branch: &str, path: &Path) -> Result<Ensured, WorktreeError> {
    ensure_with(&Git::default(), repo, branch, path)
}

/// Records the state of the worktree at `path`.
pub fn snapshot(path: &Path) -> Result<Snapshot, WorktreeError> {
    snapshot_with(&Git::default(), path)
}

/// The commit checked out in the worktree at `path`; none on a branch with
/// no commit yet.
pub fn head(path: &Path) -> Result<Option<String>, WorktreeError> {
    let git = Git::default();
    let out = git.output(path, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], None)?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

/// `git log --oneline from..to` in the worktree at `path`, newest first.
pub fn log(path: &Path, from: &str, to: &str) -> Result<Vec<String>, WorktreeError> {
    let range = format!("{from}..{to}");
    let out = Git::default().run(
        path,
        &["log", "--oneline", "--no-decorate", "--no-color", &range, "--"],
    )?;
    Ok(String::from_utf8_lossy(&out).lines().map(str::to_owned).collect())
}

/// `git diff --stat=80 from to` (`stat`), or the patch, in the worktree at
/// `path`.
pub fn diff(path: &Path, from: &str, to: &str, stat: bool) -> Result<String, WorktreeError> {
    let mut args = vec!["diff", "--no-color", "--no-ext-diff"];
    if stat {
        args.push("--stat=78");
    }
    args.extend([from, to, "--"]);
    let out = Git::default().run(path, &args)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
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
    let status = git.run(path, &["status", "--porcelain=v1", "-z", "--untracked-files=all"])?;
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
        let is_file = std::str::from_utf8(name)
            .ok()
            .filter(|n| !n.contains('\n'))
            .and_then(|n| std::fs::symlink_metadata(path.join(n)).ok())
            .is_some_and(|m| m.is_file());
        if is_file {
            files.extend_from_slice(name);
            files.push(b'\n');
        }
    }
    let contents = if files.is_empty() {
        String::new()
    } else {
        let out = git.output(path, &["hash-object", "--stdin-paths"], Some(&files))?;
        check(path, &["hash-object", "--stdin-paths"], &out)?;
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    Ok(Snapshot {
        head,
        status: String::from_utf8_lossy(&status).into_owned(),
        contents,
    })
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

/// How git is run: the program, never prompting, ignoring the variables that
/// would point it at another repository than `-C` names.
struct Git {
    program: OsString,
}

impl Default for Git {
    fn default() -> Git {
        Git {
            program: "git".into(),
        }
    }
}

impl Git {
    fn output<S: AsRef<OsStr>>(
        &self,
        dir: &Path,
        args: &[S],
        stdin: Option<&[u8]>,
    ) -> Result<Output, WorktreeError> {
        let mut cmd = Command::new(&self.program);
        cmd.arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_COMMON_DIR",
            "GIT_OBJECT_DIRECTORY",
        ] {
            cmd.env_remove(var);
        }
        let spawn_err = |source: io::Error| match source.kind() {
            io::ErrorKind::NotFound => WorktreeError::GitNotFound {
                program: self.program.clone(),
            },
            _ => WorktreeError::Spawn {
                dir: dir.to_owned(),
                source,
            },
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let output = std::thread::scope(|s| {
            // Write from another thread, so a full stdout pipe cannot deadlock us.
            if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
                s.spawn(move || pipe.write_all(input));
            }
            child.wait_with_output()
        });
        output.map_err(|source| WorktreeError::Spawn {
            dir: dir.to_owned(),
            source,
        })
    }

    /// Runs git and returns its stdout; failing is an error.
    fn run<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Result<Vec<u8>, WorktreeError> {
        let out = self.output(dir, args, None)?;
        check(dir, args, &out)?;
        Ok(out.stdout)
    }
}

fn check<S: AsRef<OsStr>>(dir: &Path, args: &[S], out: &Output) -> Result<(), WorktreeError> {
    if out.status.success() {
        return Ok(());
    }
    let args: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    Err(WorktreeError::Git {
        dir: dir.to_owned(),
        args: args.join(" "),
        stderr: stderr(out),
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}
