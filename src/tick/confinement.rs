//! What a tick's step may touch, said as a [`Policy`] from the loop's
//! `[step]` table, the root's layout and the runner's environment
//! (src/step/confine.rs enforces it; docs/steps.md, "What a step can and
//! cannot do", tells it).

use std::path::{Path, PathBuf};

use crate::config::{Connect, LoopConfig};
use crate::step::confine::{Policy, Ports, resolved};

use super::process::Env;

/// Where a step may write whatever its loop says: the temporary
/// directories and the devices every program expects to write.
const ALWAYS_WRITABLE: &[&str] = &[
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/random",
    "/dev/urandom",
];

/// The policy of the step of `config`, running in `cwd`.
pub(super) fn policy(config: &LoopConfig, cwd: &Path, env: &Env<'_>) -> Policy {
    let root = resolved(env.root);
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let in_loop = |p: &PathBuf| resolved(&expand(p, env.loop_dir, home.as_deref()));

    let mut own = vec![resolved(env.run_dir)];
    let mut writable: Vec<PathBuf> = ALWAYS_WRITABLE.iter().map(PathBuf::from).collect();
    if let Some(tmp) = std::env::var_os("TMPDIR").filter(|t| !t.is_empty()) {
        writable.push(resolved(Path::new(&tmp)));
    }
    if let Some(w) = env.worktree {
        own.push(resolved(w));
        writable.extend(git_dir(w));
    }
    let cwd = resolved(cwd);
    if !cwd.starts_with(&root) {
        writable.push(cwd.clone());
    }
    writable.extend(config.step.writable.iter().map(in_loop));

    let mut readable = vec![resolved(env.loop_dir), cwd];
    readable.extend(config.step.readable.iter().map(in_loop));

    Policy {
        connect: connect(&config.step.connect, &root),
        secrets: secrets(&root, home.as_deref()),
        hidden: home
            .iter()
            .flat_map(|h| [h.join(".ssh"), h.join(".gnupg")])
            .map(|p| resolved(&p))
            .collect(),
        root,
        own,
        readable,
        writable,
    }
}

/// Where the step's temporary files go when the temporary directory holds
/// the root (so it is granted only entry by entry, and a new file in it is
/// refused): a `tmp` directory in the run directory, given as `TMPDIR`.
pub(super) fn private_tmpdir(root: &Path, run_dir: &Path) -> Option<PathBuf> {
    let tmp = std::env::var_os("TMPDIR")
        .filter(|t| !t.is_empty())
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    resolved(root)
        .starts_with(resolved(&tmp))
        .then(|| run_dir.join("tmp"))
}

/// `~/x` under the home, a relative path under the loop's directory.
fn expand(path: &Path, loop_dir: &Path, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => loop_dir.join(path),
    }
}

/// What grants power, never readable nor writable by a step: the console's
/// users, the root's config (its `store` may carry a password), the
/// compiled-gate caches and their sealing keys, libpq's credentials.
fn secrets(root: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut secrets = vec![
        root.join("users.json"),
        root.join("users.lock"),
        root.join(crate::root::ROOT_CONFIG),
        root.join("cache"),
    ];
    secrets.extend(crate::root::user_cache_dir());
    if let Some(home) = home {
        secrets.extend([
            home.join(".pgpass"),
            home.join(".pg_service.conf"),
            home.join(".postgresql"),
        ]);
    }
    for var in ["PGPASSFILE", "PGSERVICEFILE", "PGSSLKEY"] {
        secrets.extend(std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from));
    }
    // The link and what it leads to (the cache may be a link elsewhere).
    let targets: Vec<PathBuf> = secrets.iter().map(|p| resolved(p)).collect();
    secrets.extend(targets);
    secrets.sort();
    secrets.dedup();
    secrets
}

/// The repository's git directory of worktree `w` (where its commits are
/// written): what its `.git` file names, up to the common directory.
fn git_dir(w: &Path) -> Option<PathBuf> {
    let dot_git = w.join(".git");
    if dot_git.is_dir() {
        return Some(resolved(&dot_git));
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let gitdir = w.join(text.strip_prefix("gitdir:")?.trim());
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(c) => gitdir.join(c.trim()),
        Err(_) => gitdir,
    };
    Some(resolved(&common))
}

/// Which TCP ports the step may connect to: all but the consoles' (when a
/// console serves the root), any, or only those the loop lists.
fn connect(connect: &Connect, root: &Path) -> Option<Ports> {
    match connect {
        Connect::Any => None,
        Connect::Only(ports) => Some(Ports::Only(ports.clone())),
        Connect::NotConsole => {
            let ports = crate::serve::ports::listening(root);
            (!ports.is_empty()).then_some(Ports::AllBut(ports))
        }
    }
}

/// Whether this process may run a step as another user: it holds
/// CAP_SETUID and CAP_SETGID (root does, unless they were dropped). Where
/// `/proc` cannot tell, root may.
pub(super) fn may_switch_users() -> bool {
    const CAP_SETGID: u32 = 6;
    const CAP_SETUID: u32 = 7;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        #[cfg(unix)]
        return nix::unistd::geteuid().is_root();
        #[cfg(windows)]
        return false;
    };
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    effective & (1 << CAP_SETUID) != 0 && effective & (1 << CAP_SETGID) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_taken_relative_to_the_loop_or_the_home() {
        let (dir, home) = (Path::new("/r/loops/a"), Some(Path::new("/home/u")));
        assert_eq!(expand(Path::new("~/.ssh"), dir, home), Path::new("/home/u/.ssh"));
        assert_eq!(expand(Path::new("data"), dir, home), Path::new("/r/loops/a/data"));
        assert_eq!(expand(Path::new("/srv/x"), dir, home), Path::new("/srv/x"));
        assert_eq!(expand(Path::new("~/x"), dir, None), Path::new("/r/loops/a/~/x"));
    }

    #[test]
    fn a_worktrees_git_directory_is_its_repositorys_common_one() {
        let d = tempfile::tempdir().unwrap();
        let common = d.path().join("repo/.git");
        let own = common.join("worktrees/wt");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("commondir"), "../..\n").unwrap();
        let wt = d.path().join("wt");
        std::fs::create_dir(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", own.display())).unwrap();
        assert_eq!(git_dir(&wt), Some(resolved(&common)));
        std::fs::remove_file(wt.join(".git")).unwrap();
        assert_eq!(git_dir(&wt), None);
    }

    #[cfg(unix)]
    #[test]
    fn the_secrets_name_the_users_the_config_and_the_cache_also_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let shared = d.path().join("shared-cache");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir(&shared).unwrap();
        std::os::unix::fs::symlink(&shared, root.join("cache")).unwrap();
        let s = secrets(&root, Some(Path::new("/home/u")));
        for p in [
            root.join("users.json"),
            root.join("automaton.toml"),
            root.join("cache"),
            resolved(&shared),
            PathBuf::from("/home/u/.pgpass"),
        ] {
            assert!(s.contains(&p), "{} not in {s:?}", p.display());
        }
    }
}
